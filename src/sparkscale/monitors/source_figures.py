"""The virtual source operator of a query, for any source, from its progress reports. Pure: no I/O.

DS2 needs a source with an arrival rate and a backlog; Spark runs no stage for it. Each progress
report carries one `SourceReport` per source of the query (`protocol/queries.py`), and so:

- Instances: one per source partition where the offsets show partitions (the Redis streams source's
  `{"ids": ..., "counts": {"0": n}}`, Kafka's `{"topic": {"0": offset}}`), else one per source;
  records = rows read in the window (end minus start offset per partition, else the source's rows).
- Arrival rate, best first: `position` (the sources' positions, records ever arrived, moved by
  Δ over Δt between the window's first and last report: exact where a source can tell);
  `processed_plus_backlog_change` (rows taken in plus the backlog's change, over the span between
  the two backlogs' measurements: `ProgressReport.backlog_at_s`);
  `input_rate` (the mean `input_rows_per_s` of the window's batches: a lower bound when behind;
  0 over a window of idle samples only, no input came).
- Backlog: the latest report's sum of `backlog_records`, brought forward to the snapshot's time:
  plus the arrival rate x the time since it was measured (`ProgressReport.backlog_at_s`). A
  source's offsets are asked at the trigger's start, and a batch with no rate limit takes all
  there is, so the stated backlog is ~0 at every report however far the query is behind: what
  waits is what arrived since (issue 33: dag-linear stated 0-2 records while 1,389 waited, and
  DS2 sized no catch-up). None (unknown) when any source cannot tell. DS2 then sizes from rates
  without catch-up, and the snapshot says "backlog unknown". An idle sample is not brought
  forward: the query found no new data then.
- Idle: the latest report is an idle sample (the agent's, on Spark's `QueryIdleEvent`): the query
  is caught up, its backlog the sample's (0 where its sources can tell); `idle_since_s` is the
  first idle sample after the last batch read. Idle samples date positions and backlogs; they are
  no batches and carry no rows or rate.
"""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import JsonValue

from sparkscale.monitors.progress_reports import ProgressReport
from sparkscale.protocol.queries import BACKLOG_ESTIMATES, SourceReport

ARRIVAL_ESTIMATES = ("position", "processed_plus_backlog_change", "input_rate")
UNKNOWN = "unknown"


@dataclass(frozen=True)
class InstanceKey:
    """One instance of the virtual source: a partition of a source, or a whole source."""

    source: int  # the source's index in the query
    partition: str | None = None  # None: the source shows no partitions


@dataclass(frozen=True)
class WindowBatch:
    """A batch the snapshot uses: its progress report, else its first stage's (task index, input records)."""

    report: ProgressReport | None
    task_rows: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class SourceSummary:
    """One source as the latest report saw it, for `extensions["source"]["sources"]`."""

    kind: str
    description: str
    backlog_records: int | None
    backlog_estimate: str
    detail: str

    def to_dict(self) -> dict[str, JsonValue]:
        return {"kind": self.kind, "description": self.description, "backlog_records": self.backlog_records,
                "backlog_estimate": self.backlog_estimate, "detail": self.detail}


