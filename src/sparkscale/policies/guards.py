"""Guards: limits applied to any policy's plan before it is carried out, so that every policy
obeys the same stability rules (lecture, "Scaling Controller": accuracy, *stability: no
oscillations*, fast convergence). Pure: the daemon passes in what it knows (history, migration).

Order, each step explained in the returned plan's explanation (lines starting "guard "):

0. dynamic allocation: an app under Spark's own dynamic allocation keeps no `scale_executors`.
1. executor range: a `scale_executors` target is clamped to the app's [min_executors,
   max_executors]; an app outside its range gets an action back into it.
2. unmeasured query (unmeasured_query.py): no scale-down while one query has stages in the window
   and another has none and a batch running since before the window: its need is unknown.
3. scale-down delay (`guards.scale_down_delay_s`): a scale-down happens only once every
   recommendation over the delay was below the current count, and then to the largest of them
   (the recommendation is the clamped target, or the current count when the plan scales nothing);
   within `DELAY_SLACK_S` (or `DELAY_SLACK_FRACTION` of a shorter delay) of it counts as the delay.
4. step cap (`guards.max_scale_up_factor` / `max_scale_down_factor`): at most /2 down by default
   (up: no cap by default, a policy's computed target is reached in one step), and always at least
   one executor.
5. in progress: no change while an earlier action is still being carried out (the daemon runs
   actions in the background; the next cycles see it here).
6. starting executors: while Spark has not registered every executor asked for, a scale action is
   kept only when it asks for more than were asked for already (the rest would undo or repeat it).
7. settle: act on the first trustworthy window after a change: none whose window began before the
   last change was done (its figures mix the old and the new executors).
8. cooldown (`loop.cooldown_s`): no reversal of the last executor change (a scale-down after a
   scale-up or the reverse), and no other kind of change, within cooldown_s of it; a further step in
   the same direction (a scale-up still short of its target) is not held.
9. migration (`loop.stabilization_s`): no change while a migration runs, nor within
   stabilization_s after one ended.
10. excluded period (`guards.excluded_periods` and the app's `apps[].excluded_periods`,
   excluded_periods.py): no change inside a configured window (in its time zone, UTC by default).
11. start-up grace (`guards.startup_grace_batches`, startup_grace.py): no change while a query's
   window rests on the first batches of its new or restarted run.
12. draining (`guards.no_scale_down_while_draining`, draining.py): no scale-down while the backlog
   is above `guards.backlog_slo_s` seconds of input, or falling while above the few batches' worth
   of arrivals a healthy source always has waiting (figures.py `usual_backlog`).
13. direction changes (`guards.max_direction_changes_per_hour`, direction_cap.py): at the cap, no
   change that reverses the last executor change again.
14. ineffective scaling (`guards.ineffective_scale_up_fraction`, ineffective.py): no scale-up of a
   query whose last judged scale-up brought under that fraction of its expected gain, until the
   load changes or `guards.ineffective_hold_s` passed (a warning says why); idle executors
   (`guards.idle_executors_task_time_fraction`, idle_executors.py): no scale-up while the executors
   ran tasks under that fraction of the window and the backlog is within `guards.backlog_slo_s`.
15. state memory (`guards.max_state_memory_fraction`, memory_guard.py): no scale-down that puts state over its share.
16. GC (`guards.gc_time_fraction_max`, gc_guard.py): a scale-up under GC pressure becomes a memory recommendation.
Then, with `policy.memory.recommend`, the recommended executor memory (memory.py), an explanation line.
17. executor memory (`policy.memory.apply`, memory_apply.py): the recommendation (16's or memory.py's)
   becomes a `set_executor_memory` action (a restart of the whole app), which steps 5, 7 to 11
   then hold as they hold any other change: in progress, settle, cooldown, migration, excluded
   period, start-up grace.

After these, the planner applies the quotas over all managed apps (`quotas.*`, quotas.py) and the
cluster's capacity (capacity.py), to 17's memory increase too (memory_limits.py:
`quotas.max_memory_mb` and the workers' room, each cut to what fits or held under 17's step).
Settings 10 and 12 to 17 are off by default; 11, the start-up grace, holds the first 3 batches of a run.

Warnings always pass. Each guarded plan records its recommendation in its observation
(`plan.observation.recommended_executors`), so that the next decision's scale-down delay can see
it in the decision history (and, with 11, 12 and 14 on, the figures they carry from one decision to
the next).
"""

