"""Setting the recommended executor memory (`policy.memory.apply`, issue 33). Pure.

The recommendations, memory.py's from the heap peak and gc_guard.py's under GC pressure, are
`MemoryWish`es. With `apply`, the largest becomes a `set_executor_memory` action, which its actuator
(actuators/executor_memory.py) carries out as the whole-app restart with a new executor shape that
`sparkscale migrate --executor-memory-mb` asks for (actuators/migration/runner.py). Spark fixes
`spark.executor.memory` for an application's life, so every query of the app stops and starts
again: a change is proposed only when it is at least `min_change_fraction` of the current memory
and `min_change_mb`, never above `max_executor_memory_mb`, never beside another change of the same
plan, and not again within `retry_after_s` of a proposal whose memory the executors still do not
have (the restart was refused or failed, or the app only advises). The guards' holds (in progress,
settle, cooldown, migration, excluded period, start-up grace) apply to it after this (guards.py),
then the planner's cut to `quotas.max_memory_mb` (memory_limits.py) and to the workers' room
(capacity.py), each by the same step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sparkscale.config.memory import MemoryPolicyConfig
from sparkscale.model.executor_shape import MAX_EXECUTOR_MEMORY_MB
from sparkscale.model.plan import MIN_EXECUTOR_MEMORY_MB, Action, ActionType
from sparkscale.model.snapshot_merge import query_names
from sparkscale.policies.guard_input import GuardInput
from sparkscale.policies.history import DecisionHistory, PastDecision
from sparkscale.policies.quotas import executor_memory_mb


@dataclass(frozen=True)
class MemoryWish:
    """A recommended executor memory and what it answers ("GC 34 % of task time")."""

    memory_mb: int
    why: str


def last_proposal(history: DecisionHistory, since: float) -> tuple[PastDecision, Action] | None:
    """The newest decision at or after `since` whose plan set the executor memory, with that action."""
    for decision in reversed(history.decisions):
        if decision.decided_at < since:
            return None
        found = next((a for a in decision.plan.changes if a.type == ActionType.SET_EXECUTOR_MEMORY), None)
        if found is not None:
            return decision, found
    return None


def change_step_mb(settings: MemoryPolicyConfig, current_mb: int) -> int:
    """The least change of executor memory worth a restart of the whole app: `min_change_mb`, and
    `min_change_fraction` of the current memory (the quotas and the workers' room cut by it too:
    memory_limits.py, capacity.py)."""
    return max(settings.min_change_mb, math.ceil(settings.min_change_fraction * current_mb))


def propose_memory(actions: list[Action], given: GuardInput, settings: MemoryPolicyConfig | None,
                   wishes: list[MemoryWish], notes: list[str]) -> list[Action]:
    """With `settings.apply`: the `set_executor_memory` action for the largest of `wishes`, or none
    (an explanation line says why not, where there was a wish to carry out)."""
    if settings is None or not settings.apply or not wishes:
        return []
    wish = max(wishes, key=lambda w: w.memory_mb)
    current = executor_memory_mb(given)
    to = min(wish.memory_mb, settings.max_executor_memory_mb)
    if wish.memory_mb == current:
        return []
    if not MIN_EXECUTOR_MEMORY_MB <= current <= MAX_EXECUTOR_MEMORY_MB:
        notes.append(f"memory apply: {current} MB kept: outside the executor memory a shape may have "
                     f"[{MIN_EXECUTOR_MEMORY_MB}, {MAX_EXECUTOR_MEMORY_MB}]")
        return []
    if (to - current) * (wish.memory_mb - current) <= 0:  # the cap would turn the change around
        notes.append(f"memory apply: {current} MB kept: {wish.memory_mb} MB recommended ({wish.why}), but "
                     f"policy.memory.max_executor_memory_mb is {settings.max_executor_memory_mb}")
        return []
    capped = ", capped at policy.memory.max_executor_memory_mb" if to < wish.memory_mb else ""
    change = f"executor memory {current} -> {to} MB ({wish.why}{capped})"
    step = change_step_mb(settings, current)
    if abs(to - current) < step:
        notes.append(f"memory apply: {change} not proposed: under the step of {step} MB "
                     f"(policy.memory.min_change_fraction {settings.min_change_fraction:g} of {current} MB, "
                     f"min_change_mb {settings.min_change_mb})")
        return []
    others = [a for a in actions if a.type != ActionType.WARN]
    if others:
        notes.append(f"memory apply: {change} not proposed: this cycle's plan changes "
                     f"{', '.join(a.summary() for a in others)} already")
        return []
    last = last_proposal(given.history, given.now - settings.retry_after_s)
    if last is not None and last[1].to != current:
        decision, earlier = last
        notes.append(f"memory apply: {change} held: {earlier.summary()} was proposed "
                     f"{given.now - decision.decided_at:g} s ago and the executors still have {current} MB (its "
                     f"restart was refused or failed, or the app only advises: `sparkscale actions` shows it); "
                     f"next proposal {settings.retry_after_s:g} s after it (policy.memory.retry_after_s)")
        return []
    notes.append(f"memory apply: {change}: set through a restart of the whole app with the new executor shape")
    return [Action.set_executor_memory(query_names(given.snapshot)[0], current, to, change)]
