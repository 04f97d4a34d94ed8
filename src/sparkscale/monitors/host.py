"""Host and executor-process figures from psutil, for the threshold rules and people reading snapshots.

CPU is a rate, so it is sampled: CPU times are read, `sample_s` passes, they are read again. An
executor's CPU includes its descendants (the Python workers that run PySpark UDFs and data sources
are children of the executor JVM's pyspark daemon). Only executors on this host are seen; on a
multi-host cluster the figures cover the local ones and say how many that were.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

import psutil
import structlog

log = structlog.get_logger(__name__)

EXECUTOR_MAIN = "CoarseGrainedExecutorBackend"


@dataclass(frozen=True)
class ExecutorProcess:
    """One executor JVM of the app on this host, over the sample."""

    pid: int
    executor_id: str | None
    cpu_fraction: float  # CPU-seconds per second of the JVM and its descendants (1.0 = one core busy)
    rss_bytes: int  # JVM and descendants


@dataclass(frozen=True)
class HostFigures:
    cpu_fraction: float  # host CPU busy, over all cores, in [0, 1]
    memory_fraction: float  # host memory in use, in [0, 1]
    cpus: int
    executors: tuple[ExecutorProcess, ...]
    sample_s: float

    def host_extension(self) -> dict[str, float | int]:
        """`extensions["host"]` of a snapshot."""
        return {"cpu_fraction": round(self.cpu_fraction, 4), "memory_fraction": round(self.memory_fraction, 4),
                "cpus": self.cpus, "sample_s": self.sample_s}

    def app_extension(self, app_cores: int) -> dict[str, object]:
        """`extensions["app"]`: the app's executors on this host; cpu_fraction is over the app's cores."""
        busy = sum(e.cpu_fraction for e in self.executors)
        return {
            "cpu_fraction": round(min(busy / app_cores, 1.0), 4) if app_cores > 0 and self.executors else None,
            "cpu_cores_busy": round(busy, 4),
            "rss_bytes": sum(e.rss_bytes for e in self.executors),
            "local_executors": [{"pid": e.pid, "executor": e.executor_id, "cpu_fraction": round(e.cpu_fraction, 4),
                                 "rss_bytes": e.rss_bytes} for e in self.executors],
        }


def executor_processes(app_id: str) -> list[psutil.Process]:
    """The executor JVMs of `app_id` on this host (cmdline names the backend class and the app id)."""
    found: list[psutil.Process] = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info.get("cmdline") or []
        if EXECUTOR_MAIN in " ".join(cmdline) and app_id in cmdline:
            found.append(proc)
    return found


def _executor_id(proc: psutil.Process) -> str | None:
    try:
        cmdline = proc.cmdline()
    except psutil.Error:
        return None
    if "--executor-id" in cmdline:
        i = cmdline.index("--executor-id")
        return cmdline[i + 1] if i + 1 < len(cmdline) else None
    return None


def _tree(proc: psutil.Process) -> list[psutil.Process]:
    try:
        return [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return [proc]


def _cpu_s(procs: Iterable[psutil.Process]) -> dict[int, float]:
    out: dict[int, float] = {}
    for p in procs:
        try:
            t = p.cpu_times()
            out[p.pid] = t.user + t.system
        except psutil.Error:
            continue
    return out


def _rss(procs: Iterable[psutil.Process]) -> int:
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            continue
    return total


def _idle_s(times: object) -> float:
    """Idle time, with I/O wait counted as idle (a core waiting on disk could run a task)."""
    return float(getattr(times, "idle", 0.0)) + float(getattr(times, "iowait", 0.0))


def sample_host(app_id: str | None, sample_s: float = 0.5) -> HostFigures:
    """Host CPU and memory, and the app's local executors, over one `sample_s` sample."""
    executors = executor_processes(app_id) if app_id else []
    trees = {e.pid: _tree(e) for e in executors}
    before = {pid: _cpu_s(tree) for pid, tree in trees.items()}
    host_before = psutil.cpu_times()
    started = time.monotonic()
    time.sleep(sample_s)
    elapsed = max(time.monotonic() - started, 1e-6)
    host_after = psutil.cpu_times()
    procs: list[ExecutorProcess] = []
    for proc in executors:
        tree = trees[proc.pid]
        after = _cpu_s(tree)
        # Processes that died during the sample are left out; new ones are not counted (start unknown).
        used = sum(after[pid] - before[proc.pid][pid] for pid in after if pid in before[proc.pid])
        procs.append(ExecutorProcess(proc.pid, _executor_id(proc), max(used, 0.0) / elapsed, _rss(tree)))
    idle = _idle_s(host_after) - _idle_s(host_before)
    total = sum(host_after) - sum(host_before)
    cpu_fraction = min(max(1.0 - idle / total, 0.0), 1.0) if total > 0 else 0.0
    memory = psutil.virtual_memory()
    figures = HostFigures(
        cpu_fraction=cpu_fraction, memory_fraction=(memory.total - memory.available) / memory.total,
        cpus=psutil.cpu_count() or 1, executors=tuple(procs), sample_s=round(elapsed, 3),
    )
    log.debug("host.sampled", cpu_fraction=round(cpu_fraction, 3), local_executors=len(procs))
    return figures
