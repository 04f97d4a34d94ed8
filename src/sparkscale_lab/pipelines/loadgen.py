"""The load generator: writes an app's input records to Redis streams, following a load profile.

Every ~20 ms tick it sends the difference between the records the profile says should have been
sent by now (the integral of the rate) and what it has sent, with pipelined XADD. Counting against
the integral, not per tick, keeps the achieved rate on target and lets it catch up after a slow
tick. Each run has a unique id, recorded in `{prefix}{app}:loadgen:runs`, so a verifier knows which
uids (`<run_id>-<seq>`, seq 0..records_sent-1) the run produced, even when several runs share the
streams.
"""

from __future__ import annotations

import json
import math
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import redis
import structlog

from sparkscale.config import AppConfig, Config
from sparkscale.config.identities import OPERATOR
from sparkscale.protocol.keys import input_stream_key, loadgen_runs_key
from sparkscale.redisconn import connect_as
from sparkscale_lab.pipelines.profiles import LoadProfile, parse_profile
from sparkscale_lab.pipelines.records import RecordSource, record_source

log = structlog.get_logger(__name__)

TICK_S = 0.02
MAX_BATCH = 2000  # records per pipelined round trip: bounds how long one send blocks the clock
BEHIND_RATIO = 0.9  # achieved below this fraction of the target ...
BEHIND_AFTER_S = 2  # ... for this many whole seconds in a row: log loadgen.behind

StopReason = Literal["profile_end", "max_duration", "stop_event"]




@dataclass(frozen=True)
class SecondReport:
    """One second of a run (the last one may be shorter: `interval_s`)."""

    second: int  # 1-based: covers [second - 1, second - 1 + interval_s) after the start
    interval_s: float
    target_rate_per_s: float  # mean of the profile over the interval
    achieved_rate_per_s: float
    sent_in_interval: int
    sent_total: int
    behind_records: int  # records due by the interval's end and not yet sent


@dataclass
class LoadSummary:
    run_id: str
    app: str
    profile: str
    seed: int
    partitions: int
    records_sent: int
    target_records: int  # what the profile asked for, over the time the run lasted
    duration_s: float
    started_at_ms: int
    ended_at_ms: int
    stopped_by: StopReason
    reports: list[SecondReport] = field(default_factory=list)

    def records_per_partition(self) -> list[int]:
        """Round-robin: record seq goes to partition seq % partitions."""
        base, extra = divmod(self.records_sent, self.partitions)
        return [base + (1 if p < extra else 0) for p in range(self.partitions)]

    def to_json(self, include_reports: bool = False) -> str:
        data: dict[str, Any] = asdict(self)
        if not include_reports:
            data.pop("reports")
        data["status"] = "finished"
        data["uid_format"] = "<run_id>-<seq>"
        data["records_per_partition"] = self.records_per_partition()
        return json.dumps(data)


