"""The cluster placement plan in the loop: each app's part added to its own plan (a move as a
replace_executor, an EDRP count as its executor target), and the daemon's cluster planner (one
plan per interval for every led app, the cores other apps still wait for)."""

from __future__ import annotations

from dataclasses import replace

from sparkscale.config import AppConfig, Config
from sparkscale.daemon.cluster_planner import ClusterPlanner
from sparkscale.model.plan import Action, Plan
from sparkscale.policies.guards import GuardInput
from sparkscale.policies.history import DecisionHistory
from sparkscale.policies.placement.apply import PLACEMENT_DIAGNOSIS, placement_actions
from sparkscale.policies.placement.model import CountChange, ExecutorKey, Move, PlacementPlan
from tests.unit.test_placement_build import slots, snap

APP = AppConfig(name="a", min_executors=1, max_executors=4, executor_cores=2, executor_memory_mb=1024)
WA, WB = slots(["1", "2"], [], ["7"], [])
BUSY = [{"id": "1", "cores": 2, "task_time_fraction": 1.0}, {"id": "2", "cores": 2, "task_time_fraction": 1.0}]


def given(requested: int | None = None) -> GuardInput:
    s = snap("a", BUSY, WA)
    if requested is not None:
        s = replace(s, extensions={**s.extensions, "app": {"requested_executors": requested}})
    return GuardInput(s, DecisionHistory.empty(), APP)


MOVE = PlacementPlan("otd", moves=(Move(ExecutorKey("a", "2"), "w1", "w2", 0.0, "case 1: w1 busy"),),
                     figures={"worker_load_imbalance": 2.0}, reason="case 1")


def test_this_apps_move_becomes_a_replace_executor_with_the_policys_reason():
    plan = placement_actions(Plan("ds2", "a"), given(), MOVE)
    assert [(a.type, a.executor, a.reason) for a in plan.actions] == [("replace_executor", "2", "case 1: w1 busy")]
    assert plan.observation.diagnosis == PLACEMENT_DIAGNOSIS and plan.observation.figure("worker_load_imbalance") == 2
    other = PlacementPlan("otd", moves=(Move(ExecutorKey("b", "7"), "w1", "w2", 0.0, "x"),))
    assert placement_actions(Plan("ds2", "a"), given(), other).actions == ()
    assert placement_actions(Plan("ds2", "a"), given(), None) == Plan("ds2", "a")


def test_a_move_waits_for_the_plans_own_change_and_for_starting_executors():
    scaling = Plan("ds2", "a", actions=(Action.scale_executors(2, 3, "more"),))
    held = placement_actions(scaling, given(), MOVE)
    assert [a.type for a in held.actions] == ["scale_executors"] and "not moved" in held.explanation[-1]
    starting = placement_actions(Plan("ds2", "a"), given(requested=3), MOVE)
    assert starting.actions == () and "still starting" in starting.explanation[-1]


def test_an_edrp_count_replaces_the_scaling_policys_target():
    counts = PlacementPlan("edrp", counts=(CountChange("a", 2, 3, reason="R over its bound"),))
    plan = placement_actions(Plan("ds2", "a", actions=(Action.scale_executors(2, 4, "ds2 wants 4"),)), given(), counts)
    assert [(a.from_, a.to) for a in plan.actions] == [(2, 3)] and "edrp" in plan.actions[0].reason
    same = PlacementPlan("edrp", counts=(CountChange("a", 2, 2),))
    assert placement_actions(Plan("ds2", "a"), given(), same) == Plan("ds2", "a")


def test_an_edrp_scale_in_names_the_executors_its_solution_removes():
    # EDRP empties worker w1 of executor 1: the agent alone would take the newest, 2
    counts = PlacementPlan("edrp", counts=(CountChange("a", 2, 1, remove=(ExecutorKey("a", "1"),)),))
    plan = placement_actions(Plan("ds2", "a"), given(), counts)
    assert [(a.from_, a.to, a.executors) for a in plan.actions] == [(2, 1, ("1",))]
    assert "decommission 1" in plan.actions[0].summary()
    # planned from other executors than the app has now: the count stands, the agent chooses
    stale = PlacementPlan("edrp", counts=(CountChange("a", 2, 1, remove=(ExecutorKey("a", "9"),)),))
    assert [(a.to, a.executors) for a in placement_actions(Plan("ds2", "a"), given(), stale).actions] == [(1, ())]
    older = PlacementPlan("edrp", counts=(CountChange("a", 3, 1, remove=(ExecutorKey("a", "1"),) * 2),))
    assert placement_actions(Plan("ds2", "a"), given(), older).actions[0].executors == ()