@dataclass(frozen=True)
class SourceEstimate:
    """The virtual source's figures over one window, and how each was estimated."""

    instances: tuple[tuple[InstanceKey, int], ...]  # (instance, records read in the window)
    arrival_rate: float  # records/s
    arrival_estimate: str  # one of ARRIVAL_ESTIMATES
    arrival_detail: str
    backlog_records: float | None  # None: unknown
    backlog_estimate: str  # the weakest of the sources' estimates (BACKLOG_ESTIMATES)
    sources: tuple[SourceSummary, ...] = ()
    records_from: Mapping[str, int] = field(default_factory=dict)  # batches counted from progress / tasks
    idle_since_s: float | None = None  # the latest report is an idle sample: idle since then
    backlog_stated_records: float | None = None  # the latest report's backlog, before it is brought forward
    backlog_age_s: float = 0.0  # from when it was measured to the snapshot's time (0: not brought forward)

    @property
    def backlog_known(self) -> bool:
        return self.backlog_records is not None

    def brought_forward(self) -> dict[str, JsonValue]:
        """The stated backlog and its age where it was brought forward (else nothing), for
        `extensions["source"]` and the source operator's `extra`."""
        if self.backlog_age_s <= 0:
            return {}
        return {"backlog_stated_records": self.backlog_stated_records, "backlog_age_s": round(self.backlog_age_s, 3)}

    def extension(self) -> dict[str, JsonValue]:
        """`extensions["source"]`: which estimates the figures rest on."""
        out: dict[str, Any] = {
            "arrival_estimate": self.arrival_estimate, "arrival_detail": self.arrival_detail,
            "backlog_known": self.backlog_known, "backlog_estimate": self.backlog_estimate,
            "backlog_records": self.backlog_records, "sources": [s.to_dict() for s in self.sources],
            "idle": self.idle_since_s is not None,
        }
        out.update(self.brought_forward())
        if self.idle_since_s is not None:
            out["idle_since_s"] = self.idle_since_s
        if not self.backlog_known:
            kinds = ", ".join(sorted({s.kind for s in self.sources if s.backlog_records is None})) or "the sources"
            out["note"] = (f"backlog unknown: {kinds} report no backlog; arrival rate from "
                           f"{self.arrival_estimate}; DS2 sizes from rates without catch-up")
        return out


def estimate_sources(batches: Sequence[WindowBatch], reports: Sequence[ProgressReport], taken_at: float,
                     window_s: float) -> SourceEstimate:
    """The source figures of one query over (taken_at - window_s, taken_at] (module docstring)."""
    samples = sorted((r for r in reports if r.at_s is not None and taken_at - window_s < r.at_s <= taken_at),
                     key=lambda r: r.at_s or 0.0)
    latest = _latest(reports, taken_at)
    keys = _instance_keys([*(b.report for b in batches if b.report), *samples, *([latest] if latest else [])],
                          batches)
    read = dict.fromkeys(keys, 0)
    counted = {"progress": 0, "tasks": 0}
    for batch in batches:
        if batch.report is not None:
            counted["progress"] += 1
            _add_report_rows(read, batch.report)
        else:
            counted["tasks"] += 1
            for index, rows in batch.task_rows:
                read[keys[index % len(keys)]] += rows
    stated, estimate, summaries = _backlog(latest)
    rate, how, detail = _arrival(samples, sum(read.values()), window_s)
    backlog, age_s = _brought_forward(stated, latest, rate, taken_at)
    return SourceEstimate(tuple(read.items()), rate, how, detail, backlog, estimate, summaries, counted,
                          _idle_since(reports, latest), stated, age_s)


# -- offsets ------------------------------------------------------------------------------------------


def partition_positions(offset: object) -> dict[str, int] | None:
    """Positions per partition in a source offset, or None when the offset shows no partitions.

    The Redis streams source: `{"ids": {...}, "counts": {"0": n, ...}}` (records read per stream);
    Kafka: `{"topic": {"0": offset, ...}, ...}` (keys `topic/partition`)."""
    if isinstance(offset, (str, bytes)):
        try:
            offset = json.loads(offset)
        except ValueError:
            return None
    if not isinstance(offset, Mapping) or not offset:
        return None
    try:
        counts = offset.get("counts")
        if isinstance(counts, Mapping):
            return {str(p): int(n) for p, n in counts.items()} or None
        if all(isinstance(parts, Mapping) for parts in offset.values()):
            return {f"{topic}/{p}": int(n) for topic, parts in offset.items() for p, n in parts.items()} or None
    except (TypeError, ValueError):
        return None
    return None


