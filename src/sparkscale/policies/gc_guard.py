"""Guard: when GC dominates, add memory, not executors (`guards.gc_time_fraction_max`). Pure.

An executor that spends much of its task time in GC is short of heap: more executors of the same
memory spread the load but each still collects as often, and the state per executor (the usual
cause) does not shrink with the input rate. Flink's autoscaler holds a scale-up on GC pressure for
the same reason. When GC took more than the configured fraction of the executors' task run time in
the window (model/memory_figures.py's `gc_time_fraction`), a scale-up is held and a warning
recommends an `executor_memory_mb` of the current one x GC_MEMORY_FACTOR, rounded up to
MEMORY_STEP_MB; the recommendation is also the plan's observation figure
`recommended_executor_memory_mb` (policies/memory.py), and, with `policy.memory.apply`, a wish
that memory_apply.py turns into a `set_executor_memory` action.
"""

from __future__ import annotations

import math

from sparkscale.config.memory import MAX_EXECUTOR_MEMORY_MB
from sparkscale.model.plan import Action
from sparkscale.policies.guard_input import GuardInput, replace_scale, scale
from sparkscale.policies.memory_apply import MemoryWish
from sparkscale.policies.quotas import executor_memory_mb

GC_MEMORY_FACTOR = 1.5  # the memory recommended when GC dominates: the current one x this
MEMORY_STEP_MB = 256  # executor memory is recommended in steps of this
RECOMMENDED_MEMORY_FIGURE = "recommended_executor_memory_mb"  # the observation figure


def round_up_mb(memory_mb: float) -> int:
    """`memory_mb` rounded up to a whole MEMORY_STEP_MB, within [MEMORY_STEP_MB, the largest shape]."""
    steps = max(math.ceil(memory_mb / MEMORY_STEP_MB - 1e-9), 1)
    return min(steps * MEMORY_STEP_MB, MAX_EXECUTOR_MEMORY_MB)


def gc_guard(actions: list[Action], given: GuardInput, max_fraction: float | None, notes: list[str],
             figures: dict[str, float], wishes: list[MemoryWish] | None = None) -> list[Action]:
    """`actions` with a scale-up turned into a memory recommendation when GC time is above
    `max_fraction` of executor time; the recommendation in `figures` and `wishes`."""
    action = scale(actions)
    if max_fraction is None or action is None or action.executor_direction <= 0:
        return actions
    fraction = given.snapshot.memory.gc_time_fraction
    if fraction is None or fraction <= max_fraction:
        return actions
    memory_mb = executor_memory_mb(given)
    recommended = round_up_mb(memory_mb * GC_MEMORY_FACTOR)
    figures[RECOMMENDED_MEMORY_FIGURE] = recommended
    percent = f"{fraction * 100:.0f} %"
    if wishes is not None:
        wishes.append(MemoryWish(recommended, f"GC {percent} of task time"))
    notes.append(f"guard GC: {action.summary()} held: GC took {percent} of the executors' task time in the window, "
                 f"above gc_time_fraction_max {max_fraction:g}: executors of {memory_mb} MB would collect as "
                 f"often; recommended executor_memory_mb {recommended} ({memory_mb} x {GC_MEMORY_FACTOR:g})")
    warning = Action.warn(f"GC takes {percent} of executor time: add memory, not executors "
                          f"(recommended executor_memory_mb {recommended})")
    return [*replace_scale(actions, None), warning]
