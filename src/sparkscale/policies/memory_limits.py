"""A memory increase held to a limit: the `set_executor_memory` action (memory_apply.py) against
`quotas.max_memory_mb` here, and against the workers' room in capacity.py. Pure.

The new memory takes effect through a restart of the whole app that keeps its executor count
(actuators/executor_memory.py), so the restart needs that many executors at the new memory. When a
limit leaves less, the action is cut to the largest memory that fits, rounded down to the
recommendations' MEMORY_STEP_MB (gc_guard.py and memory.py round up to it); a cut that leaves less
than memory_apply.py's step (`policy.memory.min_change_mb`, `min_change_fraction`) above the current
memory is not worth the restart, and the action is held. Either way an explanation line and a
warning name the limit, as quotas.py and capacity.py do for a scale-up. A decrease is never cut.

The quota: what the other managed apps' executors hold (`history.memory_mb_held_elsewhere`, as
quotas.py reads it) plus this app's executors x the new memory, at most `quotas.max_memory_mb`.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkscale.config import QuotasConfig
from sparkscale.config.memory import MemoryPolicyConfig
from sparkscale.model.plan import Action, ActionType
from sparkscale.policies.gc_guard import MEMORY_STEP_MB
from sparkscale.policies.guard_input import GuardInput
from sparkscale.policies.memory_apply import change_step_mb
from sparkscale.policies.quotas import QUOTA_WARNING


@dataclass(frozen=True)
class MemoryLimit:
    """What a limit leaves: the largest executor memory that fits (MB, not rounded), and how the
    plan names it."""

    fits_mb: int
    guard: str  # the explanation line's "guard <guard>: ..."
    warning: str  # how the warning starts (QUOTA_WARNING, capacity.py's SHORT_WARNING)
    name: str  # "the quota", in "... the quota allows 1536 MB each"
    why: str


def restart_executors(given: GuardInput) -> int:
    """The executors the restart starts again: those the app holds or asked for (quotas.py's count)."""
    return max(given.executors, given.requested or 0)


def memory_increase(actions: list[Action]) -> Action | None:
    """The actions' `set_executor_memory` that raises the memory (None: none does)."""
    return next((a for a in actions if a.type == ActionType.SET_EXECUTOR_MEMORY and a.from_ is not None
                 and a.to is not None and a.to > a.from_), None)


def round_down_mb(memory_mb: int) -> int:
    """`memory_mb` rounded down to a whole MEMORY_STEP_MB."""
    return max(memory_mb, 0) // MEMORY_STEP_MB * MEMORY_STEP_MB


def cut_memory(actions: list[Action], action: Action, given: GuardInput, settings: MemoryPolicyConfig,
               limit: MemoryLimit, notes: list[str]) -> list[Action]:
    """`actions` with the memory increase `action` cut to what `limit` leaves, or held when the cut
    is under memory_apply.py's step (module docstring), and a warning; unchanged when it fits."""
    assert action.from_ is not None and action.to is not None and action.query is not None, "memory_increase's"
    if limit.fits_mb >= action.to:
        return actions
    current, to = action.from_, round_down_mb(limit.fits_mb)
    step = change_step_mb(settings, current)
    held = to - current < step
    warning = Action.warn(f"{limit.warning} {given.app.name} needs executors of {action.to} MB, {limit.name} "
                          f"allows {to} MB each" + (f", it keeps {current} MB" if held else "") + f": {limit.why}")
    if held:
        notes.append(f"guard {limit.guard}: {action.summary()} held: {limit.why}; {to} MB fits, under the step "
                     f"of {step} MB above {current} MB (policy.memory.min_change_mb, min_change_fraction)")
        return [*(a for a in actions if a is not action), warning]
    notes.append(f"guard {limit.guard}: {action.summary()} cut to {to} MB: {limit.why}")
    cut = Action.set_executor_memory(action.query, current, to, f"{action.reason}; cut to what {limit.name} allows")
    return [*(cut if a is action else a for a in actions), warning]


def memory_quota(actions: list[Action], given: GuardInput, quotas: QuotasConfig, settings: MemoryPolicyConfig,
                 notes: list[str]) -> list[Action]:
    """A memory increase cut to what `quotas.max_memory_mb` leaves (module docstring)."""
    action = memory_increase(actions)
    executors = restart_executors(given)
    if action is None or quotas.max_memory_mb is None or executors <= 0:
        return actions
    held = given.history.memory_mb_held_elsewhere
    left = max(quotas.max_memory_mb - held, 0)
    why = (f"quotas.max_memory_mb = {quotas.max_memory_mb} ({held} MB held by the other managed apps, "
           f"{executors} executor(s) of this app)")
    return cut_memory(actions, action, given, settings,
                      MemoryLimit(left // executors, "quota", QUOTA_WARNING, "the quota", why), notes)
