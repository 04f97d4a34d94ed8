"""DS2 against worked examples computed by hand (each test's comments show the arithmetic).

Notation as in the lecture: λp = records_in / useful_time_s, λo = records_out / useful_time_s per
instance; o[λp], o[λo] their sums over an operator's instances; o* the optimal output rate;
π = ceil(target input / (u · o[λp] / p)) with p the measured instances.
"""

from __future__ import annotations

from typing import Any

import pytest

from sparkscale.config import AppConfig, PolicyConfig
from sparkscale.model.plan import Action, Plan
from sparkscale.model.snapshot import Snapshot
from sparkscale.policies.base import Policy, get_policy, register_policy, registered_policies
from sparkscale.policies.ds2 import Ds2Config, Ds2Policy
from sparkscale.policies.ds2_model import AdjacencyMatrix, estimate
from sparkscale.policies.history import DecisionHistory


def inst(records_in: float, records_out: float, useful_time_s: float, executor: str = "1") -> dict[str, Any]:
    return {"records_in": records_in, "records_out": records_out, "useful_time_s": useful_time_s, "executor": executor}


def op(op_id: str, parallelism: int = 1, instances: list[dict[str, Any]] | None = None, *,
       arrival: float | None = None, backlog: float = 0) -> dict[str, Any]:
    d: dict[str, Any] = {"id": op_id, "parallelism": parallelism, "instances": instances or []}
    if arrival is not None:
        d.update(source=True, arrival_rate=arrival, backlog=backlog)
    return d


def snapshot(operators: list[dict[str, Any]], edges: list[list[str]], executors: int = 1) -> Snapshot:
    return Snapshot.from_dict({
        "version": 1, "app": "app", "query": "q", "taken_at": 0.0, "window_s": 30.0,
        "executors": [{"id": str(k + 1), "host": "127.0.0.1", "cores": 1} for k in range(executors)],
        "operators": operators, "edges": edges,
    })


def decide(snap: Snapshot, u: float = 1.0, catch_up_s: float = 60.0, min_p: int = 1, max_p: int = 64,
           history: DecisionHistory | None = None, **app: Any) -> Plan:
    cfg = PolicyConfig(target_utilization=u,
                       ds2=Ds2Config(catch_up_s=catch_up_s, min_parallelism=min_p, max_parallelism=max_p))
    app_cfg = AppConfig(name="app", **{"max_executors": 64, **app})
    return Ds2Policy().decide(snap, history or DecisionHistory.empty(), cfg, app_cfg)


def lecture_ops(arrival: float = 40, backlog: float = 0) -> list[dict[str, Any]]:
    # The lecture's example: a 40 rec/s source; o1 processes 20 records in 2 s of useful time and
    # pushes 200; o2 processes 200 records in 1 s.
    return [
        op("src", 1, [inst(arrival, arrival, 1)], arrival=arrival, backlog=backlog),
        op("o1", 1, [inst(20, 200, 2)]),
        op("o2", 1, [inst(200, 0, 1)]),
    ]


LECTURE_EDGES = [["src", "o1"], ["o1", "o2"]]


def by_type(plan: Plan, kind: str) -> list[Action]:
    return [a for a in plan.actions if a.type == kind]


# ---------------------------------------------------------------------------------------------


def test_lecture_example_needs_4_and_2_instances():
    # o1: λp = 20/2 = 10, λo = 200/2 = 100, selectivity 10; target 40 -> π = ceil(40 / 10) = 4.
    # o1* = 40 · 10 = 400 rec/s; o2: λp = 200/1 = 200 -> π = ceil(400 / 200) = 2.
    # Cores = 4 + 2 = 6 -> 6 executors of 1 core (1 now); both operators are partition-bound.
    # Spark runs the stages one after another, each on at most its partitions' cores, with one
    # partition count per query: the query needs 6 partitions (a count with many divisors >= 6).
    plan = decide(snapshot(lecture_ops(), LECTURE_EDGES))
    assert plan.parallelism == {"src": 1, "o1": 4, "o2": 2}
    assert list(plan.parallelism) == ["src", "o1", "o2"]
    assert [a.to_dict() | {"reason": ""} for a in plan.actions] == [
        {"type": "scale_executors", "from": 1, "to": 6, "reason": ""},
        {"type": "set_parallelism", "operator": "o1", "from": 1, "to": 6, "reason": ""},
        {"type": "set_parallelism", "operator": "o2", "from": 1, "to": 6, "reason": ""},
    ]
    assert all(a.reason for a in plan.actions)


