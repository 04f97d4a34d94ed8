"""Guards: executor range, scale-down delay, step cap, cooldown, migration; observations in plans."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from sparkscale.config import AppConfig, GuardsConfig, LoopConfig
from sparkscale.model.plan import Action, Observation, Plan
from sparkscale.model.snapshot import Snapshot
from sparkscale.policies.guards import (
    GuardInput,
    apply_guards,
)
from sparkscale.policies.history import DecisionHistory

NOW = 5000.0
# Only the guard under test acts: no delay, no factor cap, no cooldown, no stabilisation.
OFF = GuardsConfig(scale_down_delay_s=0, max_scale_up_factor=100, max_scale_down_factor=100)
LOOP_OFF = LoopConfig(cooldown_s=0, stabilization_s=0)
APP = AppConfig(name="app", min_executors=1, max_executors=8)


def snap(executors: int = 4, taken_at: float = NOW) -> Snapshot:
    return Snapshot.from_dict({
        "version": 1, "app": "app", "query": "q", "taken_at": taken_at, "window_s": 10.0,
        "executors": [{"id": str(k + 1), "host": "h", "cores": 1} for k in range(executors)],
        "operators": [{"id": "src", "source": True, "parallelism": 1, "arrival_rate": 1.0, "instances": []}],
        "edges": [],
    })


def scale_plan(from_: int, to: int, *extra: Action) -> Plan:
    return Plan("test", "app", actions=(Action.scale_executors(from_, to, "policy says so"), *extra))


def guard(plan: Plan, executors: int = 4, history: DecisionHistory | None = None, app: AppConfig = APP,
          guards: GuardsConfig = OFF, loop: LoopConfig = LOOP_OFF, **given: Any) -> Plan:
    history = history if history is not None else DecisionHistory.empty()
    return apply_guards(plan, GuardInput(snap(executors), history, app, **given), guards, loop)


def target(plan: Plan) -> int | None:
    scales = [a for a in plan.actions if a.type == "scale_executors"]
    return scales[0].to if scales else None


def notes(plan: Plan) -> list[str]:
    return [line for line in plan.explanation if line.startswith("guard ")]


def recommendations(*pairs: tuple[float, int]) -> DecisionHistory:
    """A history whose decisions (at NOW - age) recorded these recommended executor counts."""
    history = DecisionHistory.empty()
    for age, recommended in pairs:
        plan = Plan("test", "app", observation=Observation(recommended_executors=recommended))
        history = history.with_decision(NOW - age, plan)
    return history


def test_nothing_changes_a_plan_no_guard_objects_to():
    plan = guard(scale_plan(4, 6))
    assert target(plan) == 6 and notes(plan) == []
    assert plan.policy == "test" and plan.app == "app"


# ---------------------------------------------------------------------------------------------
# Executor range


def test_a_target_above_max_executors_is_clamped_with_the_reason():
    plan = guard(scale_plan(4, 20))
    assert target(plan) == 8
    assert "clamped from 20 to max_executors = 8" in plan.actions[0].reason
    assert notes(plan) == ["guard executor range: scale_executors 4 -> 20 clamped from 20 to max_executors = 8"]


def test_a_target_below_min_executors_is_clamped_and_may_leave_nothing_to_do():
    app = AppConfig(name="app", min_executors=2, initial_executors=2, max_executors=8)
    assert target(guard(scale_plan(4, 1), app=app)) == 2
    plan = guard(scale_plan(2, 0), executors=2, app=app)
    assert plan.actions == ()
    assert "(no change left)" in notes(plan)[0]


def test_an_app_outside_its_range_is_brought_back():
    plan = guard(Plan("test", "app"), executors=10)
    assert (plan.actions[0].from_, plan.actions[0].to) == (10, 8)
    assert "outside [1, 8]" in notes(plan)[0]


# ---------------------------------------------------------------------------------------------
# Scale-down delay


DELAY = GuardsConfig(scale_down_delay_s=60, max_scale_up_factor=100, max_scale_down_factor=100)


def test_scale_down_is_held_until_the_need_has_lasted_the_delay():
    plan = guard(scale_plan(4, 2), guards=DELAY)
    assert plan.actions == ()
    assert "held: fewer executors have been recommended for 0 s of the 60 s required" in notes(plan)[0]
    plan = guard(scale_plan(4, 2), history=recommendations((30, 2), (10, 2)), guards=DELAY)
    assert plan.actions == () and "for 30 s of the 60 s" in notes(plan)[0]


def test_a_delay_short_only_by_the_cycles_timing_jitter_is_done():
    plan = guard(scale_plan(4, 2), history=recommendations((59.997, 2), (30, 2)), guards=DELAY)
    assert target(plan) == 2 and notes(plan) == []  # 3 ms short: the snapshot times' jitter
    plan = guard(scale_plan(4, 2), history=recommendations((59.4, 2), (30, 2)), guards=DELAY)
    assert plan.actions == () and "for 59.4 s of the 60 s" in notes(plan)[0]  # 0.6 s short: held
    short = GuardsConfig(scale_down_delay_s=2, max_scale_up_factor=100, max_scale_down_factor=100)
    held = guard(scale_plan(4, 2), history=recommendations((1.8, 2),), guards=short)
    assert held.actions == ()  # a short delay's slack is 5 % of it (0.1 s), not half a second


def test_scale_down_after_the_delay_goes_to_the_largest_recommendation_seen():
    history = recommendations((90, 1), (60, 3), (30, 2))
    plan = guard(scale_plan(4, 1), history=history, guards=DELAY)
    assert target(plan) == 3  # the recommendations of the last 60 s: 3, 2 and now 1
    assert "raised to 3, the largest recommendation of the last 60 s" in notes(plan)[0]


def test_a_recommendation_to_stay_or_grow_within_the_delay_restarts_it():
    history = recommendations((90, 2), (40, 4), (20, 2))
    assert guard(scale_plan(4, 2), history=history, guards=DELAY).actions == ()


def test_scale_up_is_not_delayed_and_each_plan_records_its_recommendation():
    plan = guard(scale_plan(4, 6), guards=DELAY)
    assert target(plan) == 6
    assert plan.observation.recommended_executors == 6
    held = guard(scale_plan(4, 20), guards=DELAY)
    assert held.observation.recommended_executors == 8  # the clamped target
    assert guard(Plan("test", "app"), guards=DELAY).observation.recommended_executors == 4


def test_the_recommendations_recorded_by_the_guards_feed_the_delay():
    history = DecisionHistory.empty()
    results = []
    for age in (60, 30, 0):
        plan = apply_guards(scale_plan(4, 2), GuardInput(snap(taken_at=NOW - age), history, APP), DELAY, LOOP_OFF)
        history = history.with_decision(NOW - age, plan)
        results.append(target(plan))
    assert results == [None, None, 2]


# ---------------------------------------------------------------------------------------------
# Step cap


@pytest.mark.parametrize(("from_", "to", "capped"), [
    (2, 7, 4),  # x2
    (3, 8, 6),
    (1, 5, 2),
    (0, 3, 1),  # at least +1
    (8, 1, 4),  # /2
    (5, 1, 3),  # ceil(5 / 2)
    (1, 0, 0),  # at least -1
    (4, 3, 3),  # within the cap
])
def test_each_step_is_capped(from_, to, capped):
    app = AppConfig(name="app", min_executors=0, initial_executors=0, max_executors=8)
    guards = GuardsConfig(scale_down_delay_s=0, max_scale_up_factor=2, max_scale_down_factor=2)
    plan = guard(scale_plan(from_, to), executors=from_, app=app, guards=guards)
    assert target(plan) == capped
    assert bool(notes(plan)) is (capped != to)


# ---------------------------------------------------------------------------------------------
# Cooldown and migration


def changes_at(age: float) -> DecisionHistory:
    return DecisionHistory.empty().with_decision(NOW - age, scale_plan(2, 4))


def test_the_cooldown_holds_a_reversal_but_not_a_scale_up_short_of_its_target_and_warnings_pass():
    loop = LoopConfig(cooldown_s=60, stabilization_s=0)
    # The last action (30 s ago) scaled 2 -> 4; a scale-down now would reverse it.
    plan = guard(scale_plan(4, 3, Action.warn("look")), history=changes_at(30), loop=loop)
    assert [a.type for a in plan.actions] == ["warn"]
    assert ("cooldown (last action 30 s ago, cooldown 60 s): dropped scale_executors 4 -> 3 (a reversal)"
            in notes(plan)[0])
    # A further scale-up goes on: the target is not reached yet.
    assert target(guard(scale_plan(4, 6), history=changes_at(30), loop=loop)) == 6
    # Other changes (a migration) are still held within the cooldown.
    migration = Plan("test", "app", actions=(Action.set_parallelism("agg", 4, 8, "more"),))
    assert guard(migration, history=changes_at(30), loop=loop).actions == ()
    assert target(guard(scale_plan(4, 3), history=changes_at(60), loop=loop)) == 3


def test_cooldown_counts_from_the_last_plan_with_a_change_or_the_given_time():
    loop = LoopConfig(cooldown_s=60, stabilization_s=0)
    history = changes_at(100).with_decision(NOW - 10, Plan("test", "app"))  # the latest changed nothing
    assert target(guard(scale_plan(4, 3), history=history, loop=loop)) == 3
    # The given time and direction win over the history's.
    assert guard(scale_plan(4, 3), history=history, loop=loop, last_action_at=NOW - 15).actions == ()
    down = replace(history, last_action_direction=-1)
    assert target(guard(scale_plan(4, 3), history=down, loop=loop, last_action_at=NOW - 15)) == 3


def test_no_decision_on_a_window_that_began_before_the_last_change_was_done():
    # The window is 10 s: a change done 4 s ago leaves a mixed window; 10 s ago, a clean one.
    plan = guard(scale_plan(4, 6), last_action_at=NOW - 4)
    assert plan.actions == () and "settle (the window began 6 s before the last change" in notes(plan)[0]
    assert target(guard(scale_plan(4, 6), last_action_at=NOW - 10)) == 6


def test_executors_still_starting_are_counted_as_there():
    # 4 registered, 6 asked for: asking for 6 again, or fewer, waits; asking for more goes on.
    starting = replace(DecisionHistory.empty(), requested_executors=6)
    plan = guard(scale_plan(4, 6), history=starting)
    assert plan.actions == () and "2 of the 6 executors asked for are still starting" in notes(plan)[0]
    assert guard(scale_plan(4, 5), history=starting).actions == ()
    assert target(guard(scale_plan(4, 8), history=starting)) == 8
    # All registered: nothing held.
    assert target(guard(scale_plan(4, 6), history=replace(starting, requested_executors=4))) == 6


def test_no_change_while_an_action_is_still_being_carried_out():
    busy = replace(DecisionHistory.empty(), action_in_progress="scale_executors 2 -> 4")
    plan = guard(scale_plan(4, 6, Action.warn("look")), history=busy)
    assert [a.type for a in plan.actions] == ["warn"]
    assert "in progress (scale_executors 2 -> 4 is still being carried out)" in notes(plan)[0]


def test_by_default_a_scale_up_goes_straight_to_its_target_and_a_scale_down_is_halved_at_most():
    defaults = GuardsConfig(scale_down_delay_s=0)
    assert target(guard(scale_plan(1, 8), executors=1, guards=defaults)) == 8
    assert target(guard(scale_plan(8, 1), executors=8, guards=defaults)) == 4


def test_no_change_while_a_migration_runs_or_stabilises():
    loop = LoopConfig(cooldown_s=0, stabilization_s=60)
    plan = guard(scale_plan(4, 6), loop=loop, migration_running=True)
    assert plan.actions == () and "a migration is running" in notes(plan)[0]
    plan = guard(Plan("test", "app", actions=(Action.set_parallelism("agg", 4, 8, "more"),)), loop=loop,
                 last_migration_end=NOW - 20)
    assert plan.actions == () and "ended 20 s ago, stabilisation 60 s" in notes(plan)[0]
    assert target(guard(scale_plan(4, 6), loop=loop, last_migration_end=NOW - 60)) == 6


# ---------------------------------------------------------------------------------------------
# Observations


def test_observations_round_trip_and_merge():
    plan = Plan("p", "a", explanation=("why",), observation=Observation(query="q", figures={"backlog": 3}))
    assert Observation.from_dict(plan.observation.to_dict()) == plan.observation
    merged = plan.with_actions((), (), figures={"backlog": 5, "x": None})
    assert merged.explanation == ("why",) and len(merged.observation.figures) == 2
    assert merged.observation.to_dict() == {"query": "q", "figures": {"backlog": 5, "x": None}}
    with pytest.raises(ValueError, match=r"^observation: expected an object"):
        Observation.from_dict(["not", "an", "object"])  # type: ignore[arg-type]
    assert Plan("p", "a").observation == Observation() and Observation.from_dict(None) == Observation()


def test_recent_observations_are_consecutive_and_oldest_first():
    history = DecisionHistory.empty()
    for t, obs in [(1, {"figures": {"k": 1}}), (2, {}), (3, {"figures": {"k": 3}}),
                   (4, {"figures": {"k": 4}, "query": "other"}), (5, {"figures": {"k": 5}})]:
        history = history.with_decision(t, Plan("p", "a", observation=Observation.from_dict(obs)))
    assert history.recent_figures("k", 5) == ((3, 3), (4, 4), (5, 5))  # stops at the gap at t=2
    assert history.recent_figures("k", 5, query="q") == ((3, 3), (5, 5))
    assert history.recent_figures("k", 1) == ((5, 5),)


def test_an_app_under_sparks_dynamic_allocation_gets_no_executor_changes():
    app = AppConfig.model_validate({**APP.model_dump(), "dynamic_allocation": {"enabled": True}})
    guarded = guard(scale_plan(4, 6, Action.warn("hot")), app=app)
    assert [a.type for a in guarded.actions] == ["warn"]
    assert any(line.startswith("guard dynamic allocation") for line in notes(guarded))