def partition_rows(source: SourceReport) -> dict[str, int] | None:
    """Rows a batch read per partition of one source: end minus start position, or None.

    The query's first batch has no start offset (PySpark reports the text "None"): positions are
    then taken from 0 when that agrees with the rows the source reports (a source read from its
    start), else the split is unknown (None)."""
    end = partition_positions(source.end_offset)
    if end is None:
        return None
    start = partition_positions(source.start_offset)
    if start is None:
        return dict(end) if sum(end.values()) == source.num_input_rows else None
    return {p: max(n - start.get(p, 0), 0) for p, n in end.items()}


def _partition_order(key: InstanceKey) -> tuple[int, tuple[tuple[int, int, str], ...]]:
    """Sources in order, then partitions numerically (`t/10` after `t/9`)."""
    parts = re.split(r"(\d+)", key.partition or "")
    return (key.source, tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in parts if p))


def _instance_keys(reports: Sequence[ProgressReport], batches: Sequence[WindowBatch]) -> list[InstanceKey]:
    """Every partition any of the reports shows, per source; a source showing none is one instance.
    Without any source report: one instance per first-stage task (it scans one input partition)."""
    sources = max((len(r.sources) for r in reports), default=0)
    keys: set[InstanceKey] = set()
    for i in range(sources):
        found = False
        for report in reports:
            if i >= len(report.sources):
                continue
            src = report.sources[i]
            for offset in (src.end_offset, src.latest_offset, src.start_offset):
                positions = partition_positions(offset)
                if positions:
                    keys.update(InstanceKey(i, p) for p in positions)
                    found = True
        if not found:
            keys.add(InstanceKey(i))
    if not keys:
        tasks = max((max((index for index, _rows in b.task_rows), default=-1) + 1 for b in batches), default=0)
        keys = {InstanceKey(0, str(t)) for t in range(tasks)} or {InstanceKey(0)}
    return sorted(keys, key=_partition_order)


def _add_report_rows(read: dict[InstanceKey, int], report: ProgressReport) -> None:
    if not report.sources:
        _spread(read, list(read), report.num_input_rows)
        return
    for i, src in enumerate(report.sources):
        own = [k for k in read if k.source == i]
        rows = partition_rows(src)
        if rows is None or not all(InstanceKey(i, p) in read for p in rows):
            _spread(read, own, src.num_input_rows)
            continue
        for p, n in rows.items():
            read[InstanceKey(i, p)] += n


def _spread(read: dict[InstanceKey, int], keys: Sequence[InstanceKey], rows: int) -> None:
    """`rows` over `keys` evenly (the first ones take the remainder): the split is not known."""
    if not keys or rows <= 0:
        return
    share, extra = divmod(rows, len(keys))
    for n, key in enumerate(keys):
        read[key] += share + (1 if n < extra else 0)


# -- backlog and arrival --------------------------------------------------------------------------------


def _latest(reports: Sequence[ProgressReport], taken_at: float) -> ProgressReport | None:
    """The last report at or before `taken_at` (in stream order where a report has no time)."""
    timed = [r for r in reports if r.at_s is not None and r.at_s <= taken_at]
    if timed:
        return max(timed, key=lambda r: r.at_s or 0.0)
    untimed = [r for r in reports if r.at_s is None]
    return untimed[-1] if untimed else None


def _idle_since(reports: Sequence[ProgressReport], latest: ProgressReport | None) -> float | None:
    """When the query went idle: the first idle sample after the last batch read, where the latest
    report is an idle sample; None otherwise."""
    if latest is None or not latest.idle:
        return None
    last_batch = max((r.at_s or 0.0 for r in reports if not r.idle and r.at_s is not None), default=None)
    idle = [r.at_s for r in reports if r.idle and r.at_s is not None and (last_batch is None or r.at_s > last_batch)]
    return min(idle, default=latest.at_s)


def _backlog_of(report: ProgressReport) -> int | None:
    if not report.sources or any(s.backlog_records is None for s in report.sources):
        return None
    return sum(int(s.backlog_records or 0) for s in report.sources)