def test_lecture_example_figures():
    est = estimate(snapshot(lecture_ops(), LECTURE_EDGES))
    o1, o2 = est["o1"], est["o2"]
    assert (o1.true_processing_rate, o1.true_output_rate, o1.selectivity) == (10, 100, 10)
    assert (o1.target_input_rate, o1.optimal_output_rate, o1.optimal_parallelism) == (40, 400, 4)
    assert (o2.true_processing_rate, o2.target_input_rate, o2.optimal_parallelism) == (200, 400, 2)
    assert est.cores_needed == 6


def test_adjacency_matrix_is_in_topological_order():
    # Given out of order; topological order src(0), o1(1), o2(2): A[0][1] = A[1][2] = 1.
    snap = snapshot(list(reversed(lecture_ops())), list(reversed(LECTURE_EDGES)))
    matrix = AdjacencyMatrix.of(snap)
    assert matrix.order == ("src", "o1", "o2")
    assert matrix.dense() == [[0, 1, 0], [0, 0, 1], [0, 0, 0]]
    assert matrix[0, 1] == 1 and matrix[1, 0] == 0


def test_operators_out_of_topological_order_give_the_same_plan():
    in_order = decide(snapshot(lecture_ops(), LECTURE_EDGES))
    shuffled = decide(snapshot([lecture_ops()[2], lecture_ops()[0], lecture_ops()[1]], list(reversed(LECTURE_EDGES))))
    assert shuffled.parallelism == in_order.parallelism == {"src": 1, "o1": 4, "o2": 2}
    assert list(shuffled.parallelism) == ["src", "o1", "o2"]
    assert shuffled.actions == in_order.actions


def test_fan_in_sums_the_upstream_optimal_outputs():
    # s (100 rec/s, selectivity 1) feeds a and b, which both feed j.
    # a: 2 instances, each 100 in / 100 out in 2 s -> λp 50 each, o[λp] 100, mean 50, sel 1.
    #    target 100 -> π = ceil(100 / 50) = 2; a* = 100.
    # b: 1 instance, 300 in / 150 out in 1 s -> λp 300, sel 0.5. target 100 -> π = ceil(100/300) = 1; b* = 50.
    # j: instances 400/400 in 2 s (λp 200) and 200/200 in 2 s (λp 100): o[λp] 300, mean 150.
    #    target = a* + b* = 150 -> π = ceil(150 / 150) = 1 exactly.
    snap = snapshot(
        [op("s", 2, [inst(1000, 1000, 1)], arrival=100),
         op("a", 2, [inst(100, 100, 2), inst(100, 100, 2)]),
         op("b", 1, [inst(300, 150, 1)]),
         op("j", 2, [inst(400, 400, 2), inst(200, 200, 2)])],
        [["s", "a"], ["s", "b"], ["a", "j"], ["b", "j"]],
    )
    est = estimate(snap)
    assert est["j"].target_input_rate == 150
    plan = decide(snap)
    assert plan.parallelism == {"s": 2, "a": 2, "b": 1, "j": 1}
    # Cores 2 + 1 + 1 = 4 -> 4 executors; every operator has partitions >= π.
    assert [a.summary() for a in plan.actions] == ["scale_executors 1 -> 4"]


def test_several_sources():
    # s1: 30 rec/s, selectivity 1 -> 30. s2: 50 rec/s, instance 10 in / 20 out -> selectivity 2 -> s2* = 100.
    # m: 100 in / 50 out in 1 s -> λp 100, sel 0.5; target 130 -> π = ceil(130/100) = 2; m* = 65.
    # k: 50 in in 1 s -> λp 50; target 65 -> π = ceil(65/50) = 2.
    # Cores: the stages share them in time, ceil(130/100 + 65/50) = ceil(2.6) = 3 (Σ π would say 4).
    snap = snapshot(
        [op("s1", 1, [inst(30, 30, 1)], arrival=30),
         op("s2", 3, [inst(10, 20, 1)], arrival=50),
         op("m", 1, [inst(100, 50, 1)]),
         op("k", 4, [inst(50, 0, 1)])],
        [["s1", "m"], ["s2", "m"], ["m", "k"]],
        executors=4,
    )
    est = estimate(snap)
    assert est["s2"].optimal_output_rate == 100
    assert est["m"].target_input_rate == 130
    assert est["m"].optimal_output_rate == 65
    plan = decide(snap)
    assert plan.parallelism == {"s1": 1, "s2": 3, "m": 2, "k": 2}
    # The query needs 3 cores in all: m is repartitioned to 4, the first count >= 3 with many divisors.
    assert [a.summary() for a in plan.actions] == ["scale_executors 4 -> 3", "set_parallelism m 1 -> 4"]


