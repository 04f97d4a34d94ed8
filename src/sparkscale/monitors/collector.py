"""Live snapshots of an app's queries: the I/O (Spark REST, Redis, psutil), then the pure builder.

An app is any PySpark script with any number of queries on any sources. The agent lists the app's
queries (`store.redis_queries.read_queries`) and publishes each query's progress reports, with what
its sources say about backlog and position; the monitor builds one snapshot per query that has not
terminated, from one REST round for the app (the application id, asked once per driver; the
executors and the jobs at once; then the window's batches' stages not kept yet, side by side:
`driver_round.py`; in the daemon, the round the stage prefetcher read just before the cycle, when
fresh: `stage_prefetch.py`) and the daemon host's latest reading (`host_sampler.py`). The executors' CPU
and memory come from Spark's metrics over the tasks of every query's window
(`executor_figures.py`), so every query's snapshot carries the same app-wide executor figures.
`collect_snapshot` merges them into the app's snapshot. Where the app's executors run, by
standalone worker (`extensions["cluster"]`, for the spread rule), comes from the master and its
workers (`cluster_view.py`, a view kept and renewed off the cycle; `loop.cluster_view`).

The daemon calls `collect_riding` once per loop and app, with its own Redis client (one
connection pool for the process, no connection opened per cycle) and the reads of the app its
control loop makes in the same round trip (`collect_reads.Ride`). The Redis reads are one round
trip when the cycle takes the round the prefetcher kept, two when it reads its own
(`collect_reads.py`: the driver's registration and the query list, then the executor target,
every query's progress and the ride). `AppNotRunningError` means the driver's REST API did not
answer, `NoQueriesYet` that the agent has listed no query yet: either way the daemon takes no
action this cycle.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import redis
import structlog

from sparkscale.config import AppConfig, Config
from sparkscale.model.snapshot import Snapshot
from sparkscale.model.snapshot_merge import merge_snapshots
from sparkscale.monitors.cluster_view import cluster_extension
from sparkscale.monitors.collect_reads import (
    LAST_OBSERVED,
    AppTrips,
    Histories,
    Observed,
    Ride,
    no_ride,
    progress_reports,
    stream_min,
)
from sparkscale.monitors.driver_round import (
    DriverRest,
    DriverRound,
    DriverSilent,
    MeteredPool,
    fetch_stages,
    read_round,
)
from sparkscale.monitors.executor_figures import app_extension, window_work
from sparkscale.monitors.host import sample_host
from sparkscale.monitors.host_sampler import HOST
from sparkscale.monitors.progress_reports import ProgressReport
from sparkscale.monitors.snapshot_builder import (
    Batch,
    SnapshotInputs,
    batch_running_since,
    build_snapshot,
    finished_batches,
    window_batches,
)
from sparkscale.monitors.spark_rest import RestStage, SparkRestClient, SparkRestError, driver_rest_at
from sparkscale.monitors.stage_prefetch import PREFETCH, TakenRound
from sparkscale.protocol.keys import progress_history_key
from sparkscale.protocol.queries import QueryInfo
from sparkscale.redisconn import connect_as

log = structlog.get_logger(__name__)

HOST_SAMPLE_S = 0.5  # a blocking sample's length, where one is asked for (bench userjob)
NO_ROUND = TakenRound(None, None, 0.0, "none")  # no round asked for: no collect of the app observed it yet

T = TypeVar("T")


class AppNotRunningError(Exception):
    """The app's driver did not answer on its REST API: it is not running (or not yet)."""

    def __init__(self, app: str, url: str, cause: str):
        self.app = app
        self.url = url
        super().__init__(f"app {app!r} is not running: its Spark REST API at {url} did not answer ({cause})")


class NoQueriesYet(Exception):
    """The driver answers but its agent has listed no (live) query yet: nothing to observe."""

    def __init__(self, app: str, query: str | None = None, known: tuple[str, ...] = ()):
        self.app = app
        self.query = query
        self.known = known
        if query is None:
            text = f"app {app!r} runs but its agent has published no running query yet"
        else:
            listed = ", ".join(known) or "none yet"
            text = f"app {app!r} has no query {query!r} (its agent lists: {listed})"
        super().__init__(text)


@dataclass(frozen=True)
class CollectOptions:
    window_s: float | None = None  # default: loop.window_s
    host_sample_s: float | None = None  # default: loop.host_cpu_sample_s (0: the sampler's reading, no wait)


def collect_snapshot(cfg: Config, app_name: str, options: CollectOptions | None = None,
                     client: redis.Redis | None = None) -> Snapshot:
    """The app's snapshot: its queries' snapshots merged (`snapshot_merge`; one query: its own)."""
    return merge_snapshots(collect_snapshots(cfg, app_name, options=options, client=client))


