"""Lands JSON-lines click files in a directory at a load profile's rate: the input of the
clickstream fixture job (tests/fixtures/clickstream.py), read by Spark's file source.

Head side only (no PySpark). The rate follows a `pipeline.profiles` spec (`constant:150@60s`,
`steps:10@40s,40@60s`, ...): the feed sends "what the profile's integral says is due by now", as the
Redis load generator does, but in files: one file per tick (`files_per_s`) or one file per
`records_per_file` records.

Each file is written under a dot-prefixed temporary name in the same directory and then renamed
into place with `os.replace`: Spark's file source skips names starting with `.` or `_`, and a rename
within a directory is atomic, so Spark never lists half a file. Its modification time is set
strictly increasing (at least 1 ms apart, Spark's resolution): the file source takes new files
oldest first, so it reads them in landing order, hence in event-time order.

Content is a pure function of (seed, profile, files_per_s / records_per_file, start_ts): record n
(0-based) has `event_id` `<seed>-<n>`, a user from a small key space, a page such as
`/Shop/item/3`, a latency `ms`, and an event time `ts` on the feed's own clock, not the wall clock:
`start_ts` + the profile time at which the record became due (for a constant rate, n / rate),
in ISO 8601 UTC with milliseconds (`2025-01-01T00:00:01.250Z`). Landing is paced by the wall clock
(`realtime=True`) or as fast as possible (`realtime=False`: a backlog); the content is the same.

A final flush file (`flush=True`) holds one ordinary record (next event id, user, page) whose event
time is `window_s + watermark_s + 1` s after the last record's: once Spark has read it, the
watermark passes the end of every earlier window, so an append-mode windowed query emits them all
(in the no-data batch Spark runs after the watermark advances; see `bench.clickcheck`).

The manifest, a JSON file next to the directory (`<dir>.manifest.json`, not inside it, so Spark
does not read it), lists each run's files and record counts; a later run into the same directory
appends to it. A verifier checks that every listed file is there, whole, and nothing else.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from sparkscale_lab.bench.clicks import EPOCH, ClickSource, iso_ms, parse_iso_ms
from sparkscale_lab.pipelines.profiles import LoadProfile, parse_profile

MANIFEST_FORMAT = "sparkscale-filefeed/1"
DEFAULT_FILES_PER_S = 1.0
RECORDS_PER_FILE_TICK_S = 0.02  # records_per_file mode: how finely the profile is followed
FILE_PREFIX = "clicks"
FLUSH_MARGIN_S = 1.0

StopReason = Literal["profile_end", "max_duration", "stop_event"]


@dataclass(frozen=True)
class LandedFile:
    name: str
    records: int
    first_seq: int  # event_id of its first record is <seed>-<first_seq>
    first_ts: str
    last_ts: str
    flush: bool = False


@dataclass
class FeedResult:
    directory: Path
    manifest_path: Path
    seed: int
    profile: str
    start_ts: str
    files: list[LandedFile] = field(default_factory=list)
    records: int = 0  # all records written, the flush record included
    stopped_by: StopReason = "profile_end"
    duration_s: float = 0.0  # wall time the landing took
    feed_time_s: float = 0.0  # profile time covered (event-time span of the regular records)

    @property
    def file_count(self) -> int:
        return len(self.files)

    @property
    def flush_file(self) -> str | None:
        return next((f.name for f in self.files if f.flush), None)

    @property
    def last_ts(self) -> str | None:
        return self.files[-1].last_ts if self.files else None

    def manifest_run(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "profile": self.profile,
            "start_ts": self.start_ts,
            "records": self.records,
            "stopped_by": self.stopped_by,
            "feed_time_s": round(self.feed_time_s, 3),
            "files": [asdict(f) for f in self.files],
        }


# ---------------------------------------------------------------------------------------------
# Landing


def default_manifest_path(directory: str | os.PathLike[str]) -> Path:
    """`<parent>/<name>.manifest.json`: next to the input directory, not inside it."""
    path = Path(directory).resolve()
    return path.parent / f"{path.name}.manifest.json"


def land_files(
    directory: str | os.PathLike[str],
    profile: LoadProfile | str,
    seed: int = 0,
    *,
    files_per_s: float | None = None,
    records_per_file: int | None = None,
    stop: threading.Event | None = None,
    start_ts: datetime | float | None = None,
    max_duration_s: float | None = None,
    flush: bool = False,
    window_s: float = 10,
    watermark_s: float = 5,
    realtime: bool = True,
    manifest: str | os.PathLike[str] | None = None,
    prefix: str = FILE_PREFIX,
) -> FeedResult:
    """Land click files in `directory` (created if missing) following `profile` (records/s).

    One of `files_per_s` (one file per 1/files_per_s s of profile time, holding what fell due in
    it; ticks where nothing fell due land nothing) or `records_per_file` (a file each time that
    many records are due; the last one may be short); neither means `files_per_s=1`.
    `start_ts` (aware datetime or epoch seconds; default: now, to the millisecond) is the event
    time of profile time 0. Stops at the profile's end, after `max_duration_s` of profile time, or
    when `stop` is set (landing what is due so far); an unbounded profile needs one of the last two.
    `realtime=False` lands everything without waiting (same files, same content).
    `flush=True` then lands the flush file (module docstring) sized by `window_s`/`watermark_s`.
    The manifest (`manifest`, default `<dir>.manifest.json`) gets this run appended, also when
    the landing is interrupted.
    """
    prof = parse_profile(profile) if isinstance(profile, str) else profile
    if files_per_s is not None and records_per_file is not None:
        raise ValueError("give files_per_s or records_per_file, not both")
    if files_per_s is None and records_per_file is None:
        files_per_s = DEFAULT_FILES_PER_S
    if files_per_s is not None and not files_per_s > 0:
        raise ValueError(f"files_per_s must be positive (got {files_per_s})")
    if records_per_file is not None and records_per_file < 1:
        raise ValueError(f"records_per_file must be at least 1 (got {records_per_file})")
    if max_duration_s is not None and not max_duration_s > 0:
        raise ValueError(f"max_duration_s must be positive (got {max_duration_s})")
    end_s, end_reason = _end(prof, max_duration_s)
    if end_s is None and (stop is None or not realtime):
        raise ValueError(
            f"profile {prof.spec or prof!r} is unbounded: give max_duration_s"
            + ("" if realtime else " (realtime=False cannot be stopped by an event)")
            + " or a stop event"
        )

    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    manifest_path = Path(manifest) if manifest is not None else default_manifest_path(folder)
    start_ms = _start_ms(start_ts)
    result = FeedResult(folder, manifest_path, seed, prof.spec or repr(prof), iso_ms(start_ms))
    writer = _Writer(folder, f"{prefix}-{seed}")
    source = ClickSource(seed)
    t0 = time.monotonic()
    try:
        pending: list[dict[str, Any]] = []
        last_ts_ms = start_ms
        stopped = False
        tick_s = 1.0 / files_per_s if files_per_s is not None else RECORDS_PER_FILE_TICK_S
        for t_a, t_b, due in _ticks(prof, end_s, tick_s):
            if not _wait_until(t0 + t_b if realtime else 0.0, stop):
                stopped = True
                break
            r_a, r_b = prof.records_by(t_a), prof.records_by(t_b)
            while source.next_seq < due:
                n = source.next_seq
                # Interpolate the profile's integral over the tick: exact (n / rate) for a constant
                # rate; at a rate change it may reach back before t_a, never before the last record.
                frac = min((n - r_a) / (r_b - r_a), 1.0) if r_b > r_a else 1.0
                t_n = t_a + frac * (t_b - t_a)
                last_ts_ms = max(last_ts_ms, start_ms + round(t_n * 1000))
                pending.append(source.next(last_ts_ms))
            result.feed_time_s = t_b
            if records_per_file is None:
                if pending:
                    result.files.append(writer.land(pending))
                    pending = []
            else:
                while len(pending) >= records_per_file:
                    result.files.append(writer.land(pending[:records_per_file]))
                    pending = pending[records_per_file:]
        if pending:
            result.files.append(writer.land(pending))
        result.stopped_by = "stop_event" if stopped else end_reason
        if flush:
            flush_ms = last_ts_ms + round((window_s + watermark_s + FLUSH_MARGIN_S) * 1000)
            result.files.append(writer.land([source.next(flush_ms)], flush=True))
    finally:
        result.records = sum(f.records for f in result.files)
        result.duration_s = time.monotonic() - t0
        append_manifest(manifest_path, folder, result)
    return result


def _end(profile: LoadProfile, max_duration_s: float | None) -> tuple[float | None, StopReason]:
    if profile.duration_s is None:
        return max_duration_s, "max_duration"
    if max_duration_s is not None and max_duration_s < profile.duration_s:
        return max_duration_s, "max_duration"
    return profile.duration_s, "profile_end"


def _start_ms(start_ts: datetime | float | None) -> int:
    if start_ts is None:
        return time.time_ns() // 1_000_000
    if isinstance(start_ts, datetime):
        if start_ts.tzinfo is None:
            raise ValueError("start_ts must be timezone-aware (or epoch seconds)")
        delta = start_ts - EPOCH
        return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000
    return round(float(start_ts) * 1000)


def _ticks(profile: LoadProfile, end_s: float | None, tick_s: float) -> Iterator[tuple[float, float, int]]:
    """(tick start, tick end, records due by the tick end) in profile time; the last tick ends at
    `end_s`. Tick k ends at (k+1)*tick_s, computed from k so that no rounding error accumulates."""
    k = 0
    while True:
        t_a = k * tick_s
        if end_s is not None and t_a >= end_s:
            return
        t_b = (k + 1) * tick_s
        if end_s is not None:
            t_b = min(t_b, end_s)
        # The epsilon absorbs float error in the integral (e.g. 0.1 * 30 = 2.9999999999999996).
        yield t_a, t_b, math.floor(profile.records_by(t_b) + 1e-9)
        k += 1


def _wait_until(deadline: float, stop: threading.Event | None) -> bool:
    """Sleep until the monotonic `deadline`; False if `stop` was set first."""
    while True:
        if stop is not None and stop.is_set():
            return False
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return True
        if stop is not None:
            stop.wait(remaining)
        else:
            time.sleep(remaining)


class _Writer:
    """Writes each file under `.<name>.tmp`, stamps a strictly increasing mtime, renames it into place."""

    def __init__(self, folder: Path, stem: str):
        self._folder = folder
        self._stem = stem
        self._index = 0
        self._last_mtime_ns = 0

    def land(self, records: list[dict[str, Any]], flush: bool = False) -> LandedFile:
        name = f"{self._stem}-flush.json" if flush else f"{self._stem}-{self._index:06d}.json"
        final = self._folder / name
        if final.exists():
            raise FileExistsError(f"{final} already exists: use another seed or directory")
        tmp = self._folder / f".{name}.tmp"
        with open(tmp, "w", encoding="utf-8") as out:
            out.writelines(json.dumps(r, separators=(",", ":")) + "\n" for r in records)
        # At least 1 ms after the previous file: Spark sees mtimes in ms and orders new files by them.
        mtime_ns = max(time.time_ns(), self._last_mtime_ns + 1_000_000)
        os.utime(tmp, ns=(mtime_ns, mtime_ns))
        self._last_mtime_ns = mtime_ns
        os.replace(tmp, final)
        if not flush:
            self._index += 1
        first_seq = int(records[0]["event_id"].rsplit("-", 1)[1])
        return LandedFile(name, len(records), first_seq, records[0]["ts"], records[-1]["ts"], flush)


# ---------------------------------------------------------------------------------------------
# Manifest


def append_manifest(manifest_path: Path, directory: Path, result: FeedResult) -> None:
    """Add `result` as a run to the manifest (created if missing), written atomically."""
    data = read_manifest(manifest_path) if manifest_path.exists() else None
    if data is None:
        data = {"format": MANIFEST_FORMAT, "directory": str(directory.resolve()), "runs": []}
    data["runs"].append(result.manifest_run())
    manifest_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = manifest_path.with_name(f".{manifest_path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, manifest_path)


def read_manifest(manifest_path: str | os.PathLike[str]) -> dict[str, Any]:
    data = json.loads(Path(manifest_path).read_text(encoding="utf-8"))
    if data.get("format") != MANIFEST_FORMAT:
        raise ValueError(f"{manifest_path}: not a filefeed manifest (format {data.get('format')!r})")
    return data


def manifest_files(manifest_path: str | os.PathLike[str]) -> dict[str, int]:
    """Every file the manifest's runs landed, with its record count."""
    return {f["name"]: f["records"] for run in read_manifest(manifest_path)["runs"] for f in run["files"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Land JSON-lines click files for the clickstream fixture job.")
    parser.add_argument("directory")
    parser.add_argument("--profile", required=True, help="load profile, e.g. constant:40@60s or steps:10@30s,40@60s")
    parser.add_argument("--seed", type=int, default=0)
    per = parser.add_mutually_exclusive_group()
    per.add_argument("--files-per-s", type=float, default=None)
    per.add_argument("--records-per-file", type=int, default=None)
    parser.add_argument("--start-ts", default=None, help="event time of profile time 0 (ISO 8601; default now)")
    parser.add_argument("--max-duration-s", type=float, default=None)
    parser.add_argument("--flush", action="store_true", help="land the flush file last")
    parser.add_argument("--window-s", type=float, default=10)
    parser.add_argument("--watermark-s", type=float, default=5)
    parser.add_argument("--backlog", action="store_true", help="land everything at once (realtime=False)")
    args = parser.parse_args(argv)
    start = None if args.start_ts is None else parse_iso_ms(args.start_ts) / 1000
    stop = threading.Event()
    try:
        result = land_files(
            args.directory, args.profile, args.seed, files_per_s=args.files_per_s,
            records_per_file=args.records_per_file, stop=stop, start_ts=start, max_duration_s=args.max_duration_s,
            flush=args.flush, window_s=args.window_s, watermark_s=args.watermark_s, realtime=not args.backlog,
        )
    except KeyboardInterrupt:
        return 130
    print(json.dumps({"files": result.file_count, "records": result.records, "stopped_by": result.stopped_by,
                      "last_ts": result.last_ts, "manifest": str(result.manifest_path)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
