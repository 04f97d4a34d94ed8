"""What a query's sources say about their input: kind, positions and backlog, for any source.

The head side sizes a query from its arrival rate and backlog (DS2's target rate), so each
source's report carries the best backlog estimate it can give (protocol.queries):
- offsets that count records: the Redis streams source's `{"ids", "counts"}` (counts = entries ever
  added per stream) and Kafka's `{topic: {partition: offset}}`: backlog = latest - end, position =
  latest; exact;
- the file source reports no latest offset (null on 4.3.0): its positions count files, exactly, from
  the query's checkpoint log (`sources/<n>`, the same for every run of the query): arrived = files
  logged + unlogged files in the source directory, processed = files logged through the batch's
  `logOffset` (= arrived - `backlog_files`); its records are not counted (the log has no sizes or
  row counts, and `numInputRows` counts a source scanned twice twice), so the backlog in records is
  an estimate: the bytes of the files behind times the rows per byte of the last batch that read
  files (file sizes follow the load, so a price per file goes stale when the load steps: issue 33,
  docs/results/bench_scaling_33), else, while no batch's bytes are known, the files behind times
  the rows per file;
- anything else: unknown, and said so.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import unquote, urlparse

from sparkscale.protocol.queries import SourceReport

if TYPE_CHECKING:
    from pyspark.sql.streaming.listener import SourceProgress, StreamingQueryProgress

_FILE_SOURCE = re.compile(r"^FileStreamSource\[(?P<path>.+)\]$")


def as_json(value: object) -> object:
    """Source offsets arrive as JSON text; as JSON values, not strings of JSON."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def record_positions(offset: object) -> dict[str, int] | None:
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


def source_kind(description: str, end_offset: object) -> str:
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


