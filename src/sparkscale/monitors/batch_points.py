"""One batch of a query as the migration metrics see it (`BatchPoint`), from the agent's progress
report of it: when it committed, its run, its input rows, and its sources' positions summed (records,
or a file source's files), so that catch-up can be dated by where the input stood."""

from __future__ import annotations

from dataclasses import dataclass

from sparkscale.monitors.progress_reports import ProgressReport
from sparkscale.protocol.queries import SourceReport


@dataclass(frozen=True)
class BatchPoint:
    """One batch of the query, from its progress report."""

    committed_at_s: float  # the agent published its progress, right after the commit: its output is out
    started_at_s: float  # when `arrived_position` was taken: the trigger's start; a file source's listing: the report
    run_id: str
    rows: int  # input rows of the batch: what it processed and output
    # Positions: each source's own unit (`SourceReport.position_unit`: records; files for a file source), summed.
    processed_position: int | None  # up to the end offsets, all sources; None: offsets do not count
    arrived_position: int | None  # ever arrived (latest offsets, a file source's listing)
    backlog_records: int | None  # arrived but not processed (all sources); None: some source cannot tell
    source_kinds: tuple[str, ...] = ()

    @classmethod
    def from_report(cls, report: ProgressReport) -> BatchPoint:
        committed = report.published_at_s or report.at_s or 0.0
        sources = report.sources
        parts = [p for s in sources if (p := _positions(s)) is not None]
        if any(s.kind == "file" for s in sources) and len(parts) == len(sources):
            done, arrived_total, behind = (sum(column) for column in zip(*parts, strict=False))
            return cls(committed_at_s=committed, started_at_s=committed, run_id=report.run_id,
                       rows=report.num_input_rows, processed_position=done, arrived_position=arrived_total,
                       backlog_records=behind, source_kinds=tuple(s.kind for s in sources))
        counted = bool(sources) and all(s.backlog_estimate == "source_offsets" and s.position_records is not None
                                        and s.backlog_records is not None for s in sources)
        arrived = sum(s.position_records or 0 for s in sources) if counted else None
        backlog = (sum(s.backlog_records or 0 for s in sources)
                   if sources and all(s.backlog_records is not None for s in sources) else None)
        ends = [record_total(s.end_offset) for s in sources]
        if sources and all(e is not None for e in ends):
            processed: int | None = sum(e or 0 for e in ends)  # the end offsets themselves, latest or not
        else:
            processed = None if arrived is None or backlog is None else arrived - backlog
        return cls(committed_at_s=committed, started_at_s=report.at_s or committed, run_id=report.run_id,
                   rows=report.num_input_rows, processed_position=processed, arrived_position=arrived,
                   backlog_records=backlog, source_kinds=tuple(s.kind for s in sources))


def _positions(source: SourceReport) -> tuple[int, int, int] | None:
    """(processed, arrived, backlog) of one source in its own unit, where it reports positions: offsets
    that count records, or a file source's files (processed = arrived - `backlog_files`)."""
    arrived = source.position_records
    if arrived is None:
        return None
    if source.kind == "file" and source.position_unit == "files" and source.backlog_files is not None:
        return arrived - source.backlog_files, arrived, source.backlog_files
    if source.backlog_estimate == "source_offsets" and source.backlog_records is not None:
        end = record_total(source.end_offset)
        return (arrived - source.backlog_records if end is None else end), arrived, source.backlog_records
    return None


def record_total(offset: object) -> int | None:
    """Records up to a source offset that counts them: the Redis streams source's `{"ids", "counts"}`,
    Kafka's `{topic: {partition: next offset}}`; None for any other offset."""
    if not isinstance(offset, dict) or not offset:
        return None
    counts = offset.get("counts")
    if "ids" in offset and isinstance(counts, dict):
        values = list(counts.values())
    elif all(isinstance(v, dict) for v in offset.values()):
        values = [n for partitions in offset.values() for n in partitions.values()]
    else:
        return None
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values):
        return None  # Kafka's -1 / -2 are markers, not positions
    total: int = sum(values)
    return total
