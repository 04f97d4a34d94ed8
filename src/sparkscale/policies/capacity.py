"""The cluster's capacity, as the last guard: a scale-up asks for no more executors than the
cluster can start. Pure.

Without it, a scale-up the cluster cannot satisfy leaves executors "starting" for minutes: the
starting-executors guard then holds every later decision of the app, and the master hands the cores
to whichever app asked first when some come free. Here the request is cut to what fits, and the
plan says so with a warning (the operator's sign that the cluster is short).

What fits: on each ALIVE worker of the app's cluster view (`extensions["cluster"]`), as many
executors of the app's shape as its free cores and memory allow (the master places whole
executors: `Master.scheduleExecutorsOnWorkers`), summed; less what is already promised: this app's
executors asked for and not started, and the cores other managed apps asked for and have not got
(`history.cores_claimed_elsewhere`, from the daemon, which sees every app). Cycles of different apps
are not simultaneous, so two apps that ask in the same instant can still overbook by one request;
the next cycle sees it. No cluster view (`loop.cluster_view` off, the master not answering):
unknown, nothing is cut.

A memory increase (`set_executor_memory`, memory_apply.py) restarts the whole app with the same
executor count at the new memory: the restart releases this app's own executors, so their cores and
memory count as free on their workers, and every executor is placed again. It fits when, over the
alive workers, min(free cores // the app's cores, free memory // the new memory) sums to that count
and the cores the other managed apps asked for; otherwise it is cut to the largest memory that fits,
or held (memory_limits.py: the step, the rounding, the warning, here starting SHORT_WARNING).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from sparkscale.config import QuotasConfig
from sparkscale.config.memory import MemoryPolicyConfig
from sparkscale.model.placement import placement_of
from sparkscale.model.plan import Action, Plan
from sparkscale.policies.guard_input import GuardInput, cut_scale_up
from sparkscale.policies.guard_input import scale as _scale
from sparkscale.policies.guard_input import target as _target
from sparkscale.policies.memory_limits import MemoryLimit, cut_memory, memory_increase, memory_quota, restart_executors
from sparkscale.policies.quotas import apply_quotas, executor_memory_mb

SHORT_FIGURE = "cluster_short_executors"  # the observation figure: executors cut from the scale-up
SHORT_WARNING = "cluster short of resources:"  # how the plan's warning starts


def short_warnings(plan: Plan) -> tuple[str, ...]:
    """The plan's warnings that the cluster could not start what the app needs."""
    return tuple(w.reason for w in plan.warnings if w.reason.startswith(SHORT_WARNING))


def shortfall(plan: Plan) -> int:
    """Executors the plan needed beyond the cluster's room (0: none cut)."""
    return int(plan.observation.figure(SHORT_FIGURE) or 0)


