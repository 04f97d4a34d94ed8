"""The daemon's lifecycle: one APScheduler job per managed application, signals, back-off.

For now a cycle observes each application through the Spark master (running or absent, cores
held) and logs it; the snapshot -> policy -> plan -> actuator stages plug into `cycle`.
"""

from __future__ import annotations

import signal
import threading
import time
from dataclasses import dataclass

import structlog
from apscheduler.schedulers.background import BackgroundScheduler

from sparkscale.config import AppConfig, Config
from sparkscale.monitors.spark_master import SparkMasterClient, SparkUnreachable

log = structlog.get_logger(__name__)

MAX_BACKOFF_CYCLES = 6  # while the master is unreachable, skip up to 2^6 - 1 intervals between tries


@dataclass
class _AppState:
    cycles: int = 0
    failures: int = 0
    skip_until: float = 0.0


class Daemon:
    def __init__(self, cfg: Config, max_cycles: int | None = None):
        self.cfg = cfg
        self.master = SparkMasterClient(cfg.spark.master_web_url, cfg.spark.rest_timeout_s)
        self.max_cycles = max_cycles
        self._stop = threading.Event()
        self._state = {app.name: _AppState() for app in cfg.apps}
        self.scheduler = BackgroundScheduler(
            # A slow cycle never piles up: one run per app at a time, missed runs coalesce into one.
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None},
        )

    def run(self) -> int:
        """Run until SIGTERM/SIGINT (or `max_cycles` cycles per app); returns the exit code."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda signum, _frame: self.stop(f"signal {signal.Signals(signum).name}"))
        log.info(
            "daemon.start", apps=[a.name for a in self.cfg.apps], interval_s=self.cfg.loop.interval_s,
            policy=self.cfg.policy.name, dry_run=self.cfg.loop.dry_run, master=self.cfg.spark.master_web_url,
        )
        for app in self.cfg.apps:
            self.scheduler.add_job(
                self.cycle, "interval", args=[app], seconds=self.cfg.loop.interval_s,
                id=f"cycle:{app.name}", next_run_time=_now(),
            )
        self.scheduler.start()
        self._stop.wait()
        self.scheduler.shutdown(wait=True)
        log.info("daemon.stop")
        return 0

    def stop(self, reason: str) -> None:
        if not self._stop.is_set():
            log.info("daemon.stopping", reason=reason)
            self._stop.set()

    def cycle(self, app: AppConfig) -> None:
        state = self._state[app.name]
        if time.monotonic() < state.skip_until:
            return
        started = time.monotonic()
        try:
            view = self.master.view()
        except SparkUnreachable as exc:
            state.failures += 1
            backoff_s = self.cfg.loop.interval_s * (2 ** min(state.failures, MAX_BACKOFF_CYCLES) - 1)
            state.skip_until = time.monotonic() + backoff_s
            log.warning("cycle.spark_unreachable", app=app.name, error=str(exc), retry_in_s=backoff_s, action="none")
        else:
            state.failures = 0
            running = view.app_named(app.name)
            log.info(
                "cycle",
                app=app.name,
                state="running" if running else "absent",
                app_id=running.app_id if running else None,
                cores=running.cores if running else 0,
                alive_workers=view.alive_workers,
                action="none",
                duration_s=round(time.monotonic() - started, 4),
            )
        state.cycles += 1
        if self.max_cycles is not None and all(s.cycles >= self.max_cycles for s in self._state.values()):
            self.stop(f"{self.max_cycles} cycles done")


def _now():
    from datetime import datetime, timezone

    return datetime.now(timezone.utc)