def collect_snapshots(cfg: Config, app_name: str, query: str | None = None,
                      options: CollectOptions | None = None, client: redis.Redis | None = None) -> list[Snapshot]:
    """One Snapshot v1 per live query of the app (or of `query` only) over the last window, by name.

    `client`: a Redis client to read with (the daemon's, kept open); None: one opened for this call.
    Raises AppNotRunningError when the driver does not answer, NoQueriesYet when the agent lists no
    live query (or not `query`), KeyError for an unknown app, and SparkRestError / redis errors when
    a service answers wrongly.
    """
    return collect_riding(cfg, app_name, no_ride, query, options, client)[0]


def collect_riding(cfg: Config, app_name: str, ride: Ride[T], query: str | None = None,
                   options: CollectOptions | None = None, client: redis.Redis | None = None,
                   ) -> tuple[list[Snapshot], T]:
    """`collect_snapshots`, and what `ride` read in the collect's last Redis round trip for the
    queries observed (the control loop's reads of the app: control/stores.py)."""
    own = client is None
    redis_client = connect_as(cfg) if client is None else client  # this process's identity: the daemon's or the CLI's
    try:
        with MeteredPool() as pool:
            return _collect(cfg, app_name, query, options or CollectOptions(), redis_client, pool, ride)
    finally:
        if own:
            redis_client.close()


def _collect(cfg: Config, app_name: str, query: str | None, opts: CollectOptions, client: redis.Redis,
             pool: MeteredPool, ride: Ride[T]) -> tuple[list[Snapshot], T]:
    started = time.monotonic()
    cfg = cfg.with_app(app_name)
    app = cfg.app(app_name)
    window_s = opts.window_s or cfg.loop.window_s
    trips = AppTrips(client, cfg.redis.key_prefix, app, window_s, ride)
    # The round the prefetcher's last pass read for this cycle, when fresh (`stage_prefetch.py`): then
    # one round trip reads all, ahead for the queries the last collect observed (`collect_reads.py`).
    observed = LAST_OBSERVED.get(app.name) if query is None else None
    taken = PREFETCH.take_round(app.name, observed.base_url, cfg.loop.interval_s) if observed else NO_ROUND
    ahead: Histories[T] | None = None
    if observed is not None and taken.round is not None:
        listing, ahead = trips.everything(observed, taken.round.taken_at)
    else:
        listing = trips.listing()
    rest = _driver(cfg, app, listing.registration)  # unreachable too when the agent has not told where the driver is
    if observed is not None and taken.round is not None and rest.base_url != observed.base_url:
        taken, ahead = replace(taken, round=None, age_s=None, missed="other_driver"), None  # the driver moved
    round_started = time.monotonic()
    driver = taken.round if taken.round is not None else _read_round(rest, app.name, pool)
    driver_s = taken.waited_s + time.monotonic() - round_started
    round_age_s = taken.age_s
    spark_app, taken_at, executors, jobs = driver.application, driver.taken_at, driver.executors, driver.jobs
    queries = observed_queries(listing.listed, query)
    if not queries:
        raise NoQueriesYet(app.name, query, tuple(sorted(listing.listed)))
    if ahead is None or ahead.read_ahead != trips.triggers(queries):  # no kept round, or the list changed
        ahead = trips.histories(queries, taken_at)
    target, progress = ahead.target, ahead.progress
    redis_done = time.monotonic()

    host = _host_extension(cfg.loop.host_cpu_sample_s if opts.host_sample_s is None else opts.host_sample_s)
    batches_of: dict[str, list[Batch]] = {}
    owner: dict[int, str] = {}  # stage id -> the first query whose window names it (its fetch counts there)
    for info in queries:  # every query's stages: the executors' figures cover all of them
        reports = progress[info.name]
        reported = [(r.run_id, r.batch_id) for r in reports if not r.idle]  # an idle sample reports no batch
        batches_of[info.name] = finished_batches(jobs, info.name, reported, query_id=info.id)
        for batch in window_batches(batches_of[info.name], taken_at, window_s):
            for stage_id in batch.stage_ids:
                owner.setdefault(stage_id, info.name)
    answers = fetch_stages(rest, spark_app.id, list(owner), pool)  # stage ids are the app's: shared by its queries
    stages: dict[int, list[RestStage]] = {stage_id: attempts for stage_id, (attempts, _) in answers.items()}
    fetched_of = {info.name: sum(fetched for stage_id, (_, fetched) in answers.items() if owner[stage_id] == info.name)
                  for info in queries}
    stages_done = time.monotonic()
    rest_cpu_s = round(pool.cpu_s, 4)  # CPU the REST reads took on the pool's threads (the cycle's cpu_s adds it)
    cluster = cluster_extension(cfg, spark_app.id)  # a kept view (cluster_view.RecentView), or one read
    cluster_done = time.monotonic()
    work = window_work(stages, taken_at, window_s)
    app_figures = app_extension(executors, work, taken_at, window_s)
    # What the agent last asked Spark for: executors beyond the registered ones are still starting.
    app_figures["requested_executors"] = _int_or_none(target)
    # Where the collect's time went, in seconds (the daemon's `cycle` line shows it: issue 33): the
    # driver's round (or the wait for the kept one), the Redis round trips, the stages, the cluster view.
    parts_s = {"driver": round(driver_s, 4), "redis": round(trips.waited_s, 4),
               "stages": round(stages_done - redis_done, 4), "cluster": round(cluster_done - stages_done, 4)}
    snapshots = []
    for info in queries:
        snapshot = build_snapshot(SnapshotInputs(
            app=app.name, query=info.name, taken_at=taken_at, window_s=window_s, executors=executors,
            batches=batches_of[info.name], stages=stages, progress=progress[info.name],
            trigger_interval_s=info.trigger_interval_s or app.trigger_interval_s, host=host,
            app_figures=app_figures, executor_work=work,
            batch_running_since_s=batch_running_since(jobs, info.name, info.id),
            extra_extensions={"spark": {"app_id": spark_app.id,
                                        "rest_requests": driver.requests + fetched_of[info.name],
                                        "collect_s": round(time.time() - taken_at, 3), "collect_parts_s": parts_s,
                                        "rest_cpu_s": rest_cpu_s, "driver_round_age_s": _rounded(round_age_s)},
                              "query": {"id": info.id, "status": info.status, "sources": list(info.sources),
                                        "state_partitions": info.state_partitions,
                                        "migratable": info.why_not_migratable(app.allow_lossy_restart) is None,
                                        "not_migratable": info.why_not_migratable(app.allow_lossy_restart)},
                              **({"cluster": cluster} if cluster is not None else {})},
        ))
        source = snapshot.operators[0]
        log.info("monitor.snapshot", app=app.name, query=info.name, app_id=spark_app.id,
                 batches=len(snapshot.extensions["monitor"]["batches"]), operators=len(snapshot.operators),
                 arrival_rate=round(source.arrival_rate or 0.0, 1),
                 arrival_estimate=snapshot.extensions["source"]["arrival_estimate"],
                 backlog=source.backlog if source.backlog is not None else "unknown",
                 backlog_estimate=snapshot.extensions["source"]["backlog_estimate"],
                 idle=snapshot.extensions["source"]["idle"],
                 executor_hosts=app_figures["hosts"], cpu_fraction=app_figures["cpu_fraction"],
                 driver_round_age_s=_rounded(round_age_s), driver_round_waited_s=_rounded(taken.waited_s),
                 driver_round_missed=taken.missed)
        snapshots.append(snapshot)
    if query is None:  # whose histories the next collect reads ahead, with the round kept for it
        LAST_OBSERVED.set(app.name, Observed(rest.base_url, trips.triggers(queries)))
    # The next window's finished stages fetched before the next cycle asks (`stage_prefetch.py`).
    PREFETCH.register(rest, spark_app.id, app.name, cfg.loop.interval_s, since_s=taken_at - window_s,
                      cycle_started_s=started, application=spark_app)
    return snapshots, ahead.ridden


