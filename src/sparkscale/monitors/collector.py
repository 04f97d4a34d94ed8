"""One live snapshot of an app's query: the I/O (Spark REST, Redis, psutil), then the pure builder.

The daemon calls `collect_snapshot` once per loop and app; `AppNotRunningError` means the driver's
REST API did not answer, which the daemon treats as "take no action".
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import redis
import structlog

from sparkscale.config import Config
from sparkscale.monitors.host import sample_host
from sparkscale.monitors.snapshot_builder import (
    ProgressReport,
    SnapshotInputs,
    SourceFigures,
    build_snapshot,
    finished_batches,
    window_batches,
)
from sparkscale.monitors.spark_rest import RestStage, SparkRestError, driver_rest
from sparkscale.pipeline.workloads import workload
from sparkscale.protocol.keys import input_stream_key, progress_history_key
from sparkscale.protocol.streams import live_backlog
from sparkscale.redisconn import connect
from sparkscale.snapshot import Snapshot

log = structlog.get_logger(__name__)

# Counts stream entries in an id range server side, a page at a time, so that only a number and
# the last id cross the wire (not the payloads), and no single call blocks Redis for long.
_COUNT_LUA = """
local r = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[2], 'COUNT', tonumber(ARGV[3]))
if #r == 0 then return {0, false} end
return {#r, r[#r][1]}
"""
_COUNT_PAGE = 10000
HOST_SAMPLE_S = 0.5


class AppNotRunningError(Exception):
    """The app's driver did not answer on its REST API: it is not running (or not yet)."""

    def __init__(self, app: str, url: str, cause: str):
        self.app = app
        self.url = url
        super().__init__(f"app {app!r} is not running: its Spark REST API at {url} did not answer ({cause})")


@dataclass(frozen=True)
class CollectOptions:
    window_s: float | None = None  # default: loop.window_s
    host_sample_s: float = HOST_SAMPLE_S


def collect_snapshot(cfg: Config, app_name: str, options: CollectOptions | None = None) -> Snapshot:
    """A Snapshot v1 of the app's main query over the last `loop.window_s` seconds.

    Raises AppNotRunningError when the driver does not answer, KeyError for an unknown app, and
    SparkRestError / redis errors when a service answers wrongly.
    """
    opts = options or CollectOptions()
    cfg = cfg.with_app(app_name)
    app = cfg.app(app_name)
    query = workload(app.pipeline).query
    window_s = opts.window_s or cfg.loop.window_s
    rest = driver_rest(cfg, app)
    try:
        spark_app = rest.application(app.name)
    except SparkRestError as exc:
        if exc.unreachable:
            raise AppNotRunningError(app_name, exc.url, exc.cause) from None
        raise

    taken_at = time.time()
    executors = rest.executors(spark_app.id)
    jobs = rest.jobs(spark_app.id)
    client = connect(cfg.redis)
    try:
        prefix = cfg.redis.key_prefix
        progress = read_progress(client, prefix, app.name, query, app.source_partitions,
                                 since_s=taken_at - window_s - 10 * app.trigger_interval_s - 10)
        produced = produced_records(client, [input_stream_key(prefix, app.name, p)
                                             for p in range(app.source_partitions)], taken_at - window_s, taken_at)
        backlog = live_backlog(client, prefix, app.name, query, app.source_partitions)
    finally:
        client.close()

    batches = finished_batches(jobs, query, [(r.run_id, r.batch_id) for r in progress])
    stages: dict[int, list[RestStage]] = {}
    for batch in window_batches(batches, taken_at, window_s):
        for stage_id in batch.stage_ids:
            if stage_id not in stages:
                stages[stage_id] = rest.stage_attempts(spark_app.id, stage_id)

    host = sample_host(spark_app.id, opts.host_sample_s)
    snapshot = build_snapshot(SnapshotInputs(
        app=app.name, query=query, taken_at=taken_at, window_s=window_s, executors=executors, batches=batches,
        stages=stages, source=SourceFigures(app.source_partitions, tuple(produced), tuple(backlog)),
        progress=progress, trigger_interval_s=app.trigger_interval_s, host=host.host_extension(),
        app_figures=host.app_extension(sum(e.cores for e in executors)),
        extra_extensions={"spark": {"app_id": spark_app.id, "rest_requests": 3 + len(stages),
                                    "collect_s": round(time.time() - taken_at, 3)}},
    ))
    log.info("monitor.snapshot", app=app.name, query=query, app_id=spark_app.id,
             batches=len(snapshot.extensions["monitor"]["batches"]), operators=len(snapshot.operators),
             arrival_rate=round(snapshot.operators[0].arrival_rate or 0.0, 1), backlog=snapshot.operators[0].backlog)
    return snapshot


def read_progress(client: redis.Redis, prefix: str, app: str, query: str, partitions: int,
                  since_s: float) -> list[ProgressReport]:
    """The query's progress reports published since `since_s` (the agent's `:history` stream)."""
    key = progress_history_key(prefix, app, query)
    entries = client.xrange(key, min=f"{max(int(since_s * 1000), 0)}-0", max="+")
    reports: list[ProgressReport] = []
    for _entry_id, fields in entries:
        try:
            reports.append(ProgressReport.from_fields(fields, partitions))
        except (KeyError, ValueError) as exc:
            log.warning("monitor.bad_progress_entry", key=key, error=str(exc))
    return reports


def produced_records(client: redis.Redis, keys: list[str], start_s: float, end_s: float) -> list[int]:
    """Entries added to each stream with ids (XADD `*`: the Redis clock, ms) in [start_s, end_s]."""
    script = client.register_script(_COUNT_LUA)
    end = str(int(end_s * 1000))  # a bare ms id is the whole millisecond, every sequence number
    counts: list[int] = []
    for key in keys:
        total, cursor = 0, f"{int(start_s * 1000)}-0"
        while True:
            n, last = script(keys=[key], args=[cursor, end, _COUNT_PAGE])
            total += int(n)
            if int(n) < _COUNT_PAGE or not last:
                break
            cursor = f"({last.decode() if isinstance(last, bytes) else last}"
        counts.append(total)
    return counts