class LoadGenerator:
    """Sends one app's records at a profile's rate. One `run()` at a time per instance."""

    def __init__(
        self,
        client: redis.Redis,
        key_prefix: str,
        app: AppConfig,
        profile: LoadProfile,
        records: RecordSource,
        *,
        seed: int = 0,
        tick_s: float = TICK_S,
        max_batch: int = MAX_BATCH,
    ):
        self._client = client
        self._app = app
        self._profile = profile
        self._records = records
        self._seed = seed
        self._tick_s = tick_s
        self._max_batch = max_batch
        self._keys = [input_stream_key(key_prefix, app.name, i) for i in range(app.source_partitions)]
        self._runs_key = loadgen_runs_key(key_prefix, app.name)

    def run(
        self,
        max_duration_s: float | None = None,
        stop: threading.Event | None = None,
        on_second: Callable[[SecondReport], None] | None = None,
    ) -> LoadSummary:
        """Send until the profile ends, `max_duration_s` passes or `stop` is set."""
        if max_duration_s is not None and max_duration_s <= 0:
            raise ValueError(f"max_duration_s must be positive (got {max_duration_s})")
        end_s, end_reason = self._end(max_duration_s)
        if end_s is None and stop is None:
            log.warning("loadgen.unbounded", profile=self._profile.spec, hint="runs until interrupted")
        run = _Run(self._claim_run_id(), time.time_ns() // 1_000_000, time.monotonic())
        log.info(
            "loadgen.start", run_id=run.run_id, app=self._app.name, profile=self._profile.spec,
            partitions=len(self._keys), end_s=end_s,
        )
        self._record(run, {"status": "running"})
        status = "failed"
        stopped_by: StopReason = end_reason
        try:
            while True:
                if stop is not None and stop.is_set():
                    stopped_by = "stop_event"
                    break
                elapsed_s = time.monotonic() - run.t0
                while elapsed_s >= run.next_second and (end_s is None or run.next_second <= end_s):
                    self._close_interval(run, float(run.next_second), 1.0, on_second, top_up=True)
                if end_s is not None and elapsed_s >= end_s:
                    break
                deficit = self._due(elapsed_s) - run.sent
                if deficit > 0:
                    self._send(run, min(deficit, self._max_batch))
                    continue  # still behind: no sleep
                wait_s = min(self._tick_s, run.next_second - elapsed_s)
                if end_s is not None:
                    wait_s = min(wait_s, end_s - elapsed_s)
                if stop is not None:
                    stop.wait(max(wait_s, 0.0))
                else:
                    time.sleep(max(wait_s, 0.0))
            # The unfinished last second: up to the end, or to the moment of the stop.
            last_s = end_s if stopped_by != "stop_event" else time.monotonic() - run.t0
            assert last_s is not None
            started_s = float(run.next_second - 1)
            if last_s > started_s + 1e-3:
                self._close_interval(run, last_s, last_s - started_s, on_second, top_up=stopped_by != "stop_event")
            status = "finished"
        except KeyboardInterrupt:
            status = "interrupted"
            raise
        finally:
            ended_at_ms = time.time_ns() // 1_000_000
            summary = LoadSummary(
                run_id=run.run_id, app=self._app.name, profile=self._profile.spec, seed=self._seed,
                partitions=len(self._keys), records_sent=run.sent,
                target_records=self._due(min(time.monotonic() - run.t0, math.inf if end_s is None else end_s)),
                duration_s=round(time.monotonic() - run.t0, 3), started_at_ms=run.started_at_ms,
                ended_at_ms=ended_at_ms, stopped_by=stopped_by, reports=run.reports,
            )
            self._record(run, {"status": status}, summary)
        log.info(
            "loadgen.end", run_id=run.run_id, records_sent=summary.records_sent,
            target_records=summary.target_records, duration_s=summary.duration_s, stopped_by=stopped_by,
        )
        return summary

    # -----------------------------------------------------------------------------------------

    def _end(self, max_duration_s: float | None) -> tuple[float | None, StopReason]:
        profile_end = self._profile.duration_s
        if max_duration_s is not None and (profile_end is None or max_duration_s < profile_end):
            return max_duration_s, "max_duration"
        return profile_end, "profile_end"

    def _due(self, elapsed_s: float) -> int:
        # The epsilon keeps exact products (2000 * 3.0) from flooring one short.
        return math.floor(self._profile.records_by(elapsed_s) + 1e-6)

    def _close_interval(
        self,
        run: _Run,
        until_s: float,
        interval_s: float,
        on_second: Callable[[SecondReport], None] | None,
        top_up: bool,
    ) -> None:
        """Report the interval ending at `until_s`; when only a little is missing, send it first."""
        deficit = self._due(until_s) - run.sent
        if top_up and 0 < deficit <= self._max_batch:
            self._send(run, deficit)  # a tick's worth, due before the boundary: account it there
        sent_in_interval = run.sent - run.sent_at_last_report
        target = (self._profile.records_by(until_s) - self._profile.records_by(until_s - interval_s)) / interval_s
        report = SecondReport(
            second=run.next_second,
            interval_s=round(interval_s, 3),
            target_rate_per_s=round(target, 1),
            achieved_rate_per_s=round(sent_in_interval / interval_s, 1),
            sent_in_interval=sent_in_interval,
            sent_total=run.sent,
            behind_records=max(0, self._due(until_s) - run.sent),
        )
        run.reports.append(report)
        run.sent_at_last_report = run.sent
        run.next_second += 1
        log.info(
            "loadgen.second", run_id=run.run_id, second=report.second, target_rate=report.target_rate_per_s,
            achieved_rate=report.achieved_rate_per_s, sent_total=report.sent_total,
        )
        if interval_s >= 1.0 and report.achieved_rate_per_s < BEHIND_RATIO * report.target_rate_per_s:
            run.behind_streak_s += 1
        else:
            run.behind_streak_s = 0
        if run.behind_streak_s >= BEHIND_AFTER_S:
            log.warning(
                "loadgen.behind", run_id=run.run_id, seconds=run.behind_streak_s,
                target_rate=report.target_rate_per_s, achieved_rate=report.achieved_rate_per_s,
                behind_records=report.behind_records,
            )
        self._record(run, {"status": "running", "records_sent": run.sent, "seconds": report.second})
        if on_second is not None:
            on_second(report)

    def _send(self, run: _Run, count: int) -> None:
        pipe = self._client.pipeline(transaction=False)
        ts = str(time.time_ns() // 1_000_000)
        keys, partitions, prefix = self._keys, len(self._keys), run.run_id
        next_record = self._records.next_record
        for seq in range(run.sent, run.sent + count):
            fields = {"uid": f"{prefix}-{seq}", "ts": ts}
            fields.update(next_record())
            pipe.xadd(keys[seq % partitions], fields)  # type: ignore[arg-type]
        pipe.execute()
        run.sent += count

    def _claim_run_id(self) -> str:
        """A fresh id, claimed with HSETNX so two generators can never share one."""
        while True:
            run_id = f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}_{secrets.token_hex(4)}"
            claim = json.dumps({"run_id": run_id, "status": "starting"})
            if self._client.hsetnx(self._runs_key, run_id, claim):
                return run_id

    def _record(self, run: _Run, fields: dict[str, Any], summary: LoadSummary | None = None) -> None:
        if summary is not None:
            data = json.loads(summary.to_json())
        else:
            data = {
                "run_id": run.run_id, "app": self._app.name, "profile": self._profile.spec,
                "seed": self._seed, "partitions": len(self._keys), "started_at_ms": run.started_at_ms,
                "records_sent": run.sent, "uid_format": "<run_id>-<seq>",
            }
        data.update(fields)
        try:
            self._client.hset(self._runs_key, run.run_id, json.dumps(data))
        except redis.RedisError as exc:
            if summary is None:
                raise
            # The final record after a failure: keep the original error, not this one.
            log.error("loadgen.record_failed", run_id=run.run_id, error=str(exc))


@dataclass
class _Run:
    run_id: str
    started_at_ms: int
    t0: float
    sent: int = 0
    next_second: int = 1
    sent_at_last_report: int = 0
    behind_streak_s: int = 0
    reports: list[SecondReport] = field(default_factory=list)


def run_loadgen(
    cfg: Config,
    app_name: str,
    profile_spec: str,
    seed: int = 0,
    max_duration_s: float | None = None,
    stop: threading.Event | None = None,
    on_second: Callable[[SecondReport], None] | None = None,
) -> LoadSummary:
    """Entry point for the CLI: generate `app_name`'s workload into Redis following `profile_spec`.

    Raises ValueError for a bad profile spec, KeyError for an unknown app.
    """
    profile = parse_profile(profile_spec)
    app = cfg.app(app_name)
    client = connect_as(cfg, OPERATOR, decode_responses=False)
    try:
        generator = LoadGenerator(client, cfg.redis.key_prefix, app, profile, record_source(app, seed), seed=seed)
        return generator.run(max_duration_s=max_duration_s, stop=stop, on_second=on_second)
    finally:
        client.close()
