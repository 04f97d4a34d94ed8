"""A query's progress reports as the agent publishes them (`agent/progress.py`), typed. Pure: no I/O.

The monitor reads a query's reports over the window from its `:history` stream; each carries the
batch it describes, the query's rates, its state figures and one `SourceReport` per source (offsets,
backlog and position, `protocol/queries.py`). While a query is idle the agent publishes idle samples
(`idle=1`, agent/idle_samples.py): no rows, no batch duration, the last batch's id and its sources
caught up, so a quiet query still has a dated backlog. They count for the backlog and the arrival
rate, never as batches. An idle entry that cannot be one raises `BadIdleSample` (the reader skips it).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sparkscale.protocol.queries import SourceReport, source_reports


class BadIdleSample(ValueError):
    """An entry marked idle (or with an unreadable mark) whose fields cannot be an idle sample."""

    def __init__(self, field: str, problem: str):
        self.field = field
        super().__init__(f"idle sample: {field} {problem}")


@dataclass(frozen=True)
class ProgressReport:
    """One progress report of a query: one batch, or an idle sample (`idle`: the query found no new
    data; `batch_id` is its last batch's, which the sample is not)."""

    batch_id: int
    run_id: str
    num_input_rows: int
    batch_duration_ms: float | None = None
    input_rows_per_s: float | None = None
    processed_rows_per_s: float | None = None
    timestamp: str | None = None  # the trigger's start, ISO 8601 (Spark's `timestamp`)
    published_at_s: float | None = None  # when the agent wrote it
    sources: tuple[SourceReport, ...] = ()
    state_rows_total: int | None = None
    state_partitions: int | None = None
    state_memory_bytes: int | None = None  # the stateful operators' memoryUsedBytes, summed (EDRP's I_S)
    # State reload figures (protocol.queries.STATE_LOAD_FIELDS): sums of task time and counts over
    # the batch's tasks, None when the agent published none (not RocksDB, an older Spark).
    state_load_ms: float | None = None
    state_loaded_from_dfs: int | None = None
    state_replay_ms: float | None = None
    state_replayed_files: int | None = None
    idle: bool = False

    @property
    def at_s(self) -> float | None:
        """When the report's source figures were taken: the trigger's start, where Spark asks the
        sources for their latest offsets (else when the agent published it)."""
        parsed = parse_progress_time(self.timestamp)
        if parsed is not None:
            return parsed
        return self.published_at_s if self.published_at_s else None

    @property
    def backlog_at_s(self) -> float | None:
        """When the report's backlog was measured: as the agent published it where every source's
        is a file listing (the agent lists the directory then, after the batch), else `at_s` (a
        source's offsets, asked at the trigger's start). A long batch after a short one, dated at
        its start, made the backlog's growth over the batch look 4x as fast (issue 33, clicks-file)."""
        if self.published_at_s and self.sources and all(s.backlog_estimate == "file_listing" for s in self.sources):
            return self.published_at_s
        return self.at_s

    @classmethod
    def from_fields(cls, fields: Mapping[str, Any], partitions: int | None = None) -> ProgressReport:
        """From the progress hash or one `:history` entry (all values strings in Redis).

        `partitions` is ignored: older callers passed the app's input partitions, which the
        sources' own offsets now tell."""
        del partitions

        def num(name: str) -> float | None:
            value = fields.get(name)
            return None if value in (None, "", "None") else float(value)

        def count(name: str) -> int | None:
            value = num(name)
            return None if value is None else int(value)

        idle = _idle_mark(fields.get("idle"))
        try:
            sources = tuple(source_reports(dict(fields)))
        except (ValueError, TypeError):
            if idle:
                raise BadIdleSample("sources", "do not parse") from None
            sources = ()
        try:
            report = cls(
                batch_id=int(fields["batch_id"]), run_id=str(fields.get("run_id", "")),
                num_input_rows=int(float(fields.get("num_input_rows", 0) or 0)),
                batch_duration_ms=num("batch_duration_ms"), input_rows_per_s=num("input_rows_per_s"),
                processed_rows_per_s=num("processed_rows_per_s"), timestamp=fields.get("timestamp"),
                published_at_s=num("published_at"), sources=sources,
                state_rows_total=count("state_rows_total"), state_partitions=count("state_partitions"),
                state_memory_bytes=_state_memory(fields.get("state_operators")),
                state_load_ms=num("state_load_ms"), state_loaded_from_dfs=count("state_loaded_from_dfs"),
                state_replay_ms=num("state_replay_ms"), state_replayed_files=count("state_replayed_files"),
                idle=idle,
            )
        except (KeyError, ValueError, TypeError) as exc:
            if idle:
                raise BadIdleSample("fields", f"do not parse ({type(exc).__name__}: {exc})") from None
            raise
        if idle:
            _check_idle(report)
        return report


def _idle_mark(value: object) -> bool:
    """The entry's `idle` field: absent (a batch, or an older agent's entry), "0" or "1"."""
    if value in (None, "", "0"):
        return False
    if value == "1":
        return True
    raise BadIdleSample("idle", f"is {str(value)[:40]!r}, not 0 or 1")


def _check_idle(report: ProgressReport) -> None:
    """An idle sample dates its sources' positions and ran no batch: it needs a time and sources,
    and has no rows or batch duration."""
    if report.num_input_rows != 0:
        raise BadIdleSample("num_input_rows", f"is {report.num_input_rows}, not 0")
    if report.batch_duration_ms is not None:
        raise BadIdleSample("batch_duration_ms", "is given: an idle trigger runs no batch")
    if report.at_s is None or not math.isfinite(report.at_s):
        raise BadIdleSample("timestamp", "and published_at are both missing or unreadable")
    if not report.sources:
        raise BadIdleSample("sources", "are missing: nothing to date")


def _state_memory(text: object) -> int | None:
    """The `memory_used_bytes` of the agent's `state_operators` JSON, summed; None when absent."""
    try:
        ops = json.loads(text) if isinstance(text, (str, bytes)) else None
        values = [int(op["memory_used_bytes"]) for op in ops or () if op.get("memory_used_bytes") is not None]
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    return sum(values) if values else None


def parse_progress_time(text: str | None) -> float | None:
    """Spark's progress `timestamp` (`2026-11-22T05:10:48.319Z`; the REST API's `...GMT` too) as
    epoch seconds; None when absent or unreadable."""
    if not text:
        return None
    clean = text.strip().replace("GMT", "+00:00")
    if clean.endswith("Z"):
        clean = clean[:-1] + "+00:00"
    try:
        return datetime.fromisoformat(clean).timestamp()
    except ValueError:
        return None