def fitting(room: Iterable[tuple[int, int]], cores: int, memory_mb: int) -> int:
    """Executors of `cores` cores and `memory_mb` MB that fit on workers with (free cores, free MB)
    `room`: the master places whole executors on a worker (`Master.scheduleExecutorsOnWorkers`)."""
    return sum(min(free_cores // cores, free_mb // max(memory_mb, 1)) for free_cores, free_mb in room)


def room_for(given: GuardInput) -> tuple[int, int] | None:
    """(executors of the app's shape the cluster can still start, free cores seen); None: no view."""
    placement = placement_of(given.snapshot.extensions)
    if placement is None or placement.error is not None or not placement.workers:
        return None
    cores = max(given.app.executor_cores, 1)
    fits = fitting(((w.cores_free, w.memory_free_mb) for w in placement.workers), cores, executor_memory_mb(given))
    own_starting = max((given.requested or 0) - given.executors, 0)
    elsewhere = math.ceil(given.history.cores_claimed_elsewhere / cores)
    return max(fits - own_starting - elsewhere, 0), sum(w.cores_free for w in placement.workers)


def cluster_capacity(actions: list[Action], given: GuardInput, notes: list[str]) -> list[Action]:
    """A scale-up cut to what the cluster can start (module docstring), with a warning when cut."""
    action = _scale(actions)
    if action is None or action.to is None or action.executor_direction <= 0:
        return actions
    room = room_for(given)
    if room is None:
        return actions
    fits, free_cores = room
    base = max(given.executors, given.requested or 0)
    wanted = action.to - base
    if wanted <= fits:
        return actions
    to = base + fits
    claimed = given.history.cores_claimed_elsewhere
    why = (f"the cluster can start {fits} more executor(s) of {given.app.executor_cores} core(s) "
           f"({free_cores} free core(s) on its workers" + (f", {claimed} asked for by other apps" if claimed else "")
           + ")")
    short = Action.warn(f"{SHORT_WARNING} {given.app.name} needs {action.to} executors, gets {to}: "
                        f"{why}")
    notes.append(f"guard cluster capacity: {action.summary()} " + (f"dropped: {why}" if to <= given.executors
                                                                    else f"cut to {to}: {why}"))
    return cut_scale_up(actions, action, given, to, short, "cut to what the cluster can start")


def memory_room_mb(given: GuardInput, executors: int) -> tuple[int, int] | None:
    """(the largest executor memory, in MB, at which `executors` of the app's cores fit on the alive
    workers once the restart released the app's own, free cores counted); None: no view. 0: none fits."""
    placement = placement_of(given.snapshot.extensions)
    if placement is None or placement.error is not None or not placement.workers:
        return None
    cores, own_mb = max(given.app.executor_cores, 1), executor_memory_mb(given)
    room = [(w.cores_free + len(w.executors) * cores, w.memory_free_mb + len(w.executors) * own_mb)
            for w in placement.workers]
    need = executors + math.ceil(given.history.cores_claimed_elsewhere / cores)

    low, high = 0, max(free_mb for _cores, free_mb in room)  # fits at low, or low stays 0
    while low < high:  # the largest memory that fits: fewer executors fit as the memory grows
        middle = (low + high + 1) // 2
        low, high = (middle, high) if fitting(room, cores, middle) >= need else (low, middle - 1)
    return low, sum(free_cores for free_cores, _mb in room)


def memory_capacity(actions: list[Action], given: GuardInput, settings: MemoryPolicyConfig,
                    notes: list[str]) -> list[Action]:
    """A memory increase cut to what the alive workers can start (module docstring)."""
    action = memory_increase(actions)
    executors = restart_executors(given)
    room = None if action is None or executors <= 0 else memory_room_mb(given, executors)
    if action is None or room is None:
        return actions
    fits_mb, free_cores = room
    claimed = given.history.cores_claimed_elsewhere
    why = (f"{executors} executor(s) of {given.app.executor_cores} core(s) must fit on the workers ({free_cores} "
           f"core(s) free once the restart released this app's own" + (f", {claimed} asked for by other apps"
                                                                       if claimed else "") + ")")
    return cut_memory(actions, action, given, settings,
                      MemoryLimit(fits_mb, "cluster capacity", SHORT_WARNING, "the cluster", why), notes)


def apply_capacity(plan: Plan, given: GuardInput, quotas: QuotasConfig | None = None,
                   memory: MemoryPolicyConfig | None = None) -> Plan:
    """`plan` with its scale-up cut to the managed apps' quotas (quotas.py), then to the cluster's
    room (after the other guards); its memory increase likewise (memory_limits.py, memory_capacity),
    by `memory`'s step (`policy.memory`; None: its defaults). The shortfall figure counts only the
    executors the cluster's room cut."""
    settings = memory if memory is not None else MemoryPolicyConfig()
    quota_notes: list[str] = []
    allowed = list(plan.actions)
    if quotas is not None:
        allowed = memory_quota(apply_quotas(allowed, given, quotas, quota_notes), given, quotas, settings,
                               quota_notes)
    notes: list[str] = []
    actions = cluster_capacity(allowed, given, notes)
    short = bool(notes)
    actions = memory_capacity(actions, given, settings, notes)
    if not notes:
        return plan.with_actions(allowed, quota_notes) if quota_notes else plan
    if not short:
        return plan.with_actions(actions, [*quota_notes, *notes])
    wanted, got = _target(allowed, given.executors), _target(actions, given.executors)
    return plan.with_actions(actions, [*quota_notes, *notes],
                             figures={SHORT_FIGURE: max(wanted - max(got, given.executors), 0)})
