"""The spread rule (E-Storm's replica-aware placement on Spark): a stateful app's executors over the
standalone workers, at most ceil(n / w) on each; one replace_executor off the most crowded worker
when another has room, held after a move that changed nothing; and its place in planner.decide."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from sparkscale.config import AppConfig, Config, GuardsConfig
from sparkscale.model.plan import Action, Plan
from sparkscale.model.snapshot import Snapshot
from sparkscale.policies.guards import GuardInput
from sparkscale.policies.history import DecisionHistory
from sparkscale.policies.planner import decide, decide_app
from sparkscale.policies.spread import SPREAD_DIAGNOSIS, last_move, spread_moves, stateful_queries
from tests.unit.test_snapshot_merge import query_snapshot

NOW = 5000.0
APP = AppConfig(name="app", min_executors=1, max_executors=8)
GUARDS = GuardsConfig()
CORES = 8  # each worker's; an executor takes one


def cluster(*workers: tuple[str, list[str]] | tuple[str, list[str], int], **extra: Any) -> dict[str, Any]:
    """extensions["cluster"]: (worker id, its executors of the app[, free cores: else what they leave of
    8]); 8 GB free each."""
    rows = [{"id": w[0], "host": f"127.0.0.{k + 2}", "cores_free": w[2] if len(w) > 2 else CORES - len(w[1]),
             "memory_free_mb": 8192, "executors": list(w[1])} for k, w in enumerate(workers)]
    return {"app_id": "app-1", "workers": rows, "unreachable": [], "executor_memory_mb": 512, **extra}


def snap(placement: dict[str, Any] | None, executors: list[str] | None = None, stateful: bool = True,
         requested: int | None = None) -> Snapshot:
    ids = executors if executors is not None else [e for w in (placement or {}).get("workers", ())
                                                   for e in w["executors"]]
    extensions: dict[str, Any] = {"query": {"state_partitions": 4 if stateful else None}}
    if placement is not None:
        extensions["cluster"] = placement
    if requested is not None:
        extensions["app"] = {"requested_executors": requested}
    return Snapshot.from_dict({
        "version": 1, "app": "app", "query": "q", "taken_at": NOW, "window_s": 30.0,
        "executors": [{"id": e, "host": "h", "cores": 1} for e in ids],
        "operators": [{"id": "source", "source": True, "parallelism": 1, "arrival_rate": 1.0, "instances": []}],
        "edges": [], "extensions": extensions,
    })


def spread(snapshot: Snapshot, plan: Plan | None = None, history: DecisionHistory | None = None,
           guards: GuardsConfig = GUARDS) -> Plan:
    given = GuardInput(snapshot, history if history is not None else DecisionHistory.empty(), APP)
    return spread_moves(plan or Plan("test", "app"), given, guards)


def moves(plan: Plan) -> list[Action]:
    return [a for a in plan.actions if a.type == "replace_executor"]


def notes(plan: Plan) -> list[str]:
    return [line for line in plan.explanation if line.startswith("spread")]


def test_a_balanced_app_is_left_alone():
    for placement in (cluster(("A", ["1", "2"]), ("B", ["3"])), cluster(("A", ["1"]), ("B", ["2"])),
                      cluster(("A", ["1"]))):
        plan = spread(snap(placement))
        assert plan.actions == () and notes(plan) == [], placement


def test_three_executors_on_one_worker_and_none_on_another_with_room_move_one_off():
    plan = spread(snap(cluster(("A", ["1", "2", "3"]), ("B", []))))
    (move,) = moves(plan)
    assert move.executor == "3"  # the newest on the crowded worker
    assert move.reason.startswith("spread: worker A (127.0.0.2) holds 3 of the app's 3 executors, above "
                                  "ceil(3/2) = 2 per worker, while B (127.0.0.3) holds 0 and has room")
    assert ("would lose 3/3 = 100% of the executors and about that share of the state partitions, reloaded from "
            "the checkpoint") in move.reason
    assert "target at most 2 per worker" in move.reason
    assert "a replacement is asked for first and the master picks its worker" in move.reason
    assert "most free cores, B here" in move.reason and "then executor 3 is decommissioned" in move.reason
    assert notes(plan) == ["spread: A 3, B 0 (3 executors over 2 workers, at most 2 each): move executor 3 off A"]
    assert plan.observation.diagnosis == SPREAD_DIAGNOSIS
    assert plan.observation.figures == {"spread_executors": 3, "spread_workers": 2, "spread_excess": 1,
                                        "spread_at_risk": 1.0}


def test_the_newest_executor_is_the_highest_number_not_the_last_string():
    (move,) = moves(spread(snap(cluster(("A", ["2", "9", "10"]), ("B", ["1"]), ("C", [])))))
    assert move.executor == "10"


def test_a_worker_above_the_cap_moves_even_when_none_is_below_the_floor():
    # 5 over 3 workers: at most 2 each. 3-1-1 leaves 60 % on A where 2-2-1 (40 %) is possible.
    (move,) = moves(spread(snap(cluster(("A", ["1", "2", "5"]), ("B", ["3"]), ("C", ["4"])))))
    assert move.executor == "5" and "3/5 = 60%" in move.reason


def test_no_room_elsewhere_means_nothing_to_do():
    assert spread(snap(cluster(("A", ["1", "2", "3"]), ("B", [], 0)))).actions == ()  # no free core
    full = cluster(("A", ["1", "2", "3"]), ("B", []))
    full["workers"][1]["memory_free_mb"] = 256  # a core, but not the executor's 512 MB
    assert spread(snap(full)).actions == ()
    # A worker below the cap that holds executors but has no room: said, not moved.
    plan = spread(snap(cluster(("A", ["1", "2", "3", "4"]), ("B", ["5"], 0), ("C", ["6"], 0))))
    assert plan.actions == () and "no worker below 2 has room" in notes(plan)[0]


def test_a_plan_that_changes_executors_or_partitions_gets_no_move():
    placement = snap(cluster(("A", ["1", "2", "3"]), ("B", [])))
    for change in (Action.scale_executors(3, 4, "policy"), Action.set_parallelism("stage0", 4, 8, "policy")):
        plan = spread(placement, Plan("test", "app", actions=(change,)))
        assert plan.actions == (change,)
        assert "not moved: this cycle's plan changes" in notes(plan)[0]


def test_a_stateless_app_or_the_rule_turned_off_gets_nothing():
    crowded = cluster(("A", ["1", "2", "3"]), ("B", []))
    assert spread(snap(crowded, stateful=False)) == Plan("test", "app")
    assert spread(snap(crowded), guards=GuardsConfig(spread_executors=False)) == Plan("test", "app")
    assert spread(snap(None, ["1", "2"])) == Plan("test", "app")  # no cluster view taken


def test_stateful_queries_from_the_agent_or_the_progress():
    assert stateful_queries(snap(None, ["1"])) == ("q",)
    assert stateful_queries(snap(None, ["1"], stateful=False)) == ()
    by_progress = Snapshot.from_dict({**snap(None, ["1"], stateful=False).to_dict(),
                                      "extensions": {"progress": {"state_partitions": 2}}})
    assert stateful_queries(by_progress) == ("q",)


def test_an_incomplete_view_is_not_judged():
    cases = {
        "did not answer": cluster(("A", ["1", "2"]), unreachable=["B"]),
        "no cluster view (master down)": {"app_id": "app-1", "error": "master down"},
        "executor(s) 3 run on no ALIVE worker": cluster(("A", ["1", "2"]), ("B", [])),
    }
    for why, placement in cases.items():
        plan = spread(snap(placement, ["1", "2", "3"]))
        assert plan.actions == () and why in notes(plan)[0], (why, notes(plan))


def test_no_move_while_asked_for_executors_are_still_starting():
    # A replace restores the registered count: it would cancel the executors still starting.
    plan = spread(snap(cluster(("A", ["1", "2", "3"]), ("B", [])), requested=4))
    assert plan.actions == () and "1 of the 4 executors asked for are still starting" in notes(plan)[0]


def moved_at(at: float, snapshot: Snapshot) -> DecisionHistory:
    """A history whose decision at `at` made the spread move on `snapshot`."""
    return DecisionHistory.empty().with_decision(at, spread(snapshot))


def test_after_a_move_that_changed_nothing_further_moves_are_held():
    crowded = snap(cluster(("A", ["1", "2", "3"]), ("B", [])))
    history = moved_at(NOW - 100, crowded)
    assert last_move(history, NOW - 600) is not None
    # The master put the replacement (4) on A again: the same counts.
    again = snap(cluster(("A", ["1", "2", "4"]), ("B", [])))
    plan = spread(again, history=history)
    assert plan.actions == ()
    assert "held: the move 100 s ago left the counts as they were" in notes(plan)[0]
    assert "next try 600 s after it (guards.spread_hold_s)" in notes(plan)[0]
    # After the hold, one more try.
    (move,) = moves(spread(again, history=history, guards=GuardsConfig(spread_hold_s=60)))
    assert move.executor == "4"


def test_a_move_that_helped_does_not_hold_the_next():
    history = moved_at(NOW - 100, snap(cluster(("A", ["1", "2", "3", "4"]), ("B", []), ("C", []))))
    # 4-0-0 (2 above the cap of 2) became 3-1-0: one above the cap, one more move.
    (move,) = moves(spread(snap(cluster(("A", ["1", "2", "3"]), ("B", ["5"]), ("C", []))), history=history))
    assert move.executor == "3"
    # A worker that came back makes another count: not the same spread either.
    assert moves(spread(snap(cluster(("A", ["1", "2", "3", "4"]), ("B", []), ("C", []), ("D", []))),
                        history=history))


def test_a_move_the_guards_dropped_is_no_move():
    crowded = snap(cluster(("A", ["1", "2", "3"]), ("B", [])))
    dropped = spread(crowded)
    dropped = replace(dropped, actions=())  # recorded the figures, but nothing was carried out
    assert last_move(DecisionHistory.empty().with_decision(NOW - 10, dropped), 0) is None


# ---------------------------------------------------------------------------------------------
# planner.decide


def stateful_snapshot(query: str = "q", stateful: bool = True, arrival: float = 200.0, **extensions: Any) -> Snapshot:
    """DS2 keeps 3 executors (200 rec/s at 100 rec/s per core, target utilisation 0.8: 2.5 cores)."""
    data = query_snapshot(query, arrival=arrival, stage_rate=100.0, partitions=6, executors=3,
                          **extensions).to_dict()
    data["extensions"]["query"] = {"state_partitions": 6 if stateful else None}
    return Snapshot.from_dict(data)


def test_planner_decide_shows_the_move_with_its_reason():
    config = Config()
    app = AppConfig(name="app", min_executors=1, max_executors=8, shuffle_partitions=6)
    snapshot = stateful_snapshot(cluster=cluster(("A", ["1", "2", "3"]), ("B", [])))
    plan = decide(snapshot, DecisionHistory.empty(), config, app)
    assert plan.policy == "ds2"
    (move,) = plan.actions
    assert move.type == "replace_executor" and move.executor == "3" and move.reason.startswith("spread: worker A")
    assert "replace_executor  3" in plan.to_table() and any(line.startswith("spread: A 3, B 0")
                                                            for line in plan.explanation)
    # The guards hold it while an action is in progress (the rule does not check that itself).
    busy = replace(DecisionHistory.empty(), action_in_progress="scale_executors 2 -> 3")
    held = decide(snapshot, busy, config, app)
    assert held.actions == () and any(line.startswith("guard in progress") and "replace_executor 3" in line
                                      for line in held.explanation)
    # ... and in the cooldown after the last action (40 s ago: the window began after it).
    cooled = decide(snapshot, replace(DecisionHistory.empty(), last_action_at=snapshot.taken_at - 40), config, app)
    assert cooled.actions == () and any(line.startswith("guard cooldown") and "replace_executor 3" in line
                                        for line in cooled.explanation)


@pytest.mark.parametrize("stateful", [True, False])
def test_an_app_of_several_queries_is_stateful_when_one_query_is(stateful):
    placement = cluster(("A", ["1", "2", "3"]), ("B", []))
    # 100 rec/s each: 2 cores together, 2.5 at 0.8: DS2 keeps the 3 executors.
    snapshots = [stateful_snapshot("a", stateful=stateful, arrival=100.0, cluster=placement),
                 stateful_snapshot("b", stateful=False, arrival=100.0, cluster=placement)]
    app = AppConfig(name="app", min_executors=1, max_executors=8, shuffle_partitions=6)
    plan = decide_app(snapshots, DecisionHistory.empty(), Config(), app)
    assert [a.type for a in plan.actions if a.type == "replace_executor"] == (["replace_executor"] if stateful
                                                                              else [])
    assert plan.changes == tuple(moves(plan))
