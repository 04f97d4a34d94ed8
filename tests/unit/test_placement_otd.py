"""OTD (N-Storm §4) as a placement policy: eqs. (4)/(5), Algorithms 1 and 2, the four cases, and
Spark's constraints. The worked example is constructed from the paper's definitions (the paper
has no numeric example of its own)."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from sparkscale.policies.placement.base import default_settings, get_placement, registered_placements, settings_as
from sparkscale.policies.placement.edrp_model import EdrpSettings
from sparkscale.policies.placement.model import (
    ClusterModel,
    ExecutorKey,
    PlacedExecutor,
    Traffic,
    Worker,
)
from sparkscale.policies.placement.otd import (
    Otd,
    OtdSettings,
    allocation_score,
    asc,
    classify,
    communication_optimisation,
    inter_node_traffic,
    load_balancing,
    pair_traffic,
)

PROPERTY = settings(max_examples=60, deadline=None, database=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])


def key(i: int | str, app: str = "app") -> ExecutorKey:
    return ExecutorKey(app, str(i))


E1, E2, E3, E4 = key(1), key(2), key(3), key(4)
CC = (Traffic(E1, E3, 10.0), Traffic(E1, E2, 2.0), Traffic(E2, E4, 1.0), Traffic(E3, E4, 5.0))


def worker(id: str, host: str, busy: float | None, cores: int = 8, used: int = 0) -> Worker:
    return Worker(id=id, host=host, cores=cores, memory_mb=16384, cores_used=used, busy_share=busy)


def execs(placement: dict[ExecutorKey, str]) -> tuple[PlacedExecutor, ...]:
    return tuple(PlacedExecutor(key=k, worker=w, cores=1, memory_mb=1024) for k, w in placement.items())


def two_nodes(landing: dict | None = None, wb: Worker | None = None, apps: dict | None = None) -> ClusterModel:
    """§A.5: e1, e2 on node A (worker WA), e3, e4 on node B (worker WB); both workers low-load."""
    keys = [ExecutorKey((apps or {}).get(i, "app"), str(i)) for i in (1, 2, 3, 4)]
    remap = dict(zip((E1, E2, E3, E4), keys, strict=False))
    traffic = tuple(Traffic(remap[t.src], remap[t.dst], t.bytes_per_s) for t in CC)
    return ClusterModel(workers=(worker("WA", "A", 0.2), wb or worker("WB", "B", 0.3)),
                        executors=execs(dict(zip(keys, ("WA", "WA", "WB", "WB"), strict=False))),
                        traffic=traffic, landing=landing or {})


def alg1_variant(landing: dict | None = None, cc: tuple[Traffic, ...] = CC, w3_busy: float = 0.3) -> ClusterModel:
    """§A.5 Algorithm 1 variant: W1@A high-load holds e1, e2; W2@A and W3@B low-load; e3, e4 on W3."""
    return ClusterModel(workers=(worker("W1", "A", 0.95), worker("W2", "A", 0.2), worker("W3", "B", w3_busy)),
                        executors=execs({E1: "W1", E2: "W1", E3: "W3", E4: "W3"}), traffic=cc,
                        landing=landing or {})


def moved(model: ClusterModel, k: ExecutorKey, target: str) -> ClusterModel:
    return dataclasses.replace(model, executors=tuple(
        dataclasses.replace(e, worker=target) if e.key == k else e for e in model.executors))


# -- eqs. (4) and (5) on the worked example --------------------------------------------------------

@pytest.mark.parametrize(("k", "own", "other", "as_own", "as_other"), [
    (E1, "A", "B", -8.0, 8.0), (E2, "A", "B", 1.0, -1.0), (E3, "B", "A", -5.0, 5.0), (E4, "B", "A", 4.0, -4.0)])
def test_as_and_asc_table(k, own, other, as_own, as_other):
    model = two_nodes()
    assert allocation_score(model, k, own) == as_own
    assert allocation_score(model, k, other) == as_other
    assert asc(model, k, other) == (as_other - as_own) / 2
    assert asc(model, k, own) == 0.0


def test_pair_traffic_sums_both_directions_and_skips_self():
    model = dataclasses.replace(two_nodes(), traffic=(*CC, Traffic(E3, E1, 4.0), Traffic(E2, E2, 99.0)))
    pairs = pair_traffic(model)
    assert pairs[frozenset((E1, E3))] == 14.0
    assert frozenset((E2,)) not in pairs
    assert inter_node_traffic(two_nodes()) == 11.0


# -- Algorithm 2 (Case 3) -----------------------------------------------------------------------

def test_algorithm2_moves_e1_to_b_and_lowers_traffic_by_its_asc():
    model = two_nodes()
    plan = Otd().place(model, OtdSettings(threshold_asc=6.0))
    assert len(plan.moves) == 1
    move = plan.moves[0]
    assert (move.key, move.source, move.target, move.score) == (E1, "WA", "WB", 8.0)
    after = moved(model, E1, "WB")
    assert inter_node_traffic(model) == 11.0 and inter_node_traffic(after) == 3.0
    assert inter_node_traffic(model) - inter_node_traffic(after) == move.score
    assert plan.figures["asc"] == 8.0 and plan.figures["inter_node_bytes_per_s"] == 11.0
    assert plan.reason.startswith("case 3")


def test_algorithm2_threshold_is_strict():
    assert Otd().place(two_nodes(), OtdSettings(threshold_asc=8.0)).moves == ()
    assert communication_optimisation(two_nodes(), [], OtdSettings(threshold_asc=0.0)) is None


def test_algorithm2_second_round():
    second = moved(two_nodes(), E1, "WB")  # {A: e2; B: e1, e3, e4}
    assert asc(second, E2, "B") == 3.0
    assert Otd().place(second, OtdSettings(threshold_asc=6.0)).moves == ()
    plan = Otd().place(second, OtdSettings(threshold_asc=2.0))
    assert [(m.key, m.target) for m in plan.moves] == [(E2, "WB")]


# -- Algorithm 1 (Case 1) -----------------------------------------------------------------------

def test_algorithm1_variant_returns_e1_to_w3():
    model = alg1_variant()
    assert [asc(model, E1, "A"), asc(model, E1, "B"), asc(model, E2, "A"), asc(model, E2, "B")] == [0, 8, 0, -1]
    high, low = classify(model, OtdSettings())
    move = load_balancing(model, high, low)
    assert (move.key, move.source, move.target, move.score) == (E1, "W1", "W3", 8.0)
    plan = Otd().place(model, OtdSettings(threshold_asc=100.0))  # no threshold in Algorithm 1
    assert [(m.key, m.target) for m in plan.moves] == [(E1, "W3")] and plan.reason.startswith("case 1: W1 at 0.95")


def test_algorithm1_takes_the_best_even_when_negative():
    cc = (Traffic(E1, E2, 3.0), Traffic(E2, E1, 1.0))  # both stay on A, any move to B costs
    model = ClusterModel(workers=(worker("W1", "A", 0.95), worker("W3", "B", 0.3)),
                         executors=execs({E1: "W1", E2: "W1"}), traffic=cc)
    plan = Otd().place(model, OtdSettings())
    assert [(m.key, m.target, m.score) for m in plan.moves] == [(E1, "W3", -4.0)]
    assert inter_node_traffic(moved(model, E1, "W3")) - inter_node_traffic(model) == 4.0


def test_tie_break_lower_target_load_then_executor_order():
    for w3_busy, target in ((0.3, "W2"), (0.1, "W3")):  # all ASC 0 without traffic: the lower load wins
        model = alg1_variant(cc=(), w3_busy=w3_busy)
        m = load_balancing(model, *classify(model, OtdSettings()))
        assert (m.key, m.target, m.score) == (E1, target, 0.0)  # e1 before e2 at equal ASC and load


# -- Spark constraints before the argmax ---------------------------------------------------------

def test_landing_excludes_a_better_target_before_the_argmax():
    apps = {1: "x"}  # e1 alone in app x; e1 -> B is the best move (8) but x lands on WA
    plan = Otd().place(two_nodes(landing={"x": "WA"}, apps=apps), OtdSettings(threshold_asc=4.0))
    assert [(m.key.id, m.target, m.score) for m in plan.moves] == [("3", "WA", 5.0)]
    control = Otd().place(two_nodes(apps=apps), OtdSettings(threshold_asc=4.0))
    assert [(m.key.id, m.target) for m in control.moves] == [("1", "WB")]
    none = Otd().place(two_nodes(landing={"x": None, "app": None}, apps=apps), OtdSettings(threshold_asc=0.0))
    assert none.moves == ()


def test_room_excludes_a_better_target_before_the_argmax():
    full = worker("WB", "B", 0.3, cores=4, used=4)
    plan = Otd().place(two_nodes(wb=full), OtdSettings(threshold_asc=4.0))
    assert [(m.key, m.target, m.score) for m in plan.moves] == [(E3, "WA", 5.0)]


def test_landing_in_algorithm1_leaves_only_the_same_host_move():
    model = alg1_variant(landing={"app": "W2"})
    plan = Otd().place(model, OtdSettings())
    assert [(m.key, m.target, m.score) for m in plan.moves] == [(E1, "W2", 0.0)]


# -- the four cases ------------------------------------------------------------------------------

def test_case2_warns_and_moves_nothing():
    model = ClusterModel(workers=(worker("W1", "A", 0.95), worker("W2", "B", 0.7), worker("W3", "B", None)),
                         executors=execs({E1: "W1", E2: "W2"}), traffic=CC)
    plan = Otd().place(model, OtdSettings())
    assert plan.moves == () and len(plan.warnings) == 1
    w = plan.warnings[0]
    assert w.kind == "short_of_resources" and "W1" in w.message
    assert w.figures["busy_share.W1"] == 0.95
    assert math.isclose(w.figures["mean_busy_share"], (0.95 + 0.7) / 2)
    assert math.isclose(plan.figures["worker_load_imbalance"], 0.95 / ((0.95 + 0.7) / 2))


def test_case4_and_unknown_loads_do_nothing():
    for loads in ((0.6, 0.7), (None, None)):
        model = ClusterModel(workers=(worker("W1", "A", loads[0]), worker("W2", "B", loads[1])),
                             executors=execs({E1: "W1", E3: "W2"}), traffic=CC)
        plan = Otd().place(model, OtdSettings(threshold_asc=0.0))
        assert plan.empty and plan.warnings == () and plan.reason.startswith("case 4")
    assert classify(model, OtdSettings()) == ([], [])
    idle = ClusterModel(workers=(worker("W1", "A", 0.0), worker("W2", "B", 0.0)))
    assert Otd().place(idle, OtdSettings()).figures["worker_load_imbalance"] == 1.0


# -- properties on random models ----------------------------------------------------------------

@st.composite
def models(draw):
    n_workers = draw(st.integers(1, 5))
    workers = tuple(worker(f"W{i}", f"H{draw(st.integers(0, 2))}", draw(st.sampled_from([0.1, 0.3, 0.6, 0.9])),
                           cores=4, used=draw(st.integers(0, 4))) for i in range(n_workers))
    n_exec = draw(st.integers(1, 6))
    keys = [key(i, app=draw(st.sampled_from(["a", "b"]))) for i in range(n_exec)]
    placement = {k: f"W{draw(st.integers(0, n_workers - 1))}" for k in keys}
    traffic = tuple(Traffic(keys[draw(st.integers(0, n_exec - 1))], keys[draw(st.integers(0, n_exec - 1))],
                            float(draw(st.integers(0, 100)))) for _ in range(draw(st.integers(0, 12))))
    landing = draw(st.dictionaries(st.sampled_from(["a", "b"]),
                                   st.one_of(st.none(), st.sampled_from([w.id for w in workers]))))
    return ClusterModel(workers=workers, executors=execs(placement), traffic=traffic, landing=landing)


@PROPERTY
@given(models())
def test_asc_is_half_the_difference_of_allocation_scores(model):
    hosts = {w.host for w in model.workers}
    for e in model.executors:
        n0 = model.worker(e.worker).host
        for n in hosts:
            expected = (allocation_score(model, e.key, n) - allocation_score(model, e.key, n0)) / 2
            assert math.isclose(asc(model, e.key, n), expected, abs_tol=1e-9)


@PROPERTY
@given(models(), st.sampled_from([0.0, 5.0, 50.0]))
def test_each_move_is_realisable_and_algorithm2_lowers_traffic_by_its_asc(model, threshold):
    low_model = dataclasses.replace(model, workers=tuple(dataclasses.replace(w, busy_share=0.2)
                                                         for w in model.workers))
    for m in (model, low_model):
        plan = Otd().place(m, OtdSettings(threshold_asc=threshold))
        assert len(plan.moves) <= 1
        for move in plan.moves:
            target, source = m.worker(move.target), m.worker(move.source)
            assert target.id != source.id and target.cores_free >= 1
            assert move.key.app not in m.landing or m.landing[move.key.app] == target.id
            assert move.score == asc(m, move.key, target.host)
    seen = 0
    while (plan := Otd().place(low_model, OtdSettings(threshold_asc=threshold))).moves:  # Case 3 to convergence
        move = plan.moves[0]
        assert move.score > threshold
        after = moved(low_model, move.key, move.target)
        assert math.isclose(inter_node_traffic(low_model) - inter_node_traffic(after), move.score)
        low_model, seen = after, seen + 1
        assert seen <= 1200  # each move lowers an integer total of at most 1200 by at least 1


# -- registration and settings -------------------------------------------------------------------

def test_registered_with_valid_defaults():
    assert "otd" in registered_placements()
    policy = get_placement("otd")
    assert isinstance(policy, Otd) and policy.config_model is OtdSettings
    defaults = default_settings("otd")
    assert (defaults.high_load, defaults.low_load, defaults.threshold_asc) == (0.85, 0.5, 1_000_000.0)
    assert Otd().place(two_nodes(), None).moves == ()  # defaults: 8 B/s is far below 1 MB/s


def test_settings_of_another_policy_are_refused():
    """`place` takes its own config_model's settings (None: the defaults), never another model's."""
    mine = OtdSettings(threshold_asc=6.0)
    assert settings_as(mine, OtdSettings) is mine and settings_as(None, OtdSettings) == OtdSettings()
    with pytest.raises(TypeError, match="expected OtdSettings settings, got EdrpSettings"):
        Otd().place(two_nodes(), EdrpSettings())
    with pytest.raises(TypeError, match="expected EdrpSettings settings, got OtdSettings"):
        get_placement("edrp").place(two_nodes(), mine)


@pytest.mark.parametrize("bad", [{"low_load": 0.9, "high_load": 0.8}, {"low_load": 0.5, "high_load": 0.5},
                                 {"high_load": 1.2}, {"low_load": -0.1}, {"threshold_asc": -1.0},
                                 {"threshold_asc": float("inf")}, {"unknown": 1}])
def test_bad_settings_are_refused(bad):
    with pytest.raises(ValidationError):
        OtdSettings(**bad)
