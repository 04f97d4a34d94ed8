"""Processes sparkscale starts in the background and must later find again, and only them.

A process is recorded by pid and start time: a pid alone may have been recycled by the time we
look again, and stopping a stranger's process is the one thing `down`/`stop` must never do.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import psutil

STOP_GRACE_S = 20.0


def live_process(pid: int, create_time: float) -> psutil.Process | None:
    """The process `pid` if it still runs and is the one started at `create_time`."""
    try:
        proc = psutil.Process(pid)
        if abs(proc.create_time() - create_time) > 1.0 or proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return proc
    except psutil.Error:
        return None


def stop_trees(procs: list[psutil.Process], grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM the processes and what they started (a worker's executors, a driver's Python);
    SIGKILL whatever outlives the grace period."""
    family: list[psutil.Process] = []
    for proc in procs:
        try:
            family += [proc, *proc.children(recursive=True)]
        except psutil.Error:
            family.append(proc)
    for p in family:
        with contextlib.suppress(psutil.Error):
            p.terminate()
    _, alive = psutil.wait_procs(family, timeout=grace_s)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(alive, timeout=5)


def tail(path: Path, lines: int = 20) -> str:
    """The last lines of a log file, for error messages."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
