"""Live snapshots of an app's queries: the I/O (Spark REST, Redis, psutil), then the pure builder.

An app is any PySpark script with any number of queries on any sources. The agent lists the app's
queries (`store.redis_queries.read_queries`) and publishes each query's progress reports, with what
its sources say about backlog and position; the monitor builds one snapshot per query that has not
terminated, from one REST round for the app (application, executors, jobs, then the stages of the
window's batches) and one sample of the daemon's host. The executors' CPU and memory come from
Spark's metrics over the tasks of every query's window (`executor_figures.py`), so every query's
snapshot carries the same app-wide executor figures. `collect_snapshot` merges them into the app's
snapshot. Where the app's executors run, by standalone worker (`extensions["cluster"]`, for the
spread rule), comes from the master and its workers (`cluster_view.py`; `loop.cluster_view`).

The daemon calls `collect_snapshots` once per loop and app. `AppNotRunningError` means the driver's
REST API did not answer, `NoQueriesYet` that the agent has listed no query yet: either way the
daemon takes no action this cycle.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass

import redis
import structlog

from sparkscale.config import Config
from sparkscale.model.snapshot import Snapshot
from sparkscale.model.snapshot_merge import merge_snapshots
from sparkscale.monitors.cluster_view import cluster_extension
from sparkscale.monitors.executor_figures import app_extension, window_work
from sparkscale.monitors.host import sample_host
from sparkscale.monitors.progress_reports import ProgressReport
from sparkscale.monitors.snapshot_builder import (
    Batch,
    SnapshotInputs,
    build_snapshot,
    finished_batches,
    window_batches,
)
from sparkscale.monitors.spark_rest import RestStage, SparkRestError, driver_rest
from sparkscale.monitors.stage_cache import STAGES
from sparkscale.protocol.keys import executor_target_key, progress_history_key
from sparkscale.protocol.queries import QueryInfo
from sparkscale.redisconn import connect_as, stream_entries
from sparkscale.store.redis_queries import read_queries

log = structlog.get_logger(__name__)

HOST_SAMPLE_S = 0.5  # a blocking sample's length, where one is asked for (bench userjob)


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
    host_sample_s: float | None = None  # default: loop.host_cpu_sample_s (0: a delta, no wait)


def collect_snapshot(cfg: Config, app_name: str, options: CollectOptions | None = None) -> Snapshot:
    """The app's snapshot: its queries' snapshots merged (`snapshot_merge`; one query: its own)."""
    return merge_snapshots(collect_snapshots(cfg, app_name, options=options))


def collect_snapshots(cfg: Config, app_name: str, query: str | None = None,
                      options: CollectOptions | None = None) -> list[Snapshot]:
    """One Snapshot v1 per live query of the app (or of `query` only) over the last window, by name.

    Raises AppNotRunningError when the driver does not answer, NoQueriesYet when the agent lists no
    live query (or not `query`), KeyError for an unknown app, and SparkRestError / redis errors when
    a service answers wrongly.
    """
    opts = options or CollectOptions()
    cfg = cfg.with_app(app_name)
    app = cfg.app(app_name)
    window_s = opts.window_s or cfg.loop.window_s
    try:
        rest = driver_rest(cfg, app)  # unreachable too when the agent has not told where the driver is
        spark_app = rest.application(app.name)
    except SparkRestError as exc:
        if exc.unreachable:
            raise AppNotRunningError(app_name, exc.url, exc.cause) from None
        raise

    taken_at = time.time()
    executors = rest.executors(spark_app.id)
    jobs = rest.jobs(spark_app.id)
    client = connect_as(cfg)  # this process's identity: the daemon's or the CLI's
    try:
        prefix = cfg.redis.key_prefix
        listed = read_queries(client, prefix, app.name)
        queries = observed_queries(listed, query)
        if not queries:
            raise NoQueriesYet(app.name, query, tuple(sorted(listed)))
        target = client.get(executor_target_key(prefix, app.name))
        progress = {
            q.name: read_progress(client, prefix, app.name, q.name, since_s=taken_at - window_s - 10 * (
                q.trigger_interval_s or app.trigger_interval_s) - 10)
            for q in queries
        }
    finally:
        client.close()

    host = sample_host(cfg.loop.host_cpu_sample_s if opts.host_sample_s is None else opts.host_sample_s)
    stages: dict[int, list[RestStage]] = {}  # stage ids are the app's: shared by its queries
    batches_of: dict[str, list[Batch]] = {}
    fetched_of: dict[str, int] = {}
    for info in queries:  # every query's stages first: the executors' figures cover all of them
        reports = progress[info.name]
        batches_of[info.name] = finished_batches(jobs, info.name, [(r.run_id, r.batch_id) for r in reports],
                                                 query_id=info.id)
        fetched = 0
        for batch in window_batches(batches_of[info.name], taken_at, window_s):
            for stage_id in batch.stage_ids:
                if stage_id not in stages:
                    stages[stage_id], was_fetched = STAGES.get(
                        spark_app.id, stage_id, functools.partial(rest.stage_attempts, spark_app.id, stage_id))
                    fetched += was_fetched
        fetched_of[info.name] = fetched
    cluster = cluster_extension(cfg, spark_app.id)  # one master request + one per alive worker
    work = window_work(stages, taken_at, window_s)
    app_figures = app_extension(executors, work, taken_at, window_s)
    # What the agent last asked Spark for: executors beyond the registered ones are still starting.
    app_figures["requested_executors"] = _int_or_none(target)
    snapshots = []
    for info in queries:
        snapshot = build_snapshot(SnapshotInputs(
            app=app.name, query=info.name, taken_at=taken_at, window_s=window_s, executors=executors,
            batches=batches_of[info.name], stages=stages, progress=progress[info.name],
            trigger_interval_s=info.trigger_interval_s or app.trigger_interval_s, host=host.host_extension(),
            app_figures=app_figures, executor_work=work,
            extra_extensions={"spark": {"app_id": spark_app.id, "rest_requests": 3 + fetched_of[info.name],
                                        "collect_s": round(time.time() - taken_at, 3)},
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
                 executor_hosts=app_figures["hosts"], cpu_fraction=app_figures["cpu_fraction"])
        snapshots.append(snapshot)
    return snapshots


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
    entries = stream_entries(client.xrange(key, min=f"{max(int(since_s * 1000), 0)}-0", max="+"))
    reports: list[ProgressReport] = []
    for _entry_id, fields in entries:
        try:
            reports.append(ProgressReport.from_fields(fields, partitions))
        except (KeyError, ValueError) as exc:
            log.warning("monitor.bad_progress_entry", key=key, error=str(exc))
    return reports
