"""Idle samples: what the agent publishes when Spark says a query's trigger found no new data.

Since Spark 3.5 a trigger that finds no new data posts a `QueryIdleEvent` (query id, run id, the
trigger's time) instead of a progress event, so a query whose input stops falls silent and the
daemon's window soon holds no report of it: its backlog reads "unknown" and the rules that need it
hold. An idle trigger asked the sources and found nothing past the last batch's end offsets: the
query is caught up, its sources where its last batch left them (end = latest offset, backlog 0).
The agent writes that to the query's `:history` stream as an idle sample (`idle=1`, no rows, no
batch duration, the last batch's id), which the monitor counts for the backlog and the arrival
rate and never as a batch (monitors/progress_reports.py). The progress hash keeps the last batch.

Only where it is honest: after a batch of the same run that this agent published (the sources'
positions are that batch's), and at most one sample per query every `IDLE_SAMPLE_EVERY_S` (Spark
posts one idle event per `spark.sql.streaming.noDataProgressEventInterval`, 10 s by default, the
first that long after the last batch: ProgressReporter.updateIdleness; a shorter interval is
capped here), the first one after a batch at once. A source whose backlog
was unknown stays unknown: an idle trigger only says it admitted nothing.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from sparkscale.agent.sources import record_positions
from sparkscale.protocol.queries import SourceReport

IDLE_SAMPLE_EVERY_S = 5.0  # at most one idle sample per query this often (the daemon's loop is slower)


@dataclass(frozen=True)
class LastBatch:
    """What an idle sample repeats of the query's last batch the agent published."""

    query: str  # its label: the name, or the id of an unnamed query
    query_id: str
    run_id: str
    batch_id: int
    sources: tuple[SourceReport, ...]


class IdleSampler:
    """Which idle events get a sample: per query, the last batch published and when the last sample went out."""

    def __init__(self, every_s: float = IDLE_SAMPLE_EVERY_S, clock: Callable[[], float] = time.monotonic):
        self.every_s = every_s
        self._clock = clock
        self._last: dict[str, LastBatch] = {}  # query id -> its last batch published
        self._sent_at: dict[str, float] = {}  # query id -> when its last idle sample went out (clock)

    def published(self, batch: LastBatch) -> None:
        """A batch went out: the next idle event is sampled at once (its backlog changed)."""
        self._last[batch.query_id] = batch
        self._sent_at.pop(batch.query_id, None)

    def due(self, query_id: str, run_id: str) -> LastBatch | None:
        """The last batch to sample from, or None: no batch of this run published (nothing honest to
        say of its sources), or a sample went out under `every_s` ago."""
        last = self._last.get(query_id)
        if last is None or last.run_id != run_id or not last.sources:
            return None
        sent = self._sent_at.get(query_id)
        if sent is not None and self._clock() - sent < self.every_s:
            return None
        return last

    def sent(self, query_id: str) -> None:
        self._sent_at[query_id] = self._clock()


def idle_fields(last: LastBatch, timestamp: str | None, published_at: float) -> dict[str, str | int | float]:
    """The `:history` entry of an idle sample after `last` (`timestamp`: the idle trigger's, as Spark gives it)."""
    fields: dict[str, str | int | float] = {
        "query": last.query, "query_id": last.query_id, "run_id": last.run_id, "batch_id": last.batch_id,
        "idle": 1, "num_input_rows": 0, "published_at": published_at,
        "sources": json.dumps([idle_source(s, last.batch_id).to_dict() for s in last.sources]),
    }
    if timestamp:
        fields["timestamp"] = timestamp
    return fields


def idle_source(source: SourceReport, batch_id: int) -> SourceReport:
    """`source` at an idle trigger after batch `batch_id`: nothing read, nothing new past its end
    offset. Its backlog is 0 where it could tell one (offsets, a listing), else still unknown."""
    end = source.end_offset
    known = source.backlog_records is not None or source.backlog_files is not None
    estimate = source.backlog_estimate if source.backlog_estimate != "unknown" else "file_listing"
    return replace(
        source, num_input_rows=0, input_rows_per_s=None, processed_rows_per_s=None, metrics={},
        start_offset=end, latest_offset=end if source.latest_offset is not None else None,
        backlog_records=0 if known else None, backlog_files=0 if source.backlog_files is not None else None,
        backlog_estimate=estimate if known else "unknown",
        backlog_detail=(f"idle trigger after batch {batch_id}: nothing new past its end offset" if known
                        else source.backlog_detail),
        position_records=_position_at_idle(source),
    )


def _position_at_idle(source: SourceReport) -> int | None:
    """Arrived = processed at an idle trigger: the end offset's records, or a file source's files
    logged through it (the files arrived less those behind)."""
    if source.position_records is None:
        return None
    if source.position_unit == "files":
        return None if source.backlog_files is None else source.position_records - source.backlog_files
    ends = record_positions(source.end_offset)
    if ends is not None:
        return sum(ends.values())
    return None if source.backlog_records is None else source.position_records - source.backlog_records
