"""Guard: no scaling action inside an excluded period (`guards.excluded_periods` and the app's own
`apps[].excluded_periods`, each in its time zone; the syntax is config/periods.py's), e.g. a nightly
batch window or a weekend freeze an operator does not want the daemon to resize in. Warnings pass:
the operator still hears what the app needs. Pure."""

from __future__ import annotations

from sparkscale.config.periods import Period, active_period
from sparkscale.model.plan import Action
from sparkscale.policies.guard_input import GuardInput


def excluded_period(actions: list[Action], given: GuardInput, periods: tuple[Period, ...],
                    notes: list[str]) -> list[Action]:
    """`actions` without their changes while `given.now` is inside one of `periods`."""
    changes = [a for a in actions if a.type != "warn"]
    if not changes or not periods:
        return actions
    period = active_period(periods, given.now)
    if period is None:
        return actions
    notes.append(f"guard excluded period: {', '.join(a.summary() for a in changes)} held: inside the excluded "
                 f"period {period.text!r}" + ("" if period.zone in period.text else f" ({period.zone})"))
    return [a for a in actions if a.type == "warn"]