from __future__ import annotations

import math

from sparkscale.config import AppConfig, GuardsConfig, LoopConfig
from sparkscale.config.memory import MemoryPolicyConfig
from sparkscale.config.periods import Period, parse_periods
from sparkscale.model.plan import Action, Plan
from sparkscale.policies.direction_cap import direction_cap
from sparkscale.policies.draining import draining
from sparkscale.policies.excluded_periods import excluded_period
from sparkscale.policies.gc_guard import gc_guard
from sparkscale.policies.guard_input import GuardInput
from sparkscale.policies.guard_input import drop_changes as _drop_changes
from sparkscale.policies.guard_input import replace_scale as _replace_scale
from sparkscale.policies.guard_input import scale as _scale
from sparkscale.policies.guard_input import target as _target
from sparkscale.policies.history import DecisionHistory, PastDecision
from sparkscale.policies.idle_executors import idle_executors
from sparkscale.policies.ineffective import ineffective_scaling
from sparkscale.policies.memory import recommend_memory
from sparkscale.policies.memory_apply import MemoryWish, propose_memory
from sparkscale.policies.memory_guard import memory_guard
from sparkscale.policies.startup_grace import startup_grace
from sparkscale.policies.unmeasured_query import unmeasured_query

__all__ = ["GuardInput", "apply_guards"]  # GuardInput lives in guard_input.py; importers of it here still work

# Relative slack before rounding, so that float noise does not add an executor.
_SLACK = 1e-9


# ---------------------------------------------------------------------------------------------
# Guards


def apply_guards(plan: Plan, given: GuardInput, guards: GuardsConfig, loop: LoopConfig,
                 memory: MemoryPolicyConfig | None = None) -> Plan:
    """`plan` after every guard (module docstring), with one explanation line per change;
    `memory` is `policy.memory` (None: no recommendation)."""
    notes: list[str] = []
    current = given.executors
    actions = list(plan.actions)

    actions = _spark_owns_executors(actions, given.app, notes)
    actions = _executor_range(actions, current, given.app, notes)
    actions = unmeasured_query(actions, given, notes)  # a blind recommendation must not count for the delay
    recommended = _target(actions, current)
    actions = _scale_down_delay(actions, current, recommended, given, guards.scale_down_delay_s, notes)
    actions = _step_cap(actions, guards.max_scale_up_factor, guards.max_scale_down_factor, notes)
    actions = _in_progress(actions, given, notes)
    actions = _starting(actions, given, notes)
    actions = _settle(actions, given, notes)
    actions = _cooldown(actions, given, loop.cooldown_s, notes)
    actions = _migration(actions, given, loop.stabilization_s, notes)
    figures: dict[str, float] = {}
    periods = parse_periods([*guards.excluded_periods, *given.app.excluded_periods])
    actions = excluded_period(actions, given, periods, notes)
    actions = startup_grace(actions, given, guards.startup_grace_batches, notes, figures)
    if guards.no_scale_down_while_draining:
        actions = draining(actions, given, guards.backlog_slo_s, notes, figures)
    actions = direction_cap(actions, given, guards.max_direction_changes_per_hour, notes)
    actions = ineffective_scaling(actions, given, guards, notes, figures)
    actions = idle_executors(actions, given, guards.idle_executors_task_time_fraction, guards.backlog_slo_s, notes,
                             figures)
    actions = memory_guard(actions, given, guards.max_state_memory_fraction, notes)
    wishes: list[MemoryWish] = []
    actions = gc_guard(actions, given, guards.gc_time_fraction_max, notes, figures, wishes)
    recommend_memory(given, memory, notes, figures, wishes)
    proposed = propose_memory(actions, given, memory, wishes, notes)
    actions = [*actions, *_memory_holds(proposed, given, guards, loop, periods, notes, figures)]

    if figures:
        return plan.with_actions(actions, notes, recommended_executors=recommended, figures=figures)
    return plan.with_actions(actions, notes, recommended_executors=recommended)