def log_offset(offset: object) -> int | None:
    """The file source's offset `{"logOffset": N}`: N, the batch id of its checkpoint log; None otherwise."""
    offset = as_json(offset)
    value = offset.get("logOffset") if isinstance(offset, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class FileReading(NamedTuple):
    """One file source at one report: positions and backlog count files, the backlog's records are estimated."""

    backlog_records: int | None
    backlog_files: int | None  # arrived but not logged through the batch's end offset
    position_files: int | None  # files ever arrived: logged by the checkpoint, or present and not logged yet
    detail: str


class FileBacklog:
    """Files of one file source: its directory listed against the query's checkpoint log."""

    def __init__(self, source_dir: str, log_dir: Path):
        self.source_dir = source_dir
        self.log_dir = log_dir
        self.logged: set[str] = set()
        # Log entries once each: a `.compact` file repeats every entry before it, and Spark deletes
        # the files it compacted only after a delay, so both may be read.
        self._entries: set[tuple[str, int]] = set()
        self.paths_by_batch: dict[int, list[str]] = {}
        self._read_upto = -1
        self.rows_per_file: float | None = None  # the fallback price, while no batch's bytes are known
        self.rows_per_byte: float | None = None
        # Bytes of the files behind at the last report: a batch's file archived or deleted since
        # (`cleanSource`) still has its size.
        self._bytes_behind_by_path: dict[str, int] = {}

    def _read_log(self) -> None:
        if not self.log_dir.is_dir():
            return
        names = []
        for entry in os.scandir(self.log_dir):
            stem = entry.name.removesuffix(".compact")
            if stem.isdigit() and int(stem) > self._read_upto:
                names.append((int(stem), entry.name))
        for batch, name in sorted(names):
            try:
                lines = (self.log_dir / name).read_text().splitlines()[1:]  # line 1: the version
            except OSError:
                continue
            for line in lines:
                try:
                    item = json.loads(line)
                    path, b = unquote(urlparse(item["path"]).path), int(item.get("batchId", batch))
                except (ValueError, KeyError, TypeError):
                    continue
                if (path, b) not in self._entries:
                    self._entries.add((path, b))
                    self.logged.add(path)
                    self.paths_by_batch.setdefault(b, []).append(path)
            self._read_upto = batch

    def _logged_between(self, after: int | None, through: int | None) -> list[str]:
        """Paths logged for batches in (after, through]; None: from the first batch / to the last."""
        return [path for b, paths in self.paths_by_batch.items()
                if (after is None or b > after) and (through is None or b <= through) for path in paths]

    def _bytes_read(self, paths: list[str]) -> int | None:
        """Bytes of a batch's files; None when one is gone and its size was not seen."""
        total_bytes = 0
        for path in paths:
            try:
                total_bytes += os.stat(path).st_size
            except OSError:
                seen_bytes = self._bytes_behind_by_path.get(path)
                if seen_bytes is None:
                    return None
                total_bytes += seen_bytes
        return total_bytes

    def _price(self, paths: list[str], rows_in_batch: int) -> None:
        """Rows per file and per byte of a batch; a batch without rows or bytes keeps the price."""
        if not paths or not rows_in_batch:
            return
        self.rows_per_file = rows_in_batch / len(paths)
        read_bytes = self._bytes_read(paths)
        if read_bytes:
            self.rows_per_byte = rows_in_batch / read_bytes

    def report(self, start_offset: object, end_offset: object, rows_in_batch: int) -> FileReading:
        """Positions and backlog after the batch that read (start_offset, end_offset]."""
        local = urlparse(self.source_dir)
        if local.scheme not in ("", "file"):
            return FileReading(None, None, None,
                               f"file source on {local.scheme}: only local directories are listed")
        end = log_offset(end_offset)
        if end is None:
            return FileReading(None, None, None, f"file source end offset {end_offset!r} has no logOffset")
        self._read_log()
        if end > self._read_upto:  # Spark logs a batch's files before it runs it
            return FileReading(None, None, None, f"the checkpoint log {self.log_dir} does not reach logOffset {end}")
        self._price(self._logged_between(log_offset(start_offset), end), rows_in_batch)
        try:
            unread = [e for e in os.scandir(local.path) if e.is_file() and not e.name.startswith((".", "_"))
                      and os.path.abspath(e.path) not in self.logged]
        except OSError as exc:
            return FileReading(None, None, None, f"cannot list {local.path}: {exc}")
        logged_later = self._logged_between(end, None)
        behind = len(unread) + len(logged_later)  # unlogged files, and files logged for a later batch
        arrived = len(self._entries) + len(unread)
        processed = arrived - behind  # every log entry is in `paths_by_batch` once: those through `end`
        basis = (f"positions in files: {len(self._entries)} logged by the checkpoint ({processed} through "
                 f"logOffset {end}) + {len(unread)} unread")
        behind_bytes = self._bytes_behind(unread, logged_later)
        if self.rows_per_byte is not None and behind_bytes is not None:
            return FileReading(round(behind_bytes * self.rows_per_byte), behind, arrived,
                               f"{basis}; {behind} files behind, {behind_bytes / 1024:.1f} KiB x "
                               f"{self.rows_per_byte:.3g} rows per byte")
        if self.rows_per_file is None:
            return FileReading(0 if behind == 0 else None, behind, arrived,
                               f"{basis}; {behind} files behind, rows per file not seen yet")
        why = "no batch's bytes known yet" if self.rows_per_byte is None else "a file behind could not be sized"
        return FileReading(round(behind * self.rows_per_file), behind, arrived,
                           f"{basis}; {behind} files behind x {self.rows_per_file:.1f} rows per file ({why})")

    def _bytes_behind(self, unread: list[os.DirEntry[str]], logged_later: list[str]) -> int | None:
        """Bytes of the files behind, remembered for the batch that reads them; None when a stat fails.

        A file gone since the listing counts 0 bytes. Unread files are sized by their `DirEntry`
        (one stat each, cached by it)."""
        sized: list[tuple[str, Callable[[], os.stat_result]]] = [(os.path.abspath(e.path), e.stat) for e in unread]
        sized += [(path, partial(os.stat, path)) for path in logged_later]
        sizes: dict[str, int] = {}
        known = True
        for path, stat in sized:
            try:
                sizes[path] = stat().st_size
            except FileNotFoundError:
                continue  # 0 bytes, and no size to remember
            except OSError:
                known = False
        self._bytes_behind_by_path = sizes
        return sum(sizes.values()) if known else None


class SourceReporter:
    """Builds the `SourceReport`s of one query, keeping what a file backlog needs between reports."""

    def __init__(self, checkpoint: str | None):
        self.checkpoint = checkpoint
        self._files: dict[int, FileBacklog] = {}

    def reports(self, progress: StreamingQueryProgress) -> list[SourceReport]:
        out = []
        for index, s in enumerate(progress.sources or []):
            out.append(self._report(index, s))
        return out

    def _report(self, index: int, s: SourceProgress) -> SourceReport:
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
            r = files.report(s.startOffset, s.endOffset, base["num_input_rows"])
            return SourceReport(**base, backlog_records=r.backlog_records, backlog_files=r.backlog_files,
                                backlog_estimate="file_listing" if r.backlog_records is not None else "unknown",
                                backlog_detail=r.detail, position_records=r.position_files, position_unit="files")
        return SourceReport(**base, backlog_estimate="unknown",
                            backlog_detail=f"{kind} source reports no backlog")


def _finite(value: float | None) -> float | None:
    """A rate as a finite float; None for none, NaN or infinity (a source's first batch has no rate)."""
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None
