"""A chaos run's recovery split into what can be measured (notes: estorm-spark-facts.md, (d)), so that
the reload from the checkpoint is never folded into detection or catch-up:

- `detected_s`: fault -> the driver removed the lost executor (`removeTime` in the driver's
  `/allexecutors`: its own clock, when its scheduler dropped the executor); without the REST answer,
  for a fault that kills executors, the first sample whose active executor count dropped (±1 sample);
- `replaced_s`: fault -> the first executor added after it (`addTime`), once a loss was detected;
- reload figures: the progress reports of the batches that ended after the fault, up to the recovery
  (else the end of the watch), that loaded state from the checkpoint (`rocksdbNumLoadedFromDfs` > 0),
  their `rocksdbLoadLatencyMs`, changelog replay and wall duration summed. Spark sums the metrics over
  the batch's tasks: task time, not wall time.

`recovery_s` stays chaos_report's (E-Storm's 90 % rule).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import redis
import structlog

from sparkscale.config import Config
from sparkscale.config.identities import OPERATOR
from sparkscale.monitors.collector import read_progress
from sparkscale.monitors.progress_reports import ProgressReport
from sparkscale.monitors.spark_rest import SparkRestError, driver_rest, parse_time_s
from sparkscale.redisconn import connect_as
from sparkscale_lab.bench.timeline import Sample
from sparkscale_lab.pipelines.workloads import workload

log = structlog.get_logger(__name__)

HISTORY_BEFORE_S = 120.0  # progress history read from before the fault: the batch running at it
PRE_FAULT_WINDOW_S = 60.0  # the batches whose median duration is the yardstick for the reload batches


@dataclass(frozen=True)
class ExecutorSpan:
    """One executor of the app as the driver's `/allexecutors` lists it (dead ones too)."""

    id: str
    added_at_s: float | None
    removed_at_s: float | None = None
    remove_reason: str | None = None


@dataclass(frozen=True)
class Breakdown:
    """A run's recovery timeline (module doc); seconds from the fault, None: not measurable."""

    detected_s: float | None = None
    detected_by: str | None = None  # the driver's removeReason, or "executor count (samples)"
    replaced_s: float | None = None
    reload_ms: float | None = None  # rocksdbLoadLatencyMs of the reload batches, summed over tasks
    loaded_from_dfs: int | None = None  # rocksdbNumLoadedFromDfs of the same batches
    replay_ms: float | None = None  # rocksdbReplayChangeLogLatencyMs, summed over tasks
    replayed_files: int | None = None  # rocksdbNumReplayChangelogFiles
    reload_batches: tuple[int, ...] = ()  # their batch ids
    reload_batch_ms: float | None = None  # the longest of them, wall time (triggerExecution)
    pre_fault_batch_ms: float | None = None  # median wall time of the batches that ended in the minute before

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["reload_batches"] = list(self.reload_batches)
        return out


def parse_executor_spans(data: Any) -> list[ExecutorSpan]:
    """`/api/v1/applications/{id}/allexecutors`, the driver left out."""
    if not isinstance(data, list):
        raise ValueError(f"expected a JSON list, got {type(data).__name__}")
    return [ExecutorSpan(str(e["id"]), parse_time_s(e.get("addTime")), parse_time_s(e.get("removeTime")),
                         e.get("removeReason")) for e in data if e.get("id") != "driver"]


def executor_loss(spans: Sequence[ExecutorSpan], fault_at: float) -> tuple[float | None, str | None, float | None]:
    """(detected, why, replaced), epoch seconds: the first removal at or after the fault and the
    driver's reason; the first executor added after the fault, only once a removal was seen."""
    removed = sorted((s for s in spans if s.removed_at_s is not None and s.removed_at_s >= fault_at),
                     key=lambda s: s.removed_at_s or 0.0)
    if not removed:
        return None, None, None
    added = sorted(s.added_at_s for s in spans if s.added_at_s is not None and s.added_at_s > fault_at)
    return removed[0].removed_at_s, removed[0].remove_reason, added[0] if added else None


def count_drop(samples: Sequence[Sample], fault_at_s: float) -> tuple[float | None, float | None]:
    """(detected, replaced) in run seconds from the samples' active executor counts: the first count
    below the last one before the fault, then the first that rises again. Unknown counts (the REST API
    not answering) are skipped."""
    before = [s.executors for s in samples if s.t_s <= fault_at_s and s.executors is not None]
    if not before:
        return None, None
    detected: float | None = None
    last = before[-1]
    for s in samples:
        if s.t_s <= fault_at_s or s.executors is None:
            continue
        if detected is None and s.executors < last:
            detected = s.t_s
        elif detected is not None and s.executors > last:
            return detected, s.t_s
        last = s.executors
    return detected, None


