"""Guard: no scale-down that would put more state on each executor than its memory allows
(`guards.max_state_memory_fraction`). Pure.

Flink's autoscaler users report an out-of-memory after a scale-down as its most common failure: the
state that fitted on n executors is spread over fewer. The state is the stateful operators' memory
(`stateOperators[].memoryUsedBytes` of each query's latest progress, model/memory_figures.py); after
the change each executor holds about state / executors. Above the configured fraction of one
executor's memory (`executor_memory_mb`, as policies/quotas.py reads it) the scale-down is held, with
a warning. No state measured (stateless queries, an older monitor): nothing is held.
"""

from __future__ import annotations

from sparkscale.model.memory_figures import MIB
from sparkscale.model.plan import Action
from sparkscale.policies.guard_input import GuardInput, replace_scale, scale
from sparkscale.policies.quotas import executor_memory_mb

MEMORY_WARNING = "state memory:"  # how the guard's warning starts


def memory_guard(actions: list[Action], given: GuardInput, max_fraction: float | None,
                 notes: list[str]) -> list[Action]:
    """`actions` without a scale-down after which state / executors > `max_fraction` x executor memory."""
    action = scale(actions)
    if max_fraction is None or action is None or action.to is None or action.executor_direction >= 0:
        return actions
    state_bytes = given.snapshot.memory.state_memory_bytes
    if not state_bytes:
        return actions
    memory_mb = executor_memory_mb(given)
    limit_mb = max_fraction * memory_mb
    per_executor_mb = state_bytes / MIB / action.to if action.to > 0 else float("inf")
    if per_executor_mb <= limit_mb:
        return actions
    why = (f"the state, {state_bytes / MIB:.0f} MB, would be {per_executor_mb:.0f} MB per executor on {action.to}, "
           f"above max_state_memory_fraction {max_fraction:g} x executor_memory_mb {memory_mb} = {limit_mb:.0f} MB")
    notes.append(f"guard state memory: {action.summary()} held: {why}")
    warning = Action.warn(f"{MEMORY_WARNING} {given.app.name} keeps {action.from_} executors: {why}")
    return [*replace_scale(actions, None), warning]
