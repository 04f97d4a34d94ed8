"""Guard: a cap on reversals of the executor count's direction (`guards.max_direction_changes_per_hour`).

The cooldown (guards.py) spaces one reversal from the last action; a load that swings slower than
the cooldown still makes the app go up, down, up again, each step paying an executor start or a
state reload (ContTune and StreamTune count reconfigurations as a cost for that reason). Counted
from the decision history, by the guards' rule that a past plan with a change was carried out:
each executor change whose direction differs from the change before it, within the last hour. At
the cap, a change that would reverse the last one again is held; one in the same direction is not.
Pure."""

from __future__ import annotations

from sparkscale.model.plan import Action
from sparkscale.policies.guard_input import GuardInput, replace_scale, scale
from sparkscale.policies.history import DecisionHistory

HOUR_S = 3600.0


def reversals(history: DecisionHistory, since: float) -> tuple[int, int]:
    """(direction changes of the executor count at or after `since`, the direction of the last
    executor change: +1, -1, or 0 when there was none)."""
    count, last = 0, 0
    for decision in history:
        action = scale(list(decision.plan.changes))
        direction = action.executor_direction if action is not None else 0
        if direction == 0:
            continue
        if last and direction != last and decision.decided_at >= since:
            count += 1
        last = direction
    return count, last


def direction_cap(actions: list[Action], given: GuardInput, cap: int | None, notes: list[str]) -> list[Action]:
    """`actions` without a scale that would reverse the direction once more than `cap` allows."""
    action = scale(actions)
    if cap is None or action is None or action.executor_direction == 0:
        return actions
    count, last = reversals(given.history, given.now - HOUR_S)
    if count < cap or last in (0, action.executor_direction):
        return actions
    notes.append(f"guard direction changes: {action.summary()} held: it would reverse the last executor change, "
                 f"and the count already changed direction {count} time(s) in the last hour (cap {cap})")
    return replace_scale(actions, None)