def _memory_holds(proposed: list[Action], given: GuardInput, guards: GuardsConfig, loop: LoopConfig,
                  periods: tuple[Period, ...], notes: list[str], figures: dict[str, float]) -> list[Action]:
    """Step 16's action after the holds of steps 4 and 6 to 10, in their order."""
    if not proposed:
        return proposed
    held = _in_progress(proposed, given, notes)
    held = _settle(held, given, notes)
    held = _cooldown(held, given, loop.cooldown_s, notes)
    held = _migration(held, given, loop.stabilization_s, notes)
    held = excluded_period(held, given, periods, notes)
    return startup_grace(held, given, guards.startup_grace_batches, notes, figures)


def _retarget(action: Action, to: int, why: str) -> Action | None:
    if action.from_ == to:
        return None
    return Action.scale_executors(action.from_ if action.from_ is not None else to, to, f"{action.reason}; {why}")


def _spark_owns_executors(actions: list[Action], app: AppConfig, notes: list[str]) -> list[Action]:
    """An app under Spark's own dynamic allocation: Spark sets its executor count, not the daemon."""
    scale = _scale(actions)
    if scale is None or not app.dynamic_allocation.enabled:
        return actions
    notes.append(f"guard dynamic allocation: {scale.from_} -> {scale.to} executors dropped; Spark's dynamic "
                 "allocation owns this app's executor count")
    return _replace_scale(actions, None)


def _executor_range(actions: list[Action], current: int, app: AppConfig, notes: list[str]) -> list[Action]:
    low, high = app.min_executors, app.max_executors
    action = _scale(actions)
    if action is None:
        if low <= current <= high:
            return actions
        bound = low if current < low else high
        notes.append(f"guard executor range: the app holds {current} executors, outside [{low}, {high}]: "
                     f"scale to {bound}")
        return [*actions, Action.scale_executors(current, bound, f"back into the executor range [{low}, {high}]")]
    to = action.to if action.to is not None else current
    clamped = min(max(to, low), high)
    if clamped == to:
        return actions
    limit = "max_executors" if clamped < to else "min_executors"
    why = f"clamped from {to} to {limit} = {clamped}"
    notes.append(f"guard executor range: {action.summary()} {why}"
                 + (" (no change left)" if clamped == action.from_ else ""))
    return _replace_scale(actions, _retarget(action, clamped, why))


# A decision's time is its snapshot's, taken after the cycle's first reads, so consecutive decisions
# land up to a collect's length off the loop's interval: a 30 s delay at a 5 s interval read
# 29.997 s at its sixth cycle and held one more (issue 33, clicks-file). A delay this close to done
# counts as done: within half a second, or 5 % of a shorter delay.
DELAY_SLACK_S = 0.5
DELAY_SLACK_FRACTION = 0.05


def _scale_down_delay(actions: list[Action], current: int, recommended: int, given: GuardInput,
                      delay_s: float, notes: list[str]) -> list[Action]:
    action = _scale(actions)
    if action is None or action.to is None or action.to >= current or delay_s <= 0:
        return actions
    since = given.now - delay_s
    # The recommendations over the delay, newest backwards; a decision without one ends the run.
    seen: list[int] = [recommended]
    lasted_s = 0.0
    for decision in reversed(given.history.decisions):
        value = decision.observation.recommended_executors
        if value is None or value >= current:
            break
        lasted_s = given.now - decision.decided_at
        if decision.decided_at < since:
            break  # the run began before the delay: this one is older than the span we look at
        seen.append(value)
    if lasted_s < delay_s - min(DELAY_SLACK_S, DELAY_SLACK_FRACTION * delay_s):
        notes.append(f"guard scale-down delay: {action.summary()} held: fewer executors have been "
                     f"recommended for {lasted_s:g} s of the {delay_s:g} s required")
        return _replace_scale(actions, None)
    target = max(seen)
    if target == action.to:
        return actions
    why = f"raised to {target}, the largest recommendation of the last {delay_s:g} s"
    notes.append(f"guard scale-down delay: {action.summary()} {why}")
    return _replace_scale(actions, _retarget(action, target, why))


