"""The recommended executor memory (`policy.memory.recommend`): right-sizing from the heap's peak. Pure.

The executors' JVM heap peak (model/memory_figures.py's `heap_used_bytes`, the executor nearest its
heap's end) should stay below `target_heap_fraction` of the executor memory, so the recommendation
is peak / target_heap_fraction, rounded up to 256 MB, bounded by `max_executor_memory_mb`: above the
current memory when the heap runs full (an out-of-memory ahead), below it when the executors hold
far more than they use (memory another app could have). A heap peak is the highest since the executor
started, garbage included, so it errs on the generous side. Shown in the plan's explanation and its
observation figure `recommended_executor_memory_mb`.

A new executor memory takes effect through a restart of the whole app with a new shape
(actuators/migration/runner.py, store/redis_shapes.py), which the operator's migration request asks
for (`sparkscale migrate --executor-memory-mb`) and, with `policy.memory.apply`, a
`set_executor_memory` action (memory_apply.py, which gets the recommendation as a wish).
"""

from __future__ import annotations

from sparkscale.config.memory import MemoryPolicyConfig
from sparkscale.model.memory_figures import MIB
from sparkscale.policies.gc_guard import RECOMMENDED_MEMORY_FIGURE, round_up_mb
from sparkscale.policies.guard_input import GuardInput
from sparkscale.policies.memory_apply import MemoryWish
from sparkscale.policies.quotas import executor_memory_mb


def recommended_memory_mb(heap_peak_bytes: int, settings: MemoryPolicyConfig) -> int:
    """peak / target_heap_fraction, rounded up to 256 MB, at most `max_executor_memory_mb`."""
    return min(round_up_mb(heap_peak_bytes / MIB / settings.target_heap_fraction), settings.max_executor_memory_mb)


def recommend_memory(given: GuardInput, settings: MemoryPolicyConfig | None, notes: list[str],
                     figures: dict[str, float], wishes: list[MemoryWish] | None = None) -> None:
    """With `settings.recommend`: the recommendation as an explanation line and in `figures` (the
    larger one where the GC guard recommended too); in `wishes` when it is another memory."""
    if settings is None or not settings.recommend:
        return
    peak = given.snapshot.memory.heap_used_bytes
    current = executor_memory_mb(given)
    if peak is None:
        notes.append("memory: no JVM heap peak measured yet: no executor_memory_mb recommended")
        return
    recommended = recommended_memory_mb(peak, settings)
    figures[RECOMMENDED_MEMORY_FIGURE] = max(recommended, figures.get(RECOMMENDED_MEMORY_FIGURE, 0))
    capped = " (capped at max_executor_memory_mb)" if recommended == settings.max_executor_memory_mb else ""
    if wishes is not None and recommended != current:
        wishes.append(MemoryWish(recommended, f"heap peak {peak / MIB:.0f} MB, for a peak at "
                                              f"{settings.target_heap_fraction * 100:.0f} % of the heap"))
    verdict = "keep it" if recommended == current else f"recommended executor_memory_mb {recommended}{capped}"
    notes.append(f"memory: the highest executor heap peak is {peak / MIB:.0f} MB of {current} MB; for a peak at "
                 f"{settings.target_heap_fraction:.0%} of the heap: {verdict}")
