"""The oracle for the clickstream fixture job (tests/fixtures/clickstream.py): what its two queries
must have written, computed from the input files alone, and a verifier comparing that with what
they did write. Head side only: no PySpark (Parquet is read with pyarrow).

What the job computes and the Spark semantics the oracle follows are clickexpected.py's.

Only files the Parquet sink committed are read: those listed in `page_windows/_spark_metadata/`,
the sink's log (one file per batch id, `<id>`, and every 10th batch a `<id>.compact` holding all
entries so far; each starts with a version line `v1`, then one JSON entry per line with `path` and
`action` "add" or "delete"). Parquet files a failed batch left behind are not listed and are ignored.

Driving a run end to end: see `wait_for_outputs`.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from sparkscale_lab.bench.clickexpected import Expected, expected_outputs
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
from sparkscale_lab.bench.filefeed import default_manifest_path, manifest_files

_SHOWN = 5


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