def _step_cap(actions: list[Action], up_factor: float | None, down_factor: float, notes: list[str]) -> list[Action]:
    action = _scale(actions)
    if action is None or action.from_ is None or action.to is None:
        return actions
    current, to = action.from_, action.to
    if to > current and up_factor is None:
        return actions
    if to > current:
        assert up_factor is not None
        # Lecture, "Speculative: small changes ... one at a time" vs dataflow-wide: bound each step.
        limit = max(current + 1, math.floor(current * up_factor * (1 + _SLACK)))
        capped, word = min(to, limit), f"at most x{up_factor:g}"
    else:
        limit = min(current - 1, math.ceil(current / down_factor * (1 - _SLACK)))
        capped, word = max(to, limit), f"at most /{down_factor:g}"
    if capped == to:
        return actions
    why = f"capped at {capped} ({word} per step)"
    notes.append(f"guard step cap: {action.summary()} {why}")
    return _replace_scale(actions, _retarget(action, capped, why))


def _last_change(history: DecisionHistory) -> PastDecision | None:
    return next((d for d in reversed(history.decisions) if d.plan.changes), None)


def _last_action_at(history: DecisionHistory) -> float | None:
    last = _last_change(history)
    return last.decided_at if last else None


def _last_direction(given: GuardInput) -> int:
    if given.history.last_action_direction is not None:
        return given.history.last_action_direction
    last = _last_change(given.history)
    return last.plan.changes[0].executor_direction if last else 0


def _in_progress(actions: list[Action], given: GuardInput, notes: list[str]) -> list[Action]:
    if given.history.action_in_progress is None:
        return actions
    return _drop_changes(actions, notes, f"in progress ({given.history.action_in_progress} is still being "
                                         "carried out)")


def _starting(actions: list[Action], given: GuardInput, notes: list[str]) -> list[Action]:
    requested = given.requested
    action = _scale(actions)
    if requested is None or requested <= given.executors or action is None or action.to is None:
        return actions
    starting = requested - given.executors
    if action.to > requested:
        notes.append(f"guard starting executors: {starting} of the {requested} asked for are still starting; "
                     f"{action.summary()} asks for more: kept")
        return actions
    notes.append(f"guard starting executors: {action.summary()} dropped: {starting} of the {requested} executors "
                 "asked for are still starting (counted as there)")
    return _replace_scale(actions, None)


def _settle(actions: list[Action], given: GuardInput, notes: list[str]) -> list[Action]:
    last = given.last_action_at if given.last_action_at is not None else _last_action_at(given.history)
    window_start = given.now - given.snapshot.window_s
    if last is None or not last or window_start >= last:
        return actions
    return _drop_changes(actions, notes, f"settle (the window began {last - window_start:g} s before the last "
                                         "change was done: waiting for a window after it)")


def _cooldown(actions: list[Action], given: GuardInput, cooldown_s: float, notes: list[str]) -> list[Action]:
    last = given.last_action_at if given.last_action_at is not None else _last_action_at(given.history)
    if last is None or given.now - last >= cooldown_s:
        return actions
    before = _last_direction(given)
    held = [a for a in actions
            if a.type != "warn" and not (a.executor_direction != 0 and a.executor_direction * before >= 0)]
    if not held:
        return actions
    notes.append(f"guard cooldown (last action {given.now - last:g} s ago, cooldown {cooldown_s:g} s): dropped "
                 + ", ".join(a.summary() + (" (a reversal)" if a.executor_direction else "") for a in held))
    return [a for a in actions if a not in held]


def _migration(actions: list[Action], given: GuardInput, stabilization_s: float, notes: list[str]) -> list[Action]:
    if given.migration_running:
        return _drop_changes(actions, notes, "migration (a migration is running, or waits for the operator)")
    end = given.last_migration_end
    if end is not None and given.now - end < stabilization_s:
        return _drop_changes(actions, notes, f"migration (stabilising: the last migration ended "
                                             f"{given.now - end:g} s ago, stabilisation {stabilization_s:g} s)")
    return actions
