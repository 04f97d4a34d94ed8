"""What a long wait of the CLI is waiting for, and for how long so far, on stderr (issue 34): a line
every few seconds, or one line redrawn with a spinner on a terminal. Used around `pipeline submit`
(the driver), `migrate` (each phase) and `cluster up` (the services), so no wait is silent.

Why a thread beside the call rather than callbacks from it: the waits are deep in the client and
localenv (a znode, a REST API, a port); the CLI only knows what it asked for and can say so.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import TextIO

import click

LINE_EVERY_S = 5.0  # not on a terminal: one line this often (the first after as long: a quick call says nothing)
SPIN_EVERY_S = 0.2  # on a terminal: the spinner's step
SPINNER = "|/-\\"
CLEAR = "\r\x1b[K"  # back to the start of the line, erase it


class Waiting:
    """`with Waiting("the driver of wordcount to run its queries"):` around a blocking call; `what`
    may change meanwhile (`waiting_for`), and `echo` prints a line of the command's own output
    without tearing the spinner's line."""

    def __init__(self, what: str, stream: TextIO | None = None, tty: bool | None = None,
                 every_s: float | None = None, clock: Callable[[], float] = time.monotonic):
        self.what = what
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.every_s = every_s if every_s is not None else (SPIN_EVERY_S if self.tty else LINE_EVERY_S)
        self.clock = clock
        self.started = clock()
        self._ticks = 0
        self._drawn = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Waiting:
        self.started = self.clock()
        self._thread = threading.Thread(target=self._run, name="sparkscale-waiting", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            self._erase()

    def waiting_for(self, what: str) -> None:
        """What the call waits for now (the next phase, the next service)."""
        with self._lock:
            self.what = what

    def echo(self, line: str) -> None:
        """A line of the command's output (stdout), printed clear of the spinner's line."""
        with self._lock:
            self._erase()
            click.echo(line)

    def tick(self) -> None:
        """One report: a line (`waiting for X: 12 s`), or on a terminal the spinner's line redrawn."""
        with self._lock:
            elapsed_s = self.clock() - self.started
            if self.tty:
                spin = SPINNER[self._ticks % len(SPINNER)]
                # The cursor goes back to the line's start: a log line printed meanwhile (cluster up's
                # services) writes over the spinner rather than after it.
                self.stream.write(f"{CLEAR}{spin} waiting for {self.what} ({elapsed_s:.0f} s)\r")
                self._drawn = True
            else:
                self.stream.write(f"waiting for {self.what}: {elapsed_s:.0f} s\n")
            self._ticks += 1
            self.stream.flush()

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self.tick()

    def _erase(self) -> None:
        if self._drawn:
            self.stream.write(CLEAR)
            self.stream.flush()
            self._drawn = False
