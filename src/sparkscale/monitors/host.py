"""Figures of the daemon's own host from psutil: `extensions["host"]` of a snapshot.

psutil sees only the machine it runs on, and the app's executors may run on any host, so the
executors' CPU and memory come from Spark's metrics instead (`executor_figures.py`); these figures
name the host they describe. CPU is a rate: by default it is the change of the host's CPU times
since the previous call in this process (no wait: the daemon's cycle spent 0.5 s of its 0.72 s
in a blocking sample); a positive `sample_s` still waits that long between two readings.
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import psutil
import structlog

if TYPE_CHECKING:
    from psutil._ntuples import scputimes

log = structlog.get_logger(__name__)

EXECUTOR_MAIN = "CoarseGrainedExecutorBackend"


@dataclass(frozen=True)
class HostFigures:
    cpu_fraction: float  # host CPU busy, over all cores, in [0, 1]
    memory_fraction: float  # host memory in use, in [0, 1]
    cpus: int
    sample_s: float
    hostname: str = ""

    def host_extension(self) -> dict[str, float | int | str]:
        """`extensions["host"]` of a snapshot."""
        return {"hostname": self.hostname, "scope": "daemon host", "cpu_fraction": round(self.cpu_fraction, 4),
                "memory_fraction": round(self.memory_fraction, 4), "cpus": self.cpus, "sample_s": self.sample_s}


def executor_processes(app_id: str) -> list[psutil.Process]:
    """The executor JVMs of `app_id` on this host (cmdline names the backend class and the app id),
    for people and tests that check the monitor against the processes; the monitor does not use it."""
    found: list[psutil.Process] = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info.get("cmdline") or []
        if EXECUTOR_MAIN in " ".join(cmdline) and app_id in cmdline:
            found.append(proc)
    return found


def _idle_s(times: object) -> float:
    """Idle time, with I/O wait counted as idle (a core waiting on disk could run a task)."""
    return float(getattr(times, "idle", 0.0)) + float(getattr(times, "iowait", 0.0))


class _CpuDelta:
    """The host's CPU times at the previous reading (process-wide: every app's cycle reads the same
    host), so that each reading covers the time since the one before."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: tuple[scputimes, float] | None = None

    def read(self) -> tuple[scputimes, scputimes, float]:
        """(times before, times now, seconds between); the first reading covers the time since boot."""
        now_times, now = psutil.cpu_times(), time.monotonic()
        with self._lock:
            last = self._last
            self._last = (now_times, now)
        if last is None:
            zero = type(now_times)(*([0.0] * len(now_times)))
            return zero, now_times, max(time.time() - psutil.boot_time(), 1e-6)
        return last[0], now_times, max(now - last[1], 1e-6)


_DELTA = _CpuDelta()


def sample_host(sample_s: float = 0.0) -> HostFigures:
    """This host's CPU and memory: CPU over the time since the previous call (`sample_s` = 0), or
    over a blocking sample of `sample_s` seconds."""
    if sample_s > 0:
        before = psutil.cpu_times()
        started = time.monotonic()
        time.sleep(sample_s)
        elapsed = max(time.monotonic() - started, 1e-6)
        after = psutil.cpu_times()
    else:
        before, after, elapsed = _DELTA.read()
    idle = _idle_s(after) - _idle_s(before)
    total = sum(after) - sum(before)
    cpu_fraction = min(max(1.0 - idle / total, 0.0), 1.0) if total > 0 else 0.0
    memory = psutil.virtual_memory()
    figures = HostFigures(
        cpu_fraction=cpu_fraction, memory_fraction=(memory.total - memory.available) / memory.total,
        cpus=psutil.cpu_count() or 1, sample_s=round(elapsed, 3), hostname=socket.gethostname(),
    )
    log.debug("host.sampled", hostname=figures.hostname, cpu_fraction=round(cpu_fraction, 3))
    return figures
