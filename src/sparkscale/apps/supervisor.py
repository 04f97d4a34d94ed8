"""A managed driver under supervision: restarted from its checkpoints when it crashes.

Why. A driver the daemon started must outlive the daemon (restarting the daemon must not take the
pipelines down) and come back after a crash. So every driver runs under `sparkscale pipeline run
APP`, this loop: it starts the driver (spark-submit of agent/bootstrap.py), waits, and restarts a
driver that crashed after its queries had started (their checkpoints carry the state and the input
positions, so the restarted queries go on where the last commit left them), with back-off. A driver
whose first start fails before its queries run is a bad script or config: restarting it would only
repeat the failure, so the supervisor exits with its code and `pipeline submit` shows the log. After
a crash, a failed relaunch (Redis or the master briefly away) is retried within the same budget.

Where it runs (`drivers.supervisor`): under systemd as its own unit (systemd/sparkscale-app@.service,
Restart=on-failure restarts the supervisor itself), or, in the embedded environment and on hosts
without systemd, as a process in a session of its own that `pipeline submit` starts.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import asdict

import psutil
import structlog

from sparkscale.apps.driver_record import DriverRecord
from sparkscale.apps.run_files import driver_record_path, started_marker
from sparkscale.apps.submit import launch_driver
from sparkscale.config import Config, DriversConfig
from sparkscale.processes import stop_trees

log = structlog.get_logger(__name__)

POLL_S = 0.5


class RestartBudget:
    """When to restart a crashed driver: back-off doubling from `restart_delay_s` up to
    `max_restart_delay_s`, and no more than `max_restarts` crashes within `restart_window_s`."""

    def __init__(self, cfg: DriversConfig):
        self._cfg = cfg
        self._crashes: deque[float] = deque()

    def next_delay_s(self, now: float) -> float | None:
        """The wait before restarting after a crash at `now`; None: give up."""
        window = self._cfg.restart_window_s
        while self._crashes and now - self._crashes[0] > window:
            self._crashes.popleft()
        if len(self._crashes) >= self._cfg.max_restarts:
            return None
        delay: float = min(self._cfg.restart_delay_s * 2 ** len(self._crashes), self._cfg.max_restart_delay_s)
        self._crashes.append(now)
        return delay


def run_supervised(cfg: Config, app_name: str, config_path: str | None, overrides: list[str],
                   stop: threading.Event) -> int:
    """Run the app's driver until it ends or `stop` is set; restart it after a crash. Returns the
    exit status for the supervisor: 0 when the driver ended normally or was stopped, else its code."""
    budget = RestartBudget(cfg.drivers)
    restarts = 0
    while True:
        marker = started_marker(cfg, app_name)
        marker.unlink(missing_ok=True)
        try:
            proc = launch_driver(cfg, app_name, config_path, overrides)
        except Exception as exc:  # Redis down (the stored shape), Java missing, ...
            if restarts == 0:
                raise  # the first start: `pipeline submit` reports it
            code, reason = 1, f"the driver could not be launched: {exc!r}"
        else:
            record = DriverRecord(app_name, proc.pid, psutil.Process(proc.pid).create_time(), time.time(), restarts)
            driver_record_path(cfg, app_name).write_text(json.dumps(asdict(record)))
            log.info("supervisor.driver_started", app=app_name, pid=proc.pid, restarts=restarts)
            # Whether the queries started is watched while the driver runs: a driver whose JVM was
            # killed removes its marker on the way out, before its exit can be seen here.
            started = False
            while proc.poll() is None and not stop.is_set():
                started = started or marker.exists()
                stop.wait(POLL_S)
            started = started or marker.exists()
            if stop.is_set():
                if proc.poll() is None:
                    stop_trees([psutil.Process(proc.pid)])
                log.info("supervisor.stopped", app=app_name, pid=proc.pid)
                return 0
            code = proc.returncode
            if code == 0:
                log.info("supervisor.driver_ended", app=app_name, pid=proc.pid)
                return 0
            reason = f"exit code {code}"
            if not started and restarts == 0:
                # Its first start failed before its queries ran: a bad script or config, which a
                # restart repeats. (After a crash, a failed restart may be passing: Redis down.)
                log.error("supervisor.driver_failed_to_start", app=app_name, pid=proc.pid, exit_code=code)
                return code if code > 0 else 1
        delay_s = budget.next_delay_s(time.time())
        if delay_s is None:
            log.error("supervisor.giving_up", app=app_name, reason=reason, crashes=cfg.drivers.max_restarts,
                      within_s=cfg.drivers.restart_window_s)
            return code if code > 0 else 1
        restarts += 1
        log.warning("supervisor.driver_crashed", app=app_name, reason=reason, restart_in_s=delay_s,
                    restarts=restarts, action="restart from the checkpoints")
        if stop.wait(delay_s):
            return 0
