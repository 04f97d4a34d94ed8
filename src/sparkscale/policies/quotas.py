"""Quotas over every managed app together (`quotas.max_cores`, `quotas.max_memory_mb`): a scale-up
that would take the total over a quota is cut to what fits, or held when nothing fits, with an
explanation line and a warning naming the quota (the operator's sign that the quota binds). Pure.

The total is what the other managed apps hold or asked for (`history.cores_held_elsewhere`,
`history.memory_mb_held_elsewhere`, from the daemon, which sees every app, as it does
`cores_claimed_elsewhere` for the capacity guard, capacity.py) plus this app's executors after the
change, of its shape (cores, and `spark.executor.memory` as the cluster view or the config has it).
A scale-down, or an app already over a quota, is never made to grow by it: only the growth is cut.
An increase of the executor memory (`set_executor_memory`) is held to `quotas.max_memory_mb` the
same way, in memory_limits.py (which imports this module, as memory_apply.py does).
"""

from __future__ import annotations

from sparkscale.config import QuotasConfig
from sparkscale.model.placement import placement_of
from sparkscale.model.plan import Action
from sparkscale.policies.guard_input import GuardInput, cut_scale_up, scale

QUOTA_WARNING = "quota reached:"  # how the plan's warning starts


def executor_memory_mb(given: GuardInput) -> int:
    """The app's executor memory: the cluster view's (what the executors really have), else the config's."""
    placement = placement_of(given.snapshot.extensions)
    from_view = placement.executor_memory_mb if placement is not None else None
    return from_view or given.app.executor_memory_mb


def quota_room(given: GuardInput, quotas: QuotasConfig) -> tuple[int, str] | None:
    """(executors this app may hold in all under the quotas, the quota that binds, described);
    None: no quota set."""
    base = max(given.executors, given.requested or 0)
    cores, memory = max(given.app.executor_cores, 1), max(executor_memory_mb(given), 1)
    history = given.history
    limits: list[tuple[int, str]] = []
    if quotas.max_cores is not None:
        left = max(quotas.max_cores - history.cores_held_elsewhere, 0)
        limits.append((left // cores, f"quotas.max_cores = {quotas.max_cores} ({history.cores_held_elsewhere} "
                                      f"held by the other managed apps, {cores} per executor)"))
    if quotas.max_memory_mb is not None:
        left = max(quotas.max_memory_mb - history.memory_mb_held_elsewhere, 0)
        limits.append((left // memory, f"quotas.max_memory_mb = {quotas.max_memory_mb} "
                                       f"({history.memory_mb_held_elsewhere} MB held by the other managed apps, "
                                       f"{memory} MB per executor)"))
    if not limits:
        return None
    fits, why = min(limits, key=lambda limit: limit[0])
    return max(fits, base), why


def apply_quotas(actions: list[Action], given: GuardInput, quotas: QuotasConfig, notes: list[str]) -> list[Action]:
    """A scale-up cut to what the quotas leave (module docstring), with a warning when cut."""
    action = scale(actions)
    if action is None or action.to is None or action.executor_direction <= 0:
        return actions
    room = quota_room(given, quotas)
    if room is None or action.to <= room[0]:
        return actions
    to, why = room
    warning = Action.warn(f"{QUOTA_WARNING} {given.app.name} needs {action.to} executors, the quota allows {to}: "
                          f"{why}")
    notes.append(f"guard quota: {action.summary()} " + (f"held: {why}" if to <= given.executors
                                                          else f"cut to {to}: {why}"))
    return cut_scale_up(actions, action, given, to, warning, "cut to what the quota allows")
