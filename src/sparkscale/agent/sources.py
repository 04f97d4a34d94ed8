"""What a query's sources say about their input: kind, positions and backlog, for any source.

The head side sizes a query from its arrival rate and backlog (DS2's target rate), so each
source's report carries the best backlog estimate it can give (protocol.queries):
- offsets that count records: the Redis streams source's `{"ids", "counts"}` (counts = entries ever
  added per stream) and Kafka's `{topic: {partition: offset}}`: backlog = latest - end, position =
  latest; exact;
- the file source reports no latest offset (null on 4.3.0): its backlog is the files in the source
  directory that the query's checkpoint has not logged (`sources/<n>`), times the rows per file
  seen in its batches;
- anything else: unknown, and said so.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from sparkscale.protocol.queries import SourceReport

_FILE_SOURCE = re.compile(r"^FileStreamSource\[(?P<path>.+)\]$")


def as_json(value: Any) -> Any:
    """Source offsets arrive as JSON text; as JSON values, not strings of JSON."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def record_positions(offset: Any) -> dict[str, int] | None:
    """Records per partition up to `offset`, where the offset counts records; None otherwise."""
    offset = as_json(offset)
    if not isinstance(offset, Mapping):
        return None
    counts = offset.get("counts")
    if isinstance(counts, Mapping) and "ids" in offset:  # the Redis streams source
        try:
            return {str(k): int(v) for k, v in counts.items()}
        except (TypeError, ValueError):
            return None
    flat: dict[str, int] = {}
    for topic, partitions in offset.items():  # Kafka: {topic: {partition: next offset}}
        if not isinstance(partitions, Mapping):
            return None
        for partition, value in partitions.items():
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                return None  # -1/-2 are Kafka's latest/earliest markers, not positions
            flat[f"{topic}/{partition}"] = value
    return flat or None


def source_kind(description: str, end_offset: Any) -> str:
    end = as_json(end_offset)
    if _FILE_SOURCE.match(description):
        return "file"
    if isinstance(end, Mapping) and "ids" in end and "counts" in end:
        return "redis_streams"
    lowered = description.lower()
    for kind in ("kafka", "rate", "socket"):
        if kind in lowered:
            return kind
    return "other"


class FileBacklog:
    """Unread files of one file source, from its directory and the query's checkpoint log."""

    def __init__(self, source_dir: str, log_dir: Path):
        self.source_dir = source_dir
        self.log_dir = log_dir
        self.logged: set[str] = set()
        self.files_by_batch: dict[int, int] = {}
        self._read_upto = -1
        self.rows_per_file: float | None = None

    def _read_log(self) -> None:
        if not self.log_dir.is_dir():
            return
        names = []
        for entry in os.scandir(self.log_dir):
            batch = entry.name.removesuffix(".compact")
            if batch.isdigit() and int(batch) > self._read_upto:
                names.append((int(batch), entry.name))
        for batch, name in sorted(names):
            try:
                lines = (self.log_dir / name).read_text().splitlines()[1:]  # line 1: the version
            except OSError:
                continue
            for line in lines:
                try:
                    item = json.loads(line)
                except ValueError:
                    continue
                self.logged.add(urlparse(item["path"]).path)
                b = int(item.get("batchId", batch))
                self.files_by_batch[b] = self.files_by_batch.get(b, 0) + 1
            self._read_upto = batch

    def report(self, batch_id: int, rows_in_batch: int) -> tuple[int | None, int | None, str]:
        """(backlog records, backlog files, detail)."""
        local = urlparse(self.source_dir)
        if local.scheme not in ("", "file"):
            return None, None, f"file source on {local.scheme}: only local directories are listed"
        self._read_log()
        files = self.files_by_batch.get(batch_id, 0)
        if files and rows_in_batch:
            self.rows_per_file = rows_in_batch / files
        try:
            present = [e.path for e in os.scandir(local.path)
                       if e.is_file() and not e.name.startswith((".", "_"))]
        except OSError as exc:
            return None, None, f"cannot list {local.path}: {exc}"
        unread = sum(1 for p in present if os.path.abspath(p) not in self.logged)
        if self.rows_per_file is None:
            return (0 if unread == 0 else None), unread, f"{unread} unread files; rows per file not seen yet"
        records = round(unread * self.rows_per_file)
        return records, unread, f"{unread} unread files x {self.rows_per_file:.1f} rows per file"


class SourceReporter:
    """Builds the `SourceReport`s of one query, keeping what a file backlog needs between reports."""

    def __init__(self, checkpoint: str | None):
        self.checkpoint = checkpoint
        self._files: dict[int, FileBacklog] = {}

    def reports(self, progress: Any) -> list[SourceReport]:
        out = []
        for index, s in enumerate(progress.sources or []):
            out.append(self._report(index, s, progress.batchId))
        return out

    def _report(self, index: int, s: Any, batch_id: int) -> SourceReport:
        description = str(s.description)
        kind = source_kind(description, s.endOffset)
        base: dict[str, Any] = {
            "description": description, "kind": kind, "num_input_rows": int(s.numInputRows or 0),
            "input_rows_per_s": _finite(s.inputRowsPerSecond),
            "processed_rows_per_s": _finite(s.processedRowsPerSecond),
            "start_offset": as_json(s.startOffset), "end_offset": as_json(s.endOffset),
            "latest_offset": as_json(s.latestOffset),
            "metrics": {str(k): str(v) for k, v in (getattr(s, "metrics", None) or {}).items()},
        }
        end, latest = record_positions(s.endOffset), record_positions(s.latestOffset)
        if end is not None and latest is not None:
            behind = sum(max(latest.get(p, 0) - n, 0) for p, n in end.items())
            return SourceReport(**base, backlog_records=behind, backlog_estimate="source_offsets",
                                backlog_detail="latest minus end offsets", position_records=sum(latest.values()))
        match = _FILE_SOURCE.match(description)
        if match and self.checkpoint:
            files = self._files.get(index)
            if files is None:
                log_dir = Path(urlparse(self.checkpoint).path) / "sources" / str(index)
                files = self._files[index] = FileBacklog(match.group("path"), log_dir)
            records, unread, detail = files.report(batch_id, base["num_input_rows"])
            return SourceReport(**base, backlog_records=records, backlog_files=unread,
                                backlog_estimate="file_listing" if records is not None else "unknown",
                                backlog_detail=detail)
        return SourceReport(**base, backlog_estimate="unknown",
                            backlog_detail=f"{kind} source reports no backlog")


def _finite(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number == number and abs(number) != float("inf") else None
