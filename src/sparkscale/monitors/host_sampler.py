"""The daemon host's figures read off the cycle: a background thread samples psutil every
`period_s` and a cycle takes its latest reading, with the reading's age, so a host sample never
blocks a cycle (issue 33: with 10 apps, each cycle's own sample was time the cycle waited).

Each reading is `host.sample_host()`: CPU as the change since the sampler's previous reading (so
over about `period_s`, `sample_s` says exactly), memory as it was then. A sampler stuck in a call
leaves its last reading in place; it only grows older (`age_s`). The daemon starts the process's
`HOST` sampler (daemon/service.py); a process that never started it (a one-shot command) takes a
reading itself (`monitors/collector.py`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog
from pydantic import JsonValue

from sparkscale.monitors.host import HostFigures, sample_host

log = structlog.get_logger(__name__)

PERIOD_S = 1.0  # how often the sampler reads the host; a reading covers about this long
FIRST_READING_WAIT_S = 1.0  # how long `start` waits for the first reading (not a cycle's wait)


@dataclass(frozen=True)
class HostReading:
    figures: HostFigures
    read_at_s: float  # time.monotonic() when it was read

    def extension(self, now_s: float) -> dict[str, JsonValue]:
        """`extensions["host"]`: the figures and how old they are at `now_s` (monotonic)."""
        return {**self.figures.host_extension(), "age_s": round(max(now_s - self.read_at_s, 0.0), 3)}


class HostSampler:
    """One background thread reading the host every `period_s`; `latest` never waits for it."""

    def __init__(self, read: Callable[[], HostFigures] = sample_host, period_s: float = PERIOD_S,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._read = read
        self.period_s = period_s
        self._monotonic = monotonic
        self._lock = threading.Lock()  # held for an assignment only, never across a reading
        self._latest: HostReading | None = None
        self._stop = threading.Event()
        self._first = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and not self._stop.is_set()

    def start(self, first_reading_wait_s: float = FIRST_READING_WAIT_S) -> None:
        """Start sampling (again after `stop`); waits up to `first_reading_wait_s` for a first
        reading, so that the first cycles have one. Starting a running sampler does nothing."""
        if self.running:
            return
        self._stop = threading.Event()  # its own: a stopped thread still in a reading ends after it
        self._first.clear()
        self._thread = threading.Thread(target=self._run, args=(self._stop,), name="sparkscale-host-sampler",
                                        daemon=True)
        self._thread.start()
        self._first.wait(first_reading_wait_s)

    def stop(self) -> None:
        """Ask the thread to end (it does after its current reading, if one is under way)."""
        self._stop.set()

    def latest(self) -> HostReading | None:
        """The newest reading; None before the first."""
        with self._lock:
            return self._latest

    def extension(self) -> dict[str, Any] | None:
        """`extensions["host"]` from the newest reading, with its age; None before the first."""
        reading = self.latest()
        return None if reading is None else reading.extension(self._monotonic())

    def _run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                figures = self._read()
            except Exception as exc:  # a reading that fails leaves the last one (older) in place
                log.warning("host.sample_failed", error=repr(exc))
            else:
                reading = HostReading(figures, self._monotonic())
                with self._lock:
                    self._latest = reading
                self._first.set()
            stop.wait(self.period_s)


HOST = HostSampler()  # the process's: the daemon starts it, every app's cycle reads it
