"""Reading what the clickstream fixture job wrote: the committed Parquet files of `page_windows`
(only those its sink log lists) and the per-batch JSON files of `user_totals` (bench.clickcheck's
inputs; no PySpark)."""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.parquet as pq

from sparkscale_lab.bench.clicks import iso_ms

WINDOWS_DIR = "page_windows"
USER_TOTALS_DIR = "user_totals"
SINK_LOG_DIR = "_spark_metadata"
_LOG_NAME = re.compile(r"(\d+)(\.compact)?")
_BATCH_NAME = re.compile(r"batch-(\d+)\.json")

WindowKey = tuple[str, str | None]  # (window start, ISO 8601 UTC with ms as clicks.iso_ms; section)
UserTotal = tuple[int, int]  # (clicks, total_ms)




@dataclass
class SinkWindows:
    """The rows of the committed Parquet files of `page_windows`."""

    counts: dict[WindowKey, int] = field(default_factory=dict)  # for a duplicated key: the last row read
    duplicates: dict[WindowKey, list[int]] = field(default_factory=dict)  # every count of a key seen twice or more
    committed_files: list[str] = field(default_factory=list)
    missing_files: list[str] = field(default_factory=list)  # listed by the log, absent: their rows are lost
    uncommitted_files: list[str] = field(default_factory=list)  # Parquet files not in the log: ignored
    last_batch_id: int | None = None


def committed_files(sink_dir: str | os.PathLike[str]) -> tuple[list[str], int | None]:
    """The data files a file sink committed, in log order, from `<sink_dir>/_spark_metadata`, and
    the latest batch id in the log (None if there is no log yet)."""
    sink = Path(sink_dir)
    log_dir = sink / SINK_LOG_DIR
    if not log_dir.is_dir():
        return [], None
    plain: dict[int, Path] = {}
    compact: dict[int, Path] = {}
    for entry in os.scandir(log_dir):
        match = _LOG_NAME.fullmatch(entry.name)  # skips .crc and temporary files
        if match:
            (compact if match.group(2) else plain)[int(match.group(1))] = Path(entry.path)
    if not plain and not compact:
        return [], None
    latest_compact = max(compact, default=-1)
    # A compact file holds every entry up to its batch; older plain files may still be there.
    to_read = ([compact[latest_compact]] if latest_compact >= 0 else []) + [
        plain[i] for i in sorted(plain) if i > latest_compact
    ]
    paths: dict[str, None] = {}  # ordered set
    for log_file in to_read:
        lines = log_file.read_text(encoding="utf-8").splitlines()
        if not lines or not re.fullmatch(r"v\d+", lines[0].strip()):
            raise ValueError(f"{log_file}: not a file sink log (no version line)")
        for line in lines[1:]:
            if not line.strip():
                continue
            entry = json.loads(line)
            path = _local_path(entry["path"], sink)
            if entry.get("action", "add") == "delete":
                paths.pop(path, None)
            else:
                paths[path] = None
    return list(paths), max([*plain, *compact])


def _local_path(url: str, sink: Path) -> str:
    """A log entry's path (a URL, `file:/abs/part-....parquet`, percent-encoded) as a local path."""
    parsed = urlparse(url)
    if parsed.scheme not in ("", "file"):
        raise ValueError(f"file sink entry {url!r} is not on the local file system")
    path = Path(unquote(parsed.path))
    if not path.is_absolute():
        path = sink / path
    if not path.exists() and (sink / path.name).exists():
        path = sink / path.name  # the output directory was moved since
    return str(path)


def read_windows(output_dir: str | os.PathLike[str]) -> SinkWindows:
    """`page_windows` rows from the committed Parquet files only, keyed (window start, section).
    A key in more than one row is a duplicate (`SinkWindows.duplicates`)."""
    sink = Path(output_dir) / WINDOWS_DIR
    result = SinkWindows()
    for attempt in range(3):  # a compaction may delete log files while we list them
        try:
            paths, result.last_batch_id = committed_files(sink)
            break
        except FileNotFoundError:
            if attempt == 2:
                raise
            time.sleep(0.2)
    result.committed_files = paths
    listed = {os.path.realpath(p) for p in paths}
    if sink.is_dir():
        result.uncommitted_files = sorted(
            e.path for e in os.scandir(sink)
            if e.is_file() and e.name.endswith(".parquet") and os.path.realpath(e.path) not in listed
        )
    seen: dict[WindowKey, list[int]] = {}
    for path in paths:
        if not os.path.exists(path):
            result.missing_files.append(path)
            continue
        table = pq.read_table(path, columns=["window_start", "section", "count"])
        starts = _epoch_ms(table.column("window_start"))
        for start, section, count in zip(starts, table.column("section").to_pylist(),
                                         table.column("count").to_pylist(), strict=True):
            key = (iso_ms(start) if start is not None else "null", section)
            seen.setdefault(key, []).append(int(count))
            result.counts[key] = int(count)
    result.duplicates = {k: v for k, v in seen.items() if len(v) > 1}
    return result


def _epoch_ms(column: pa.ChunkedArray) -> list[int | None]:
    """Epoch ms of a Parquet timestamp column: Spark writes INT96 (read as naive timestamp[ns]) or
    TIMESTAMP_MICROS adjusted to UTC (read as timestamp[us, tz=UTC]); either holds UTC instants."""
    if not pa.types.is_timestamp(column.type):
        raise ValueError(f"window_start has type {column.type}, not a timestamp")
    raw = column.cast(pa.int64()).to_pylist()
    unit = column.type.unit
    if unit == "s":
        return [None if v is None else v * 1000 for v in raw]
    per_ms = {"ms": 1, "us": 1000, "ns": 1_000_000}[unit]
    return [None if v is None else v // per_ms for v in raw]


@dataclass
class UserBatches:
    """`user_totals` batch files read in batch-id order."""

    latest: dict[str | None, UserTotal] = field(default_factory=dict)
    batch_ids: list[int] = field(default_factory=list)
    duplicates: dict[str | None, list[int]] = field(default_factory=dict)  # user -> batches listing it twice+
    regressions: dict[str | None, list[int]] = field(default_factory=dict)  # user -> batches where clicks fell


def read_user_batches(output_dir: str | os.PathLike[str]) -> UserBatches:
    folder = Path(output_dir) / USER_TOTALS_DIR
    result = UserBatches()
    if not folder.is_dir():
        return result
    batches = sorted(
        (int(m.group(1)), e.path) for e in os.scandir(folder) if (m := _BATCH_NAME.fullmatch(e.name))
    )
    for batch_id, path in batches:
        result.batch_ids.append(batch_id)
        in_batch: set[str | None] = set()
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                if not line.strip():
                    continue
                row = json.loads(line)
                user = row.get("user")
                if user in in_batch:
                    result.duplicates.setdefault(user, []).append(batch_id)
                in_batch.add(user)
                total = (int(row.get("clicks") or 0), int(row.get("total_ms") or 0))
                previous = result.latest.get(user)
                if previous is not None and total[0] < previous[0]:
                    result.regressions.setdefault(user, []).append(batch_id)
                result.latest[user] = total
    return result


def read_user_totals(output_dir: str | os.PathLike[str]) -> dict[str | None, UserTotal]:
    """The latest (clicks, total_ms) per user over the batch files, in batch-id order (update mode
    writes only the users that changed in a batch)."""
    return read_user_batches(output_dir).latest


