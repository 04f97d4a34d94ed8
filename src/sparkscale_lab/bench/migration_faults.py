"""Fault injection for the integration tests: phase hooks (`sparkscale.actuators.migration.hooks`)
that read the runner's environment. `install()` puts them in this process; `python -m
sparkscale_lab.bench.migration_faults ARGS` is `sparkscale ARGS` with them installed (how a test
runs a daemon with a fault). Both variables do nothing when unset:

- `SPARKSCALE_MIGRATION_HOLD=<phase>`: the process stops for good right after that phase's step ran
  and before it is recorded (for `requested`: right after the journal was created), so a test can
  SIGKILL it at exactly that point: the step done, but not known to be done.
- `SPARKSCALE_MIGRATION_FAIL=<phase>`: that phase's step fails (a MigrationError) before it runs,
  each time the runner's walk reaches it; the recovery's own steps (recovery.py) are never failed,
  so a test sees what the runner does with a failure at exactly that phase.
"""

from __future__ import annotations

import os
import threading

import structlog

from sparkscale.actuators.migration import hooks
from sparkscale.actuators.migration.base import MigrationError

log = structlog.get_logger(__name__)

FAULT_HOLD_ENV = "SPARKSCALE_MIGRATION_HOLD"
FAULT_FAIL_ENV = "SPARKSCALE_MIGRATION_FAIL"


def fault_hold(phase: str) -> None:
    """Block for ever after `phase`'s step when SPARKSCALE_MIGRATION_HOLD names it."""
    if os.environ.get(FAULT_HOLD_ENV) == phase:
        log.warning("migration.fault_hold", phase=phase, env=FAULT_HOLD_ENV)
        threading.Event().wait()


def fault_fail(phase: str) -> None:
    """Fail `phase`'s step before it runs when SPARKSCALE_MIGRATION_FAIL names it."""
    if os.environ.get(FAULT_FAIL_ENV) == phase:
        log.warning("migration.fault_fail", phase=phase, env=FAULT_FAIL_ENV)
        raise MigrationError(f"injected failure before {phase} ({FAULT_FAIL_ENV}={phase})")


class EnvFaults:
    """The two faults above as the runner's phase hooks."""

    def before_step(self, phase: str) -> None:
        fault_fail(phase)

    def after_step(self, phase: str) -> None:
        fault_hold(phase)


FAULTS = EnvFaults()


def install() -> None:
    hooks.install(FAULTS)


if __name__ == "__main__":
    from sparkscale.cli import main

    install()
    main()
