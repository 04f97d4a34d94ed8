"""The oracle for the clickstream fixture job (tests/fixtures/clickstream.py): what its two queries
must have written, computed from the input files alone, and a verifier comparing that with what
they did write. Head side only: no PySpark (Parquet is read with pyarrow).

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

Only files the Parquet sink committed are read: those listed in `page_windows/_spark_metadata/`,
the sink's log (one file per batch id, `<id>`, and every 10th batch a `<id>.compact` holding all
entries so far; each starts with a version line `v1`, then one JSON entry per line with `path` and
`action` "add" or "delete"). Parquet files a failed batch left behind are not listed and are ignored.

Driving a run end to end: see `wait_for_outputs`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from sparkscale_lab.bench.clicksinks import (  # noqa: F401 - re-exported: the readers are part of the oracle's API
    SINK_LOG_DIR,
    USER_TOTALS_DIR,
    WINDOWS_DIR,
    SinkWindows,
    UserBatches,
    UserTotal,
    WindowKey,
    committed_files,
    read_user_batches,
    read_user_totals,
    read_windows,
)
from sparkscale_lab.bench.filefeed import default_manifest_path, iso_ms, manifest_files, parse_iso_ms

_SHOWN = 5


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


# ---------------------------------------------------------------------------------------------
# Verifying


@dataclass
class ClickCheck:
    input_files: int
    input_records: int
    windows_expected: int
    windows_found: int
    windows_lost: list[WindowKey] = field(default_factory=list)
    windows_duplicated: dict[WindowKey, list[int]] = field(default_factory=dict)
    windows_wrong: dict[WindowKey, tuple[int, int]] = field(default_factory=dict)  # (expected, found)
    windows_extra: dict[WindowKey, int] = field(default_factory=dict)  # emitted, not expected
    users_expected: int = 0
    users_found: int = 0
    users_lost: list[str | None] = field(default_factory=list)
    users_duplicated: dict[str | None, list[int]] = field(default_factory=dict)
    users_wrong: dict[str | None, tuple[UserTotal, UserTotal]] = field(default_factory=dict)  # (expected, found)
    users_extra: dict[str | None, UserTotal] = field(default_factory=dict)
    users_regressed: dict[str | None, list[int]] = field(default_factory=dict)
    input_problems: list[str] = field(default_factory=list)  # manifest vs directory, late risk, bad lines
    committed_files_missing: list[str] = field(default_factory=list)
    uncommitted_files: int = 0  # leftovers of failed batches, ignored (informational)
    windows_batch: int | None = None  # latest batch id in the Parquet sink's log
    users_batch: int | None = None  # latest user_totals batch file

    @property
    def windows_ok(self) -> bool:
        return not (self.windows_lost or self.windows_duplicated or self.windows_wrong
                    or self.windows_extra or self.committed_files_missing)

    @property
    def users_ok(self) -> bool:
        return not (self.users_lost or self.users_duplicated or self.users_wrong
                    or self.users_extra or self.users_regressed)

    @property
    def ok(self) -> bool:
        return self.windows_ok and self.users_ok and not self.input_problems

    def summary(self) -> str:
        status = "OK" if self.ok else "FAILED"
        text = (
            f"clickcheck {status}: input {self.input_records} records in {self.input_files} files; "
            f"windows {self.windows_found}/{self.windows_expected} (lost {len(self.windows_lost)}, "
            f"duplicated {len(self.windows_duplicated)}, wrong {len(self.windows_wrong)}, "
            f"extra {len(self.windows_extra)}"
            + (f", committed files missing {len(self.committed_files_missing)}" if self.committed_files_missing else "")
            + f"); users {self.users_found}/{self.users_expected} (lost {len(self.users_lost)}, "
            f"duplicated {len(self.users_duplicated)}, wrong {len(self.users_wrong)}, extra {len(self.users_extra)}"
            + (f", regressed {len(self.users_regressed)}" if self.users_regressed else "")
            + ")"
        )
        if self.input_problems:
            text += f"; input problems: {'; '.join(self.input_problems[:_SHOWN])}"
        return text

    def details(self) -> str:
        """Multi-line: the first few offending keys of each kind."""
        lines = [self.summary()]
        for label, items in (
            ("windows lost", self.windows_lost),
            ("windows duplicated", self.windows_duplicated),
            ("windows wrong (expected, found)", self.windows_wrong),
            ("windows extra", self.windows_extra),
            ("committed files missing", self.committed_files_missing),
            ("users lost", self.users_lost),
            ("users duplicated (batches)", self.users_duplicated),
            ("users wrong (expected, found)", self.users_wrong),
            ("users extra", self.users_extra),
            ("users regressed (batches)", self.users_regressed),
        ):
            if items:
                lines.append(f"  {label}: {_sample(items)}")
        return "\n".join(lines)


def _sample(items: Iterable[Any] | dict[Any, Any]) -> str:
    if isinstance(items, dict):
        shown = [f"{k}: {v}" for k, v in list(items.items())[:_SHOWN]]
        total = len(items)
    else:
        listed = list(items)
        shown, total = [str(x) for x in listed[:_SHOWN]], len(listed)
    return ", ".join(shown) + (f", ... ({total} in all)" if total > _SHOWN else "")


def verify(
    input_dir: str | os.PathLike[str],
    output_dir: str | os.PathLike[str],
    window_s: float,
    watermark_s: float,
    manifest: str | os.PathLike[str] | None = None,
) -> ClickCheck:
    """Compare what the job wrote in `output_dir` with what the input files in `input_dir` say it
    must have written. The feed's manifest (`manifest`, default `<input_dir>.manifest.json` when it
    exists) is checked against the directory: every landed file there, whole, and nothing else."""
    expected = expected_outputs(input_dir, window_s, watermark_s)
    windows = read_windows(output_dir)
    users = read_user_batches(output_dir)
    check = ClickCheck(
        input_files=len(expected.files),
        input_records=expected.records,
        windows_expected=len(expected.windows),
        windows_found=len(windows.counts),
        users_expected=len(expected.users),
        users_found=len(users.latest),
        committed_files_missing=windows.missing_files,
        uncommitted_files=len(windows.uncommitted_files),
        windows_batch=windows.last_batch_id,
        users_batch=users.batch_ids[-1] if users.batch_ids else None,
    )
    for key, n in expected.windows.items():
        found = windows.counts.get(key)
        if found is None:
            check.windows_lost.append(key)
        elif found != n:
            check.windows_wrong[key] = (n, found)
    check.windows_duplicated = dict(windows.duplicates)
    check.windows_extra = {k: n for k, n in windows.counts.items() if k not in expected.windows}
    for user, total in expected.users.items():
        found_total = users.latest.get(user)
        if found_total is None:
            check.users_lost.append(user)
        elif found_total != total:
            check.users_wrong[user] = (total, found_total)
    check.users_duplicated = dict(users.duplicates)
    check.users_extra = {u: t for u, t in users.latest.items() if u not in expected.users}
    check.users_regressed = dict(users.regressions)
    check.input_problems = _input_problems(input_dir, expected, manifest)
    return check


def _input_problems(input_dir: str | os.PathLike[str], expected: Expected,
                    manifest: str | os.PathLike[str] | None) -> list[str]:
    problems = []
    manifest_path = Path(manifest) if manifest is not None else default_manifest_path(input_dir)
    if manifest is not None or manifest_path.exists():
        listed = manifest_files(manifest_path)
        missing = sorted(set(listed) - set(expected.files))
        unlisted = sorted(set(expected.files) - set(listed))
        short = sorted(n for n in set(listed) & set(expected.files) if listed[n] != expected.files[n])
        if missing:
            problems.append(f"{len(missing)} landed files missing from the input ({_sample(missing)})")
        if unlisted:
            problems.append(f"{len(unlisted)} input files not in the manifest ({_sample(unlisted)})")
        if short:
            problems.append(f"{len(short)} input files with a record count unlike the manifest's ({_sample(short)})")
    if expected.late_risk:
        problems.append(f"{expected.late_risk} records could be dropped as late (event time behind the watermark)")
    if expected.bad_lines:
        problems.append(f"{expected.bad_lines} input lines are not JSON objects")
    return problems


def wait_for_outputs(
    input_dir: str | os.PathLike[str],
    output_dir: str | os.PathLike[str],
    window_s: float,
    watermark_s: float,
    timeout_s: float,
    *,
    interval_s: float = 1.0,
    manifest: str | os.PathLike[str] | None = None,
) -> ClickCheck:
    """Poll `verify` until it passes or `timeout_s` passes; return the last check (check `.ok`).

    End to end: create the input directory (Spark's file source requires it to exist when the
    query starts), start the job, land the files with `filefeed.land_files(..., flush=True)`
    (before or after the start; the flush file must be last), then call this. It passes once both
    queries have read every file, including the flush file, and `page_windows` has run the no-data
    batch that follows (at the next trigger), so every closed window is committed. Stop the job
    after; `verify` again if the job kept running a while, to catch late duplicates.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        check: ClickCheck | None = None
        try:
            check = verify(input_dir, output_dir, window_s, watermark_s, manifest)
        except (OSError, pa.ArrowInvalid):  # e.g. a log file deleted by a compaction meanwhile: retry
            if time.monotonic() > deadline:
                raise
        if check is not None and (check.ok or time.monotonic() > deadline):
            return check
        time.sleep(interval_s)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Verify the clickstream fixture job's output against its input.")
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--window-s", type=float, default=10)
    parser.add_argument("--watermark-s", type=float, default=5)
    parser.add_argument("--manifest", default=None)
    parser.add_argument("--wait-s", type=float, default=0, help="poll until it passes, at most this long")
    args = parser.parse_args(argv)
    if args.wait_s > 0:
        check = wait_for_outputs(args.input, args.output, args.window_s, args.watermark_s, args.wait_s,
                                 manifest=args.manifest)
    else:
        check = verify(args.input, args.output, args.window_s, args.watermark_s, args.manifest)
    print(check.details())
    return 0 if check.ok else 1


if __name__ == "__main__":
    sys.exit(main())