def test_scale_down():
    # Arrival 10 rec/s. o1: 4 instances, each 5 in / 50 out in 0.5 s -> λp 10, λo 100 each;
    # o[λp] 40, mean 10, sel 10; target 10 -> π = 1; o1* = 100.
    # o2: 2 instances each 50 in 0.25 s -> λp 200 each, mean 200; π = ceil(100/200) = 1.
    # Cores 2 -> 2 executors (6 now). Partitions 4 and 2 are above π: no repartition.
    snap = snapshot(
        [op("src", 1, [inst(10, 10, 1)], arrival=10),
         op("o1", 4, [inst(5, 50, 0.5)] * 4),
         op("o2", 2, [inst(50, 0, 0.25)] * 2)],
        LECTURE_EDGES, executors=6,
    )
    plan = decide(snap)
    assert plan.parallelism == {"src": 1, "o1": 1, "o2": 1}
    assert [a.to_dict()["type"] for a in plan.actions] == ["scale_executors"]
    assert (plan.actions[0].from_, plan.actions[0].to) == (6, 2)
    assert "scale down" in plan.actions[0].reason


def test_no_action_when_nothing_changes():
    # Already at the lecture's optimum: o1 4 instances of λp 10, o2 2 instances of λp 200, 6 executors.
    snap = snapshot(
        [op("src", 1, [inst(40, 40, 1)], arrival=40),
         op("o1", 4, [inst(5, 50, 0.5)] * 4),
         op("o2", 2, [inst(50, 0, 0.25)] * 2)],
        LECTURE_EDGES, executors=6,
    )
    plan = decide(snap)
    assert plan.parallelism == {"src": 1, "o1": 4, "o2": 2}
    assert plan.actions == ()
    assert plan.to_dict()["actions"] == []


def test_target_utilisation_half_doubles_pi():
    # u = 0.5: o1 π = ceil(40 / (0.5 · 10)) = 8; o2 π = ceil(400 / (0.5 · 200)) = 4. Cores 12.
    plan = decide(snapshot(lecture_ops(), LECTURE_EDGES), u=0.5)
    assert plan.parallelism == {"src": 1, "o1": 8, "o2": 4}
    assert by_type(plan, "scale_executors")[0].to == 12


def test_default_target_utilisation_rounds_up():
    # u = 0.8: o1 π = ceil(40 / 8) = 5; o2 π = ceil(400 / 160) = ceil(2.5) = 3.
    plan = decide(snapshot(lecture_ops(), LECTURE_EDGES), u=0.8)
    assert plan.parallelism == {"src": 1, "o1": 5, "o2": 3}


def test_backlog_is_drained_within_catch_up_time():
    # 1200 records waiting, catch-up 60 s -> +20 rec/s: target 60 rec/s.
    # o1 π = ceil(60 / 10) = 6; o1* = 600; o2 π = ceil(600 / 200) = 3.
    snap = snapshot(lecture_ops(backlog=1200), LECTURE_EDGES)
    plan = decide(snap, catch_up_s=60)
    assert plan.parallelism == {"src": 1, "o1": 6, "o2": 3}
    assert estimate(snap, catch_up_s=60)["src"].target_input_rate == 60
    # A longer catch-up time needs less: 1200 / 120 = +10 -> 50 rec/s -> o1 5, o2 ceil(500/200) = 3.
    assert decide(snap, catch_up_s=120).parallelism == {"src": 1, "o1": 5, "o2": 3}


def test_clamped_to_max_parallelism_with_a_warning():
    # o1 needs 4, o2 needs 2; max 3 -> o1 3 (and a warning that it will not keep up), o2 2.
    plan = decide(snapshot(lecture_ops(), LECTURE_EDGES), max_p=3)
    assert plan.parallelism == {"src": 1, "o1": 3, "o2": 2}
    warns = by_type(plan, "warn")
    assert len(warns) == 1 and warns[0].operator == "o1" and "max_parallelism" in warns[0].reason
    assert by_type(plan, "scale_executors")[0].to == 5
    assert any("clamped from 4" in line for line in plan.explanation)