def _positions_of(report: ProgressReport) -> int | None:
    """Records ever arrived over all sources; None unless every source counts records (a file
    source's positions count files: an arrival rate in files per second is no record rate)."""
    if not report.sources or any(s.position_records is None or s.position_unit != "records" for s in report.sources):
        return None
    return sum(int(s.position_records or 0) for s in report.sources)


def _backlog(latest: ProgressReport | None) -> tuple[float | None, str, tuple[SourceSummary, ...]]:
    if latest is None:
        return None, UNKNOWN, ()
    summaries = tuple(SourceSummary(s.kind, s.description, s.backlog_records,
                                    s.backlog_estimate if s.backlog_records is not None else UNKNOWN,
                                    s.backlog_detail) for s in latest.sources)
    backlog = _backlog_of(latest)
    if backlog is None:
        return None, UNKNOWN, summaries
    rank = {name: n for n, name in enumerate(BACKLOG_ESTIMATES)}
    weakest = max((s.backlog_estimate for s in summaries), key=lambda e: rank.get(e, len(rank)))
    return float(backlog), weakest, summaries


def _brought_forward(stated: float | None, latest: ProgressReport | None, rate_rps: float,
                     taken_at: float) -> tuple[float | None, float]:
    """(the backlog at `taken_at`, seconds it was brought forward): the stated backlog plus what
    arrived since it was measured (module docstring); unchanged where unknown or idle."""
    at = latest.backlog_at_s if latest is not None else None
    if stated is None or latest is None or latest.idle or at is None or taken_at <= at or rate_rps <= 0:
        return stated, 0.0
    return round(stated + rate_rps * (taken_at - at), 1), taken_at - at  # records: a tenth is enough


def _arrival(samples: Sequence[ProgressReport], rows_read: int, window_s: float) -> tuple[float, str, str]:
    """(records/s, which estimate, how it was computed), best estimate first (module docstring)."""
    positions = [(r, p) for r in samples if (p := _positions_of(r)) is not None
                 and len(r.sources) == len(samples[-1].sources)]
    if len(positions) >= 2:
        (first, p0), (last, p1) = positions[0], positions[-1]
        span = (last.at_s or 0.0) - (first.at_s or 0.0)
        if span > 0 and p1 >= p0:
            return (p1 - p0) / span, "position", f"positions {p0} -> {p1} over {span:.1f} s"
    backlogs = [(r, b) for r in samples if (b := _backlog_of(r)) is not None]
    if len(backlogs) >= 2:
        (first, b0), (last, b1) = backlogs[0], backlogs[-1]
        span = (last.backlog_at_s or 0.0) - (first.backlog_at_s or 0.0)  # when each backlog was measured
        rows = _rows_between(samples, first, last)
        if span > 0 and rows + b1 - b0 >= 0:
            return ((rows + b1 - b0) / span, "processed_plus_backlog_change",
                    f"{rows} rows taken in, backlog {b0} -> {b1}, over {span:.1f} s")
    rates = [r.input_rows_per_s for r in samples if r.input_rows_per_s is not None and not r.idle]
    if rates:
        return (statistics.fmean(rates), "input_rate",
                f"mean input rate of {len(rates)} reports (a lower bound while the query is behind)")
    if samples and all(r.idle for r in samples):
        return 0.0, "input_rate", f"idle: {len(samples)} idle samples and no batch in the window, no input"
    return rows_read / window_s, "input_rate", f"{rows_read} rows read over the {window_s:g} s window"


def _rows_between(samples: Sequence[ProgressReport], first: ProgressReport, last: ProgressReport) -> int:
    """Rows of the batches reported after `first` up to `last`, each batch once."""
    t0, t1 = first.at_s or 0.0, last.at_s or 0.0
    rows: dict[tuple[str, int], int] = {}
    for r in samples:
        key = (r.run_id, r.batch_id)
        if t0 < (r.at_s or 0.0) <= t1 and key != (first.run_id, first.batch_id) and not r.idle:
            rows[key] = max(rows.get(key, 0), r.num_input_rows)
    return sum(rows.values())
