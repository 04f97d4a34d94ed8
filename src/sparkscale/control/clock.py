"""The loop's clock: wall time for what is recorded, monotonic time for durations and back-off,
and the thread's CPU time for what the daemon's own work cost (the `cycle` event's `cpu_s`).
Injected, so a test decides what time it is."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (durations, back-off)."""
        ...

    def thread_cpu(self) -> float:
        """CPU seconds the calling thread has used."""
        ...


class SystemClock:
    """The process's clocks."""

    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def thread_cpu(self) -> float:
        return time.thread_time()