def test_clamped_to_min_parallelism():
    # min 3: o1 4 stays, o2 2 -> 3 partitions. The floor is on partitions, not on cores: the
    # exact needs are still 4 + 2 -> 6 cores.
    plan = decide(snapshot(lecture_ops(), LECTURE_EDGES), min_p=3)
    assert plan.parallelism == {"src": 1, "o1": 4, "o2": 3}
    assert by_type(plan, "warn") == []
    assert by_type(plan, "scale_executors")[0].to == 6


def test_executors_clamped_to_the_app_range():
    # 6 cores needed, max_executors 4 -> 4 executors and a warning.
    plan = decide(snapshot(lecture_ops(), LECTURE_EDGES), max_executors=4)
    assert by_type(plan, "scale_executors")[0].to == 4
    assert any("needs 6 cores" in a.reason for a in by_type(plan, "warn"))
    # Scale-down stops at min_executors: the query needs 2 cores, min 3.
    snap = snapshot(
        [op("src", 1, [inst(10, 10, 1)], arrival=10),
         op("o1", 4, [inst(5, 50, 0.5)] * 4),
         op("o2", 2, [inst(50, 0, 0.25)] * 2)],
        LECTURE_EDGES, executors=6,
    )
    assert by_type(decide(snap, min_executors=3, initial_executors=3), "scale_executors")[0].to == 3


def test_executor_cores_divide_the_cores_needed():
    # 6 cores, 4 cores per executor -> ceil(6/4) = 2 executors.
    plan = decide(snapshot(lecture_ops(), LECTURE_EDGES), executor_cores=4)
    assert by_type(plan, "scale_executors")[0].to == 2


def test_instances_without_useful_time_contribute_nothing():
    # o1 has its lecture instance plus an idle one (0 s): mean over the measured one is still 10 -> 4.
    ops = lecture_ops()
    ops[1] = op("o1", 2, [inst(20, 200, 2), inst(0, 0, 0)])
    plan = decide(snapshot(ops, LECTURE_EDGES))
    assert plan.parallelism["o1"] == 4
    assert by_type(plan, "warn") == []


def test_operator_without_useful_time_keeps_its_parallelism_and_warns():
    # o1 reports only zero useful time: a warning, π = its parallelism 3, no repartition.
    # Its selectivity comes from the raw counts (200 / 20 = 10), so o2 still sees 400 -> π 2.
    ops = lecture_ops()
    ops[1] = op("o1", 3, [inst(20, 200, 0), inst(0, 0, 0)])
    plan = decide(snapshot(ops, LECTURE_EDGES))
    assert plan.parallelism == {"src": 1, "o1": 3, "o2": 2}
    warns = by_type(plan, "warn")
    assert [w.operator for w in warns] == ["o1"] and "keeps its parallelism 3" in warns[0].reason
    # Without o1's true rate the cores needed are unknown: executors stay (the first windows of a
    # fresh query look like this); the measured o2 still gets its repartition.
    assert [a.summary() for a in plan.changes] == ["set_parallelism o2 1 -> 2"]
    assert "executors unchanged: no true rate for o1 in this window" in plan.explanation


def test_sources_are_not_scaled():
    ops = lecture_ops(arrival=4000)
    ops[0]["parallelism"] = 2
    plan = decide(snapshot(ops, LECTURE_EDGES), max_p=1000)
    assert plan.parallelism["src"] == 2
    assert all(a.operator != "src" for a in plan.actions)


def test_explanation_lists_each_operator_in_topological_order_and_the_totals():
    plan = decide(snapshot(list(reversed(lecture_ops())), LECTURE_EDGES))
    lines = plan.explanation
    per_op = [line for line in lines if line.startswith("[")]
    assert [line.split()[1].rstrip(":") for line in per_op] == ["src", "o1", "o2"]
    o1 = per_op[1]
    for figure in ("true processing rate 10 rec/s", "true output rate 100 rec/s", "target input rate 40 rec/s",
                   "π = ceil(40 / (1 x 10)) = 4", "current parallelism 1"):
        assert figure in o1
    assert any(line.startswith("partition-bound") and "cores needed = ceil(Σ exact needs) = 6" in line
               for line in lines)
    assert lines[-1].startswith("total: 6 cores")


def test_history_does_not_change_the_decision():
    snap = snapshot(lecture_ops(), LECTURE_EDGES)
    first = decide(snap)
    history = DecisionHistory.empty().with_decision(1.0, first)
    assert decide(snap, history=history) == first