def _driver(cfg: Config, app: AppConfig, registration: object) -> SparkRestClient:
    """The driver's REST API at the URL its registration names; AppNotRunningError without one."""
    try:
        return driver_rest_at(cfg, app, registration)
    except SparkRestError as exc:
        if exc.unreachable:
            raise AppNotRunningError(app.name, exc.url, exc.cause) from None
        raise


def _read_round(rest: DriverRest, app_name: str, pool: MeteredPool) -> DriverRound:
    try:
        return read_round(rest, app_name, pool, clock=time.time)
    except DriverSilent as exc:
        raise AppNotRunningError(app_name, exc.error.url, exc.error.cause) from None


def _host_extension(sample_s: float) -> dict[str, Any] | None:
    """`extensions["host"]`: the sampler's latest reading with its age (`host_sampler.py`: no
    wait in the cycle); a blocking sample when one is asked for (`sample_s` > 0, what the cycle did
    before, kept for comparison); a reading of its own in a process that runs no sampler (a
    one-shot command). None while a running sampler has no reading yet."""
    if sample_s > 0:
        return sample_host(sample_s).host_extension()
    if HOST.running:
        return HOST.extension()
    return sample_host(0.0).host_extension()


def _rounded(age_s: float | None) -> float | None:
    return None if age_s is None else round(age_s, 3)


def _int_or_none(raw: object) -> int | None:
    try:
        return None if raw is None else int(raw.decode() if isinstance(raw, bytes) else str(raw))
    except ValueError:
        return None


def observed_queries(listed: dict[str, QueryInfo], query: str | None = None) -> list[QueryInfo]:
    """The queries to observe, by name: every one that has not terminated, or `query` alone (in any
    state, if the agent lists it)."""
    if query is not None:
        return [listed[query]] if query in listed else []
    return [listed[name] for name in sorted(listed) if listed[name].status != "terminated"]


def read_progress(client: redis.Redis, prefix: str, app: str, query: str, partitions: int | None = None,
                  since_s: float = 0.0) -> list[ProgressReport]:
    """The query's progress reports published since `since_s` (the agent's `:history` stream).
    `partitions` is ignored (older callers passed the app's input partitions)."""
    key = progress_history_key(prefix, app, query)
    return progress_reports(key, client.xrange(key, min=stream_min(since_s), max="+"), partitions)
