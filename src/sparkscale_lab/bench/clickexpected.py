"""The oracle's expected outputs for the clickstream fixture job (tests/fixtures/clickstream.py),
computed from the input files alone; clickcheck.py compares them with what the job wrote.

What the job computes, and the Spark semantics the oracle follows:

* `page_windows`: `withWatermark("ts", W)` -> count per (tumbling `window(ts, S)`, section) ->
  Parquet file sink, append mode. Windows are epoch-aligned: start = ts - ts mod S, end = start + S
  (end exclusive). The watermark is max(event time seen) - W, computed at the end of a batch and used
  by the next one; append mode emits a window once, with its final count, when
  `window.end <= watermark` (`WatermarkSupport.watermarkExpression`: end <= watermark, inclusive).
  So once every input file has been read, the windows emitted are exactly those with
  end <= max(ts of all records) - W. That needs one batch *after* the batch that read the last
  file: Spark runs it by itself, a no-data micro-batch at the next trigger, because the watermark
  advanced (`spark.sql.streaming.noDataMicroBatches.enabled`, true by default;
  `StateStoreSaveExec.shouldRunAnotherBatch`). The caller lands a flush file last
  (`filefeed.land_files(..., flush=True)`): one record `window + watermark + 1` s after the last,
  which moves the watermark past the end of every earlier window.
  Records the watermark would drop as late are not modelled: the oracle assumes there are none
  and counts those that could be (`Expected.late_risk`: event time <= the max event time of the
  files Spark may have read before, minus W). The feed lands files in event-time order with
  increasing mtimes (Spark's file source reads new files oldest first), so it has none.
* `user_totals`: count and sum(ms) per user over all records, update mode, foreachBatch writing
  `batch-<id:08d>.json` per micro-batch with the rows that changed in it; the latest row per user
  across batch ids is its total.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkscale_lab.bench.clicks import iso_ms, parse_iso_ms
from sparkscale_lab.bench.clicksinks import UserTotal, WindowKey


def section_of(page: str | None) -> str | None:
    """The fixture's UDF body, duplicated (a unit test checks they agree): the first path
    component, lower-cased ("/Shop/item/3" -> "shop"); the query string is dropped; "/" -> "home"."""
    if page is None:
        return None
    parts = [part for part in page.split("?")[0].split("/") if part]
    return parts[0].lower() if parts else "home"


def window_start_ms(ts_ms: int, window_ms: int) -> int:
    return ts_ms - ts_ms % window_ms


# ---------------------------------------------------------------------------------------------
# The oracle: expected outputs from the input files


@dataclass
class Expected:
    window_s: float
    watermark_s: float
    files: dict[str, int]  # every input file Spark would read -> records in it
    records: int
    max_event_ms: int | None
    windows: dict[WindowKey, int]  # emitted once all input is read: end <= max event time - watermark
    open_windows: dict[WindowKey, int]  # never emitted (end beyond the final watermark)
    users: dict[str | None, UserTotal]
    late_risk: int = 0  # records Spark could drop as late (see the module docstring)
    bad_lines: int = 0  # lines that are not JSON objects (Spark would read them as all-null rows)

    @property
    def final_watermark_ms(self) -> int | None:
        return None if self.max_event_ms is None else self.max_event_ms - round(self.watermark_s * 1000)


@dataclass(frozen=True)
class _InputFile:
    name: str
    mtime_ms: int
    records: list[dict[str, Any]]
    bad_lines: int


def _input_files(input_dir: Path) -> list[_InputFile]:
    """The files Spark's file source would read (names not starting with `.` or `_`), oldest first."""
    found = []
    for entry in os.scandir(input_dir):
        if entry.name.startswith((".", "_")) or not entry.is_file():
            continue
        records, bad = [], 0
        with open(entry.path, encoding="utf-8") as handle:
            for line in handle:
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except ValueError:
                    record = None
                if isinstance(record, dict):
                    records.append(record)
                else:
                    bad += 1
        found.append(_InputFile(entry.name, entry.stat().st_mtime_ns // 1_000_000, records, bad))
    found.sort(key=lambda f: (f.mtime_ms, f.name))
    return found


def expected_outputs(input_dir: str | os.PathLike[str], window_s: float, watermark_s: float) -> Expected:
    """What the fixture job must have written once it has read every file in `input_dir` (and run
    the no-data batch after the last one): the module docstring gives the semantics."""
    window_ms, delay_ms = round(window_s * 1000), round(watermark_s * 1000)
    files = _input_files(Path(input_dir))
    all_windows: dict[WindowKey, int] = {}
    window_ends: dict[WindowKey, int] = {}
    users: dict[str | None, UserTotal] = {}
    max_event_ms: int | None = None
    late_risk = 0
    # Files with the same mtime (in ms, Spark's resolution) may be read in either order.
    by_mtime: dict[int, list[_InputFile]] = {}
    for f in files:
        by_mtime.setdefault(f.mtime_ms, []).append(f)
    for group in by_mtime.values():
        group_max = {f.name: _max_ts(f) for f in group}
        for f in group:
            before = [m for m in [max_event_ms] + [v for k, v in group_max.items() if k != f.name] if m is not None]
            read_before_ms = max(before) if before else None
            for record in f.records:
                ts = _ts_ms(record)
                clicks, total = users.get(record.get("user"), (0, 0))
                ms = record.get("ms")
                users[record.get("user")] = (clicks + 1, total + (int(ms) if ms is not None else 0))
                if ts is None:
                    continue  # a null event time: no window
                if read_before_ms is not None and ts <= read_before_ms - delay_ms:
                    late_risk += 1
                start = window_start_ms(ts, window_ms)
                key = (iso_ms(start), section_of(record.get("page")))
                all_windows[key] = all_windows.get(key, 0) + 1
                window_ends[key] = start + window_ms
        for m in group_max.values():
            if m is not None and (max_event_ms is None or m > max_event_ms):
                max_event_ms = m
    watermark_ms = None if max_event_ms is None else max_event_ms - delay_ms
    emitted = {k: n for k, n in all_windows.items() if watermark_ms is not None and window_ends[k] <= watermark_ms}
    return Expected(
        window_s=window_s,
        watermark_s=watermark_s,
        files={f.name: len(f.records) + f.bad_lines for f in files},
        records=sum(len(f.records) for f in files),
        max_event_ms=max_event_ms,
        windows=emitted,
        open_windows={k: n for k, n in all_windows.items() if k not in emitted},
        users=users,
        late_risk=late_risk,
        bad_lines=sum(f.bad_lines for f in files),
    )


def _ts_ms(record: dict[str, Any]) -> int | None:
    ts = record.get("ts")
    return None if ts is None else parse_iso_ms(ts)


def _max_ts(f: _InputFile) -> int | None:
    stamps = [t for t in (_ts_ms(r) for r in f.records) if t is not None]
    return max(stamps) if stamps else None