def test_registry_finds_ds2():
    policy = get_policy("ds2")
    assert isinstance(policy, Ds2Policy) and isinstance(policy, Policy)
    assert "ds2" in registered_policies()
    with pytest.raises(KeyError, match="no policy named 'nope'"):
        get_policy("nope")


def test_registry_refuses_a_second_policy_under_a_taken_name():
    class Other:
        name = "ds2"

        def decide(self, snapshot, history, cfg, app):  # pragma: no cover - never called
            raise AssertionError

    with pytest.raises(ValueError, match="already registered"):
        register_policy(Other)
    with pytest.raises(TypeError, match="no `name`"):
        register_policy(type("Nameless", (), {"decide": lambda self: None}))


def test_invalid_parameters_are_refused():
    snap = snapshot(lecture_ops(), LECTURE_EDGES)
    with pytest.raises(ValueError, match=r"target_utilization must be in \(0, 1\], got 0"):
        estimate(snap, target_utilization=0)
    with pytest.raises(ValueError, match="need 1 <= min_parallelism <= max_parallelism, got 5, 2"):
        estimate(snap, min_parallelism=5, max_parallelism=2)


def test_stages_share_cores_in_time_so_fractional_needs_add_before_rounding():
    # o1 needs 40 / 100 = 0.4 instances, o2 needs 400 / 1000 = 0.4: π = 1 each (partitions),
    # but a micro-batch runs them one after the other on the same cores: ceil(0.8) = 1 core.
    ops = [
        op("src", 1, [inst(400, 400, 1)], arrival=40),
        op("o1", 1, [inst(100, 1000, 1)]),
        op("o2", 1, [inst(1000, 1000, 1)]),
    ]
    est = estimate(snapshot(ops, [["src", "o1"], ["o1", "o2"]]))
    assert (est["o1"].optimal_parallelism, est["o2"].optimal_parallelism) == (1, 1)
    assert est["o1"].required == pytest.approx(0.4) and est["o2"].required == pytest.approx(0.4)
    assert est.cores_needed == 1


def test_no_finished_stage_in_the_window_leaves_executors_alone():
    """A query whose batches outlast the window shows only its source: no true rate, no scale-down."""
    from sparkscale.config import AppConfig, PolicyConfig
    from sparkscale.model.snapshot import ExecutorFigures, InstanceFigures, OperatorFigures, Snapshot
    from sparkscale.policies.ds2 import Ds2Policy
    from sparkscale.policies.history import DecisionHistory

    source = OperatorFigures("source", 4, (InstanceFigures(0, 0, 0.0),) * 4, source=True, arrival_rate=3000,
                             backlog=1_650_000)
    snap = Snapshot("a", "q", 100.0, 30.0, tuple(ExecutorFigures(str(i), "h", 1) for i in range(8)), (source,), ())
    plan = Ds2Policy().decide(snap, DecisionHistory.empty(), PolicyConfig(), AppConfig(name="a", max_executors=8))
    assert not [a for a in plan.actions if a.type == "scale_executors"]
    assert any("no stage of the query finished" in line for line in plan.explanation)


def test_no_repartition_beyond_the_cores_the_app_may_hold():
    """A stage runs one task per core at once: more partitions than the app's most cores never run
    side by side, and the migration stalls the query for nothing (issue 33, clicks-file: 4 -> 6
    partitions on at most 4 cores of 1-core executors)."""
    ops = lecture_ops()  # o1 needs 4 instances (π = 4), o2 2
    ops[1]["parallelism"] = ops[2]["parallelism"] = 3
    plan = decide(snapshot(ops, LECTURE_EDGES), max_executors=3)
    assert by_type(plan, "set_parallelism") == []
    assert "no repartition of o1: its 3 partitions already run on all 3 cores the app may hold" in "\n".join(
        plan.explanation)
    assert any("at most 3 are allowed" in w.reason for w in by_type(plan, "warn"))  # it will not keep up
    assert [a.summary() for a in by_type(decide(snapshot(ops, LECTURE_EDGES), max_executors=6), "set_parallelism")
            ] == ["set_parallelism o1 3 -> 6"]  # with room for more cores, as before
    # Fewer partitions than the most cores: repartitioned up to them, not past them.
    plan = decide(snapshot(lecture_ops(), LECTURE_EDGES), max_executors=2, executor_cores=2)
    assert [a.summary() for a in by_type(plan, "set_parallelism")] == ["set_parallelism o1 1 -> 4",
                                                                       "set_parallelism o2 1 -> 4"]