def _end_s(report: ProgressReport) -> float | None:
    """When a batch ended: the agent publishes its report right after."""
    if report.published_at_s is not None:
        return report.published_at_s
    start = report.at_s
    return None if start is None or report.batch_duration_ms is None else start + report.batch_duration_ms / 1000


def _total(values: Sequence[float | int | None]) -> Any:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def reload_figures(reports: Sequence[ProgressReport], fault_at: float, until: float) -> Breakdown:
    """The reload figures of the batches that ended in (fault_at, until] (each batch once: its first
    report). Reload batches: those with rocksdbNumLoadedFromDfs > 0 (none: nothing reloaded, 0 ms);
    when no report carries that metric (not RocksDB, Spark before 4.3), the first batch after the fault."""
    seen: set[tuple[str, int]] = set()
    after: list[ProgressReport] = []
    before: list[float] = []
    for r in reports:
        end = _end_s(r)
        if (r.run_id, r.batch_id) in seen or end is None or r.idle:  # an idle sample is no batch
            continue
        seen.add((r.run_id, r.batch_id))
        if fault_at - PRE_FAULT_WINDOW_S < end <= fault_at and r.batch_duration_ms is not None:
            before.append(r.batch_duration_ms)
        elif fault_at < end <= until:
            after.append(r)
    pre = statistics.median(before) if before else None
    if not after:
        return Breakdown(pre_fault_batch_ms=pre)
    if any(r.state_loaded_from_dfs is not None for r in after):
        loads = [r for r in after if (r.state_loaded_from_dfs or 0) > 0]
        if not loads:
            return Breakdown(reload_ms=0.0, loaded_from_dfs=0, pre_fault_batch_ms=pre)
    else:
        loads = after[:1]
    return Breakdown(pre_fault_batch_ms=pre,
        reload_ms=_total([r.state_load_ms for r in loads]),
        loaded_from_dfs=_total([r.state_loaded_from_dfs for r in loads]),
        replay_ms=_total([r.state_replay_ms for r in loads]),
        replayed_files=_total([r.state_replayed_files for r in loads]),
        reload_batches=tuple(r.batch_id for r in loads),
        reload_batch_ms=max((r.batch_duration_ms for r in loads if r.batch_duration_ms is not None), default=None))


def breakdown(spans: Sequence[ExecutorSpan] | None, samples: Sequence[Sample], reports: Sequence[ProgressReport],
              t0: float, fault_at: float, until: float, count_fallback: bool) -> Breakdown:
    """The whole breakdown: executor times from the driver's spans (or, when it did not answer and
    `count_fallback`, from the samples), reload figures from the reports."""
    reload = reload_figures(reports, fault_at, until)
    detected = replaced = None
    why: str | None = None
    if spans is not None:
        detected, why, replaced = executor_loss(spans, fault_at)
        detected = None if detected is None else detected - fault_at
        replaced = None if replaced is None else replaced - fault_at
    elif count_fallback:
        found, back = count_drop(samples, fault_at - t0)
        detected = None if found is None else found - (fault_at - t0)
        replaced = None if back is None else back - (fault_at - t0)
        why = "executor count (samples)" if found is not None else None
    return Breakdown(
        detected_s=None if detected is None else round(detected, 2), detected_by=why,
        replaced_s=None if replaced is None else round(replaced, 2),
        **{k: v for k, v in asdict(reload).items() if k not in ("detected_s", "detected_by", "replaced_s")})


def executor_spans(cfg: Config, app: str) -> list[ExecutorSpan] | None:
    """The app's executors, dead ones too, from its driver now; None when it does not answer."""
    try:
        rest = driver_rest(cfg, cfg.app(app), timeout_s=5, retries=1)
        return parse_executor_spans(rest.get_json(f"applications/{rest.application(app).id}/allexecutors"))
    except (SparkRestError, ValueError, KeyError, TypeError) as exc:
        log.warning("chaos.executor_spans_unread", app=app, error=str(exc))
        return None


def measure(cfg: Config, app: str, samples: Sequence[Sample], t0: float, fault_at: float, until: float,
            loses_executors: bool) -> Breakdown:
    """The run's breakdown, read while its driver still runs: the driver's executors (only for a
    fault that kills executors under a living driver: after a driver_kill they are the new app's,
    whose later scale-in is no detection), then the query's progress history around the fault."""
    spans = executor_spans(cfg, app) if loses_executors else None
    client = connect_as(cfg, OPERATOR)
    try:
        reports = read_progress(client, cfg.redis.key_prefix, app, workload(cfg.app(app).pipeline).query,
                                since_s=fault_at - HISTORY_BEFORE_S)
    except redis.RedisError as exc:  # the run's other figures stand without the reload ones
        log.warning("chaos.progress_unread", app=app, error=str(exc))
        reports = []
    finally:
        client.close()
    return breakdown(spans, samples, reports, t0, fault_at, until, loses_executors)
