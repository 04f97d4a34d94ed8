"""What a scaling benchmark's sample reads besides the counts (bench.timeline): the backlog the app's
progress reports state, and the end-to-end latency of its batches. Two apps:

- a shipped pipeline on the Redis streams source (`StreamLatencyProbe`): counts as `timeline.look`
  (stream heads, the source's processed offsets); latency of a batch = its end (the progress
  report's trigger start + its duration) minus the stream entry time (the id's milliseconds, Redis's
  clock when the record was added) of the oldest record it read (the first entry after its start
  offset, per partition);
- a script on a file source (`FileProbe`, the clickstream fixture): arrived = records in the files
  landed in its input directory; processed = rows its slowest query read (the progress history, per
  batch id); latency of a batch = its end minus the landing time (modification time, which the feed
  stamps at landing) of the oldest file it read, as the query checkpoint's source log lists it.

The stated backlog is the agent's own estimate, read the way the daemon reads it (the progress
reports' `SourceReport.backlog_records`, summed over a query's sources, unknown when one cannot
tell; for a file source the file-listing estimate): it is never estimated again here. With several
queries, the worst query counts (freshness is that of the stalest output).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import redis

from sparkscale.config import AppConfig, Config
from sparkscale.monitors.collector import read_progress
from sparkscale.monitors.progress_reports import ProgressReport, parse_progress_time
from sparkscale.monitors.spark_rest import SparkRestClient
from sparkscale.protocol.keys import input_stream_key, progress_key
from sparkscale.redisconn import text_hash
from sparkscale.store.redis_queries import read_queries
from sparkscale_lab.bench.timeline import Sample, executors_of, look
from sparkscale_lab.pipelines.workloads import workload

HISTORY_OVERLAP_S = 60.0  # each look re-reads this much progress history (batches are deduplicated)


def stated_backlog(report: ProgressReport | None) -> int | None:
    """A query's backlog as its progress report states it: the sum over its sources; None when any
    source cannot tell or there is no report (the daemon's rule, monitors.source_figures)."""
    if report is None or not report.sources or any(s.backlog_records is None for s in report.sources):
        return None
    return sum(int(s.backlog_records or 0) for s in report.sources)


def worst(values: Iterable[float | int | None], unknown_wins: bool = False) -> Any:
    """The largest known value; None when none is known (or, with `unknown_wins`, when any is not)."""
    items = list(values)
    if unknown_wins and any(v is None for v in items):
        return None
    known = [v for v in items if v is not None]
    return max(known) if known else None


def batch_end_s(report: ProgressReport) -> float | None:
    """When a batch finished: its trigger start plus its duration (else when the agent published it,
    which is right after)."""
    start = parse_progress_time(report.timestamp)
    if start is not None and report.batch_duration_ms is not None:
        return start + report.batch_duration_ms / 1000.0
    return report.published_at_s


def latency_ms(report: ProgressReport, oldest_arrival_s: float | None) -> float | None:
    """End-to-end latency of one batch: its end minus the arrival of the oldest record it read."""
    end = batch_end_s(report)
    if end is None or oldest_arrival_s is None or report.num_input_rows <= 0:
        return None
    return round(max(end - oldest_arrival_s, 0.0) * 1000.0, 1)


class LatencyTracker:
    """Per look: the worst latency of the batches first seen since the previous look; while none
    finished, the previous value stands (a long batch keeps its predecessor's figure)."""

    def __init__(self) -> None:
        self.seen: set[tuple[str, str, int]] = set()
        self.value_ms: float | None = None

    def new(self, query: str, reports: Iterable[ProgressReport]) -> list[ProgressReport]:
        """The reports of batches not seen before (each batch once, idle reports left out)."""
        out = []
        for r in reports:
            key = (query, r.run_id, r.batch_id)
            if key not in self.seen and r.num_input_rows > 0:
                self.seen.add(key)
                out.append(r)
        return out

    def update(self, latencies: Iterable[float | None]) -> float | None:
        found = worst(latencies)
        if found is not None:
            self.value_ms = found
        return self.value_ms


# -- Redis streams --------------------------------------------------------------------------------


def _offset_part(offset: Any, part: str) -> dict[str, Any]:
    if isinstance(offset, str):
        try:
            offset = json.loads(offset)
        except ValueError:
            return {}
    value = offset.get(part) if isinstance(offset, dict) else None
    return value if isinstance(value, dict) else {}


def oldest_stream_arrival_s(client: redis.Redis, prefix: str, app: str, report: ProgressReport) -> float | None:
    """The entry time of the oldest record a batch read from the app's input streams: per partition
    it read from, the first entry after the batch's start offset (the stream's first without one)."""
    wanted: list[tuple[str, str, str]] = []  # (stream, exclusive start id or "-", end id)
    for source in report.sources:
        if source.kind != "redis_streams":
            continue
        start_ids, start_counts = _offset_part(source.start_offset, "ids"), _offset_part(source.start_offset, "counts")
        end_ids, end_counts = _offset_part(source.end_offset, "ids"), _offset_part(source.end_offset, "counts")
        for part, end_count in end_counts.items():
            if int(end_count) <= int(start_counts.get(part, 0)):
                continue
            start, end = start_ids.get(part), end_ids.get(part)
            if end is not None:
                wanted.append((input_stream_key(prefix, app, int(part)), f"({start}" if start else "-", str(end)))
    if not wanted:
        return None
    pipe = client.pipeline(transaction=False)
    for key, lo, hi in wanted:
        pipe.xrange(key, min=lo, max=hi, count=1)
    firsts = [int(str(entries[0][0]).split("-")[0]) for entries in pipe.execute() if entries]
    return min(firsts) / 1000.0 if firsts else None


class StreamLatencyProbe:
    """A shipped pipeline: `timeline.look`'s counts, plus the stated backlog and the latency."""

    def __init__(self, cfg: Config, app: AppConfig):
        self.cfg, self.app = cfg, app
        self.query = workload(app.pipeline).query
        self.latency = LatencyTracker()

    def look(self, client: redis.Redis, rest: SparkRestClient, t0: float) -> Sample:
        sample = look(self.cfg, self.app, client, rest, t0)
        prefix = self.cfg.redis.key_prefix
        last = _last_report(client, prefix, self.app.name, self.query)
        reports = self.latency.new(self.query, read_progress(client, prefix, self.app.name, self.query,
                                                             since_s=time.time() - HISTORY_OVERLAP_S))
        value = self.latency.update(
            latency_ms(r, oldest_stream_arrival_s(client, prefix, self.app.name, r)) for r in reports)
        return replace(sample, stated_backlog_records=stated_backlog(last), latency_ms=value)


def _last_report(client: redis.Redis, prefix: str, app: str, query: str) -> ProgressReport | None:
    fields = client.hgetall(progress_key(prefix, app, query))
    try:
        return ProgressReport.from_fields(text_hash(fields)) if fields else None
    except (KeyError, ValueError):
        return None


# -- a file source --------------------------------------------------------------------------------


def oldest_file_landed_s(checkpoint: str | None, source_index: int, batch_id: int) -> float | None:
    """The modification time of the oldest file a batch read, from the query checkpoint's source log
    (`sources/<n>/<batch>` or `<batch>.compact`: a version line, then one JSON entry per file with
    `path`, `timestamp` (ms) and `batchId`)."""
    if not checkpoint:
        return None
    log_dir = Path(urlparse(checkpoint).path) / "sources" / str(source_index)
    for name in (str(batch_id), f"{batch_id}.compact"):
        try:
            lines = (log_dir / name).read_text(encoding="utf-8").splitlines()[1:]
        except (FileNotFoundError, NotADirectoryError):
            continue
        stamps = []
        for line in lines:
            try:
                entry = json.loads(line)
                if int(entry.get("batchId", batch_id)) == batch_id:
                    stamps.append(int(entry["timestamp"]))
            except (ValueError, KeyError, TypeError):
                continue  # a line being written, or another format: not this batch's
        return min(stamps) / 1000.0 if stamps else None
    return None


def landed_records(directory: Path, counted: dict[str, int]) -> int:
    """Records in the files landed in `directory` (names Spark reads: not starting with `.` or `_`);
    `counted` caches each file's count, so each file is read once (files land whole, by rename)."""
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return sum(counted.values())
    for entry in entries:
        if entry.name in counted or entry.name.startswith((".", "_")) or not entry.is_file():
            continue
        with open(entry.path, "rb") as handle:
            counted[entry.name] = sum(1 for line in handle if line.strip())
    return sum(counted.values())


class FileProbe:
    """A script whose queries read one directory (the clickstream fixture): every query the agent
    lists. One probe per app run: it adds up each query's rows from the whole progress history (read
    once, then incrementally); thread-safe, so that the Recorder and a drain check can share it."""

    def __init__(self, cfg: Config, app: AppConfig, input_dir: Path):
        self.cfg, self.app, self.input_dir = cfg, app, Path(input_dir)
        self.landed: dict[str, int] = {}
        self.rows: dict[str, dict[int, int]] = {}  # query -> batch id -> rows read
        self.latency = LatencyTracker()
        self._read_to_s: float = 0.0  # the progress history is read from here (minus the overlap)
        self._lock = threading.Lock()

    def counts(self, client: redis.Redis) -> tuple[int, int, list[ProgressReport | None]]:
        """(records landed, rows the slowest query has read, each query's last report or None); the
        new batches' latencies go into `self.latency`."""
        with self._lock:
            prefix = self.cfg.redis.key_prefix
            queries = [q for q in read_queries(client, prefix, self.app.name).values() if q.status != "terminated"]
            arrived = landed_records(self.input_dir, self.landed)
            since, self._read_to_s = max(self._read_to_s - HISTORY_OVERLAP_S, 0.0), time.time()
            lasts: list[ProgressReport | None] = []
            latencies: list[float | None] = []
            for info in queries:
                reports = read_progress(client, prefix, self.app.name, info.name, since_s=since)
                rows = self.rows.setdefault(info.name, {})
                for r in reports:
                    rows[r.batch_id] = max(rows.get(r.batch_id, 0), r.num_input_rows)
                for r in self.latency.new(info.name, reports):
                    landed = [t for i, src in enumerate(r.sources) if src.kind == "file"
                              if (t := oldest_file_landed_s(info.checkpoint, i, r.batch_id)) is not None]
                    latencies.append(latency_ms(r, min(landed) if landed else None))
                lasts.append(_last_report(client, prefix, self.app.name, info.name))
            self.latency.update(latencies)
            processed = min((sum(self.rows[q.name].values()) for q in queries), default=0)
            return arrived, processed, lasts

    def drained(self, client: redis.Redis) -> bool:
        """Every query has read every landed file."""
        arrived, processed, lasts = self.counts(client)
        return bool(lasts) and processed >= arrived

    def look(self, client: redis.Redis, rest: SparkRestClient, t0: float) -> Sample:
        arrived, processed, lasts = self.counts(client)
        executors, cores = executors_of(rest, self.app.name)
        known = [r for r in lasts if r is not None]
        stated = None if not lasts or len(known) < len(lasts) else worst(
            (stated_backlog(r) for r in known), unknown_wins=True)
        return Sample(
            t_s=round(time.time() - t0, 3), arrived_records=arrived, processed_records=processed,
            batch_duration_ms=worst(r.batch_duration_ms for r in known), executors=executors, cores=cores,
            partitions=worst(r.state_partitions for r in known), stated_backlog_records=stated,
            latency_ms=self.latency.value_ms,
        )
