"""The oracles of `sparkscale bench scaling`: `oracle` sets the calibration's executor count for the
load to come, ahead of time; `oracle-spare` holds one executor more. They know the profile, which no
controller in production does, so their rows show what the targets ask of this machine: a backlog
the oracle cannot keep within the SLO at the calibrated count is out of reach of any controller
sized to that count, and the spare oracle's over-provisioning is what keeping it took with foresight.

Ahead by `ORACLE_LEAD_S`: the oracle holds, at each moment, the most executors the calibration
needs at any rate of the next `ORACLE_LEAD_S` seconds, so that an executor asked for before a rise
is running when the rise comes; it lets one go only once the higher rate has passed.
"""

from __future__ import annotations

import math
import subprocess
import threading
import time
from collections.abc import Callable, Sequence

import structlog

from sparkscale_lab.bench.environment import BenchEnv
from sparkscale_lab.pipelines.profiles import LoadProfile

log = structlog.get_logger(__name__)

# How long before a rise the oracle asks for its executors. The daemon's scale-ups on this machine
# took 7-15 s from the command to the new executor's first task (docs/results/bench_scaling_33_sine:
# 1 -> 3 asked at 15.8 s, running at 26-28 s); 15 s is the slow end, so the oracle is not late.
ORACLE_LEAD_S = 15.0


def oracle_schedule(profile: LoadProfile, needed: Callable[[float], int | None], max_executors: int,
                    lead_s: float = ORACLE_LEAD_S, step_s: float = 1.0, spare: int = 0) -> list[tuple[float, int]]:
    """(seconds after the start, executor count) at t = 0 and at each change: the most the calibration
    needs over [t, t + lead_s], at least 1, plus `spare`, at most `max_executors`; `max_executors`
    where a rate is above every calibrated one (the calibration's None)."""
    duration = profile.duration_s or 0.0
    steps = max(math.ceil(duration / step_s), 1)  # samples in [0, duration): the load's own seconds

    def need_at(t_s: float) -> int:
        n = needed(profile.rate_at(t_s))
        return max_executors if n is None else min(max(n, 1) + spare, max_executors)

    needs = [need_at(i * step_s) for i in range(steps)]
    ahead = max(round(lead_s / step_s), 0)
    out: list[tuple[float, int]] = []
    for i in range(steps):
        target = max(needs[i:i + ahead + 1])
        if not out or out[-1][1] != target:
            out.append((i * step_s, target))
    return out


class Oracle:
    """Carries out a schedule from `t0` on (wall-clock seconds, as the run's samples), in a thread,
    with `scale` (the benchmark's `sparkscale scale-executors`: RuntimeError or TimeoutExpired when
    it fails)."""

    def __init__(self, env: BenchEnv, schedule: Sequence[tuple[float, int]], t0: float,
                 scale: Callable[[BenchEnv, int], None]):
        self._env, self._schedule, self._t0, self._scale = env, list(schedule), t0, scale
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-oracle", daemon=True)
        self.failures: list[str] = []

    def start(self) -> Oracle:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=330)  # one scale-executors call at most (its own timeout: 300 s)

    def _run(self) -> None:
        for at_s, to in self._schedule:
            # The schedule is the condition: each step is due at its time, or the run has ended.
            if self._stopped.wait(max(self._t0 + at_s - time.time(), 0.0)):
                return
            sent_s = time.time() - self._t0
            try:
                self._scale(self._env, to)  # returns once Spark has the executors (or has let them go)
                log.info("bench.oracle_scaled", at_s=at_s, to=to, sent_s=round(sent_s, 1),
                         done_s=round(time.time() - self._t0, 1))
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                self.failures.append(f"oracle: scaling to {to} at {at_s:g} s failed: {exc}")