def test_an_app_edrp_sizes_keeps_its_count_against_the_scaling_policy():
    ds2 = Plan("ds2", "a", actions=(Action.scale_executors(2, 1, "ds2 wants 1"),))
    kept = placement_actions(ds2, given(), PlacementPlan("edrp", sized=("a",)))
    assert kept.actions == () and "keeps 2 executors" in kept.explanation[-1]
    # an app the plan does not size (no measured rate) is sized by its scaling policy
    assert placement_actions(ds2, given(), PlacementPlan("edrp", sized=("b",))).actions == ds2.actions


def cfg(name: str = "otd", every: int = 1) -> Config:
    return Config.model_validate({"apps": [APP.model_dump(), {"name": "b"}], "loop": {"interval_s": 10.0},
                                  "placement": {"name": name, "every_cycles": every, "otd": {"high_load": 0.6}}})


def test_the_cluster_planner_plans_once_per_interval_for_the_led_apps():
    planner = ClusterPlanner(cfg(every=3))
    a, b = snap("a", BUSY, WA), snap("b", [{"id": "7", "cores": 1, "task_time_fraction": 1.0}], WB)
    planner.observe(APP, a, [a])
    planner.observe(AppConfig(name="b"), b, [b])
    first = planner.plan(a.taken_at)
    assert first is not None and [str(m.key) for m in first.moves] in (["a/1"], ["a/2"], ["b/7"])
    planner.observe(APP, a, None)  # no longer led here: out of the next plan, but the plan stands until due
    assert planner.plan(a.taken_at + 29) is first
    again = planner.plan(a.taken_at + 30)
    assert again is not first and all(m.key.app == "b" for m in again.moves)
    assert planner.plan(a.taken_at + 1000) is None  # every snapshot older than two windows: nothing to plan
    assert ClusterPlanner(cfg("spark-default")).plan(a.taken_at) is None


def test_the_cores_other_apps_still_wait_for_are_claimed():
    planner = ClusterPlanner(cfg())
    waiting = replace(snap("a", BUSY, WA), extensions={**snap("a", BUSY, WA).extensions,
                                                        "app": {"requested_executors": 4}})
    planner.observe(APP, waiting, None)  # 2 of 4 executors of 2 cores still starting: 4 cores
    assert planner.claimed_elsewhere("b") == 4 and planner.claimed_elsewhere("a") == 0
    planner.forget("a")
    assert planner.claimed_elsewhere("b") == 0


def test_one_round_otd_moves_one_executor_of_one_app_through_its_own_decision():
    from sparkscale.policies.planner import decide_app

    config = cfg()
    planner = ClusterPlanner(config)
    # no record processed: DS2 has no rate to size from and changes nothing, so each app's plan is its move
    a, b = snap("a", BUSY, WA, records=0.0), snap("b", [{"id": "7", "cores": 1, "task_time_fraction": 1.0}], WB,
                                                  records=0.0)
    planner.observe(APP, a, [a])
    planner.observe(config.app("b"), b, [b])
    cluster = planner.plan(a.taken_at)
    assert cluster is not None and len(cluster.moves) == 1
    moved = cluster.moves[0].key
    plans = {name: decide_app([s], DecisionHistory.empty(), config, config.app(name), cluster=cluster)
             for name, s in (("a", a), ("b", b))}
    replaced = {name: [x.executor for x in p.actions if x.type == "replace_executor"] for name, p in plans.items()}
    assert replaced[moved.app] == [moved.id]  # the app whose executor moves carries the move
    assert all(not ids for name, ids in replaced.items() if name != moved.app)  # the other does nothing
