"""Plans: the plan JSON `sparkscale plan --json` prints, exactly, actions' keys per type, the text table; and the
decision history policies receive."""

from __future__ import annotations

import json

import pytest

from sparkscale.model.plan import Action, Plan
from sparkscale.policies.history import DecisionHistory

EXPECTED_PLAN = json.loads("""
{"policy": "ds2", "app": "wordcount",
 "parallelism": {"source": 2, "split": 4},
 "actions": [{"type": "set_parallelism", "operator": "split", "from": 2, "to": 4, "reason": "..."}],
 "explanation": ["..."]}
""")


def design_plan() -> Plan:
    return Plan("ds2", "wordcount", {"source": 2, "split": 4},
                [Action.set_parallelism("split", 2, 4, "...")], ["..."])


def test_to_dict_is_design_md_plan_json():
    out = design_plan().to_dict()
    assert out == EXPECTED_PLAN
    assert list(out) == ["policy", "app", "parallelism", "actions", "explanation"]
    assert list(out["actions"][0]) == ["type", "operator", "from", "to", "reason"]
    assert json.loads(json.dumps(out)) == EXPECTED_PLAN


def test_each_action_type_has_its_keys():
    assert Action.scale_executors(1, 3, "r").to_dict() == {"type": "scale_executors", "from": 1, "to": 3, "reason": "r"}
    assert Action.set_parallelism("agg", 4, 8, "r").to_dict() == {
        "type": "set_parallelism", "operator": "agg", "from": 4, "to": 8, "reason": "r"}
    assert Action.replace_executor("3", "slow").to_dict() == {
        "type": "replace_executor", "executor": "3", "reason": "slow"}
    assert Action.warn("no data").to_dict() == {"type": "warn", "reason": "no data"}
    assert Action.scale_executors(3, 1, "r", ["4", "2"]).to_dict() == {
        "type": "scale_executors", "from": 3, "to": 1, "executors": ["4", "2"], "reason": "r"}
    assert Action.warn("no data", operator="agg").to_dict() == {"type": "warn", "operator": "agg", "reason": "no data"}
    # Scaling down to zero executors is an action; zero partitions is not.
    assert Action.scale_executors(2, 0, "idle").to == 0


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"type": "resize"}, "unknown action type 'resize'"),
    ({"type": "scale_executors", "to": 2}, "needs from"),
    ({"type": "set_parallelism", "from_": 1, "to": 2}, "needs operator"),
    ({"type": "set_parallelism", "operator": "a", "from_": 1, "to": 0}, "set_parallelism.to: expected an integer >= 1"),
    ({"type": "scale_executors", "from_": 1, "to": 2.5}, "scale_executors.to: expected an integer >= 0"),
    ({"type": "replace_executor"}, "needs executor"),
    ({"type": "warn"}, "needs reason"),
    ({"type": "scale_executors", "from_": 3, "to": 1, "executors": ("4",)}, "must name the 2 distinct executors"),
    ({"type": "scale_executors", "from_": 3, "to": 1, "executors": ("4", "4")}, "must name the 2 distinct"),
    ({"type": "scale_executors", "from_": 1, "to": 2, "executors": ("4",)}, "must name the -1 distinct"),
    ({"type": "replace_executor", "executor": "3", "executors": ("3",)}, "must name"),
])
def test_invalid_actions_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Action(**kwargs)


def test_round_trip_through_dict():
    plan = Plan("ds2", "wordcount", {"source": 2, "split": 4}, [
        Action.warn("w", "split"), Action.scale_executors(1, 4, "up"), Action.set_parallelism("split", 2, 4, "pb"),
        Action.replace_executor("7", "slow"), Action.scale_executors(4, 3, "placement", ["2"]),
    ], ["a", "b"])
    assert Plan.from_dict(json.loads(json.dumps(plan.to_dict()))) == plan
    assert [a.type for a in plan.changes] == ["scale_executors", "set_parallelism", "replace_executor",
                                              "scale_executors"]
    assert [a.type for a in plan.warnings] == ["warn"]


def test_empty_plan():
    plan = Plan("ds2", "wordcount", {"source": 2})
    assert plan.to_dict() == {"policy": "ds2", "app": "wordcount", "parallelism": {"source": 2},
                              "actions": [], "explanation": []}
    assert "actions: none" in plan.to_table()


def test_to_table_is_readable():
    plan = Plan("ds2", "wordcount", {"source": 2, "split": 4},
                [Action.scale_executors(1, 4, "4 cores needed"),
                 Action.set_parallelism("split", 2, 4, "partition-bound")],
                ["split: pi = 4"])
    text = plan.to_table()
    lines = text.splitlines()
    assert lines[0] == "plan by ds2 for app wordcount"
    assert any(line.split() == ["split", "4"] for line in lines)
    assert any(line.split()[:4] == ["scale_executors", "1", "->", "4"] for line in lines)
    assert any(line.split()[:5] == ["set_parallelism", "split", "2", "->", "4"] and "partition-bound" in line
               for line in lines)
    assert lines[-2:] == ["explanation:", "  split: pi = 4"]


def test_plan_is_frozen():
    plan = design_plan()
    with pytest.raises(AttributeError):
        plan.app = "x"  # type: ignore[misc]
    assert isinstance(plan.actions, tuple) and isinstance(plan.explanation, tuple)


def test_decision_history():
    history = DecisionHistory.empty()
    assert len(history) == 0 and not history and history.last is None
    first, second = design_plan(), Plan("dhalion", "wordcount")
    history = history.with_decision(10.0, first).with_decision(20.0, second)
    assert len(history) == 2 and history.last is not None and history.last.plan is second
    assert [d.decided_at for d in history.since(15.0)] == [20.0]
    assert [d.plan for d in history.by_policy("ds2")] == [first]
    assert [d.decided_at for d in history] == [10.0, 20.0]
    with pytest.raises(ValueError, match="time order"):
        history.with_decision(5.0, first)
