"""Observers of a migration runner's walk through its phases: one is told before a phase's step
runs (it may fail the step by raising MigrationError) and after the step ran, before the journal
records it.

The product installs none. A test harness installs one to fail or hold a step at an exact point
(the lab's `sparkscale_lab.bench.migration_faults`), so fault injection needs no code of its own in
the runner.
"""

from __future__ import annotations

import threading
from typing import Protocol


class PhaseHooks(Protocol):
    def before_step(self, phase: str) -> None: ...

    def after_step(self, phase: str) -> None: ...


_installed: list[PhaseHooks] = []
_lock = threading.Lock()


def install(hooks: PhaseHooks) -> None:
    """Add `hooks` (once) for every runner in this process."""
    with _lock:
        if not any(h is hooks for h in _installed):
            _installed.append(hooks)


def uninstall(hooks: PhaseHooks) -> None:
    with _lock:
        _installed[:] = [h for h in _installed if h is not hooks]


def before_step(phase: str) -> None:
    for hooks in tuple(_installed):
        hooks.before_step(phase)


def after_step(phase: str) -> None:
    for hooks in tuple(_installed):
        hooks.after_step(phase)
