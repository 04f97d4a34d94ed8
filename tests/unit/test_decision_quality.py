"""The rules that make a decision reach the right size in one step and learn from what happened:
partition-aware DS2 cores, partition counts with many divisors, DS2's capacity expectation, the
observed scalability coefficient, and what an outcome may block."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sparkscale.config import AppConfig, OutcomesConfig, PolicyConfig
from sparkscale.control.sink import FanOut
from sparkscale.daemon.evaluator import OutcomeEvaluator, PendingOutcome, blocks_unmet
from sparkscale.daemon.feeds import MetricsFeed, OutcomeFeed
from sparkscale.daemon.metrics import DaemonMetrics
from sparkscale.model.plan import Action, Plan
from sparkscale.partitions import divisor_count, in_band, many_divisor_count
from sparkscale.policies.ds2 import Ds2Config, Ds2Policy
from sparkscale.policies.ds2_model import estimate
from sparkscale.policies.history import DecisionHistory, ScalingObservation
from sparkscale.policies.outcomes import (
    CAPACITY,
    INEFFECTIVE_SCALE_UP,
    Blocklist,
    Expectation,
    drop_blocked,
    judge,
)
from sparkscale.policies.scalability import coefficient, scaled_cores
from tests.unit.test_ds2 import inst, op, snapshot
from tests.unit.test_task_overhead import CLICKS_RECORDS, tasks
from tests.unit.test_task_overhead import snapshot as overhead_snapshot

APP = AppConfig(name="app", min_executors=1, max_executors=16)


def two_stages(arrival: float, p_a: int, p_b: int, executors: int = 1, backlog: float = 0):
    """src -> a -> b; a takes 0.1 s of useful time per record, b 0.05 s (true rates 10 and 20 rec/s)."""
    return snapshot([
        op("src", 1, [inst(arrival, arrival, 1)], arrival=arrival, backlog=backlog),
        op("a", p_a, [inst(10, 10, 1)]),
        op("b", p_b, [inst(20, 20, 1)]),
    ], [["src", "a"], ["a", "b"]], executors=executors)


def decide(snap, history: DecisionHistory | None = None):
    cfg = PolicyConfig(target_utilization=1.0, ds2=Ds2Config())
    return Ds2Policy().decide(snap, history if history is not None else DecisionHistory.empty(), cfg, APP)


# ---------------------------------------------------------------------------------------------
# DS2 on Spark: a stage runs at most as many tasks at once as it has partitions


def test_cores_are_raised_until_every_stage_fits_its_partitions():
    # 15 rec/s: a needs 1.5 instances, b 0.75; Σ = 2.25 -> 3 cores. On 3 cores a (2 partitions)
    # takes 1.5 / 2 = 0.75 of the window and b (8) 0.75 / 3 = 0.25: 1.0, it fits.
    est = estimate(two_stages(15, 2, 8))
    assert est.cores_needed == 3 and est.cores_for_partitions == 3
    # 17 rec/s: a 1.7, b 0.85, Σ 2.55 -> 3; a always takes 1.7 / 2 = 0.85 of the window, so b
    # must fit in 0.15: 0.85 / 5 = 0.17 does not, 0.85 / 6 = 0.142 does: 6 cores.
    est = estimate(two_stages(17, 2, 8))
    assert est.cores_needed == 3 and est.cores_for_partitions == 6
    assert not est.partition_bound


def test_a_query_that_no_core_count_helps_is_partition_bound_and_repartitioned_to_many_divisors():
    # 25 rec/s: a needs 2.5 instances on 2 partitions: never fits.
    snap = two_stages(25, 2, 2)
    est = estimate(snap)
    assert est.partition_bound and est.cores_needed == 4  # ceil(2.5 + 1.25)
    plan = decide(snap)
    wishes = {a.operator: a.to for a in plan.actions if a.type == "set_parallelism"}
    # a needs π = 3 > 2 partitions; the query needs 4 cores in all: 4 partitions (the first count
    # >= 4 with more divisors than any smaller). b (π = 2) asks nothing; the migration is per query.
    assert wishes == {"a": 4}
    assert [a.to for a in plan.actions if a.type == "scale_executors"] == [4]


def test_partition_counts_with_many_divisors():
    assert [many_divisor_count(n) for n in (1, 3, 5, 7, 13, 25, 50)] == [1, 4, 6, 12, 24, 36, 60]
    assert divisor_count(12) == 6 and divisor_count(7) == 2
    assert many_divisor_count(7, at_most=10) == 7  # none in range: the count asked for
    assert in_band(12, 4, 1, 4) and not in_band(12, 2, 1, 4)


# ---------------------------------------------------------------------------------------------
# DS2's own expectation and what is judged


def test_ds2_records_the_capacity_its_model_gives_the_new_cores():
    plan = decide(two_stages(15, 8, 8))  # 3 cores needed, 1 now
    expected = plan.observation.expected
    assert plan.actions[-1].summary() == "scale_executors 1 -> 3"
    assert expected is not None and expected.metric == CAPACITY
    # On 1 core the stages take 1.5 + 0.75 = 2.25 windows per window of input: 15 / 2.25 rec/s;
    # on 3 cores 15 / 0.75.
    assert expected.before == pytest.approx(15 / 2.25) and expected.after == pytest.approx(20.0)


def expectation(before: float = 10.0, after: float = 30.0) -> Expectation:
    return Expectation("under_provisioning", "scale_executors", CAPACITY, before, after, 0.0)


def test_an_ineffective_scale_up_is_told_from_one_that_fell_short():
    # On 3 cores the new window's true rates give 20 rec/s of capacity: 50 % of the expected gain.
    fine = judge(expectation(10, 30), two_stages(15, 8, 8, executors=3), APP, fraction=0.5, cores=3)
    assert fine.met and not fine.ineffective and fine.observed == pytest.approx(20.0)
    # Expected 10 -> 300: the 20 that came is 3.4 % of the gain, under the 10 % of Flink's detection,
    # and the backlog grew: ineffective. Had the app kept up, nothing would call for more anyway.
    poor = judge(expectation(10, 300), two_stages(15, 8, 8, executors=3, backlog=5000), APP, fraction=0.5, cores=3)
    assert poor.ineffective and "ineffective" in poor.detail
    assert not judge(expectation(10, 300), two_stages(15, 8, 8, executors=3), APP, fraction=0.5, cores=3).ineffective


class _Log:
    def __init__(self):
        self.outcomes = []

    def append_outcome(self, record):
        self.outcomes.append(record)


class _Store:
    def __init__(self):
        self.entries = []

    def block(self, entry):
        self.entries.append(entry)


def evaluate(policy: str, expected_after: float, due_at: float = 0.0, arrival: float = 60.0):
    log, store = _Log(), _Store()
    pending = [PendingOutcome("d1", expectation(10, expected_after), Action.scale_executors(1, 3, "up"),
                              due_at=due_at, policy=policy, query="q")]
    learned = OutcomeEvaluator(store, FanOut((OutcomeFeed(log), MetricsFeed(DaemonMetrics())))).judge_due(
        APP, pending, two_stages(arrival, 8, 8, executors=3, backlog=5000 if arrival >= 60 else 0), OutcomesConfig())
    return pending, log, store, learned


def test_a_ramp_does_not_blocklist_ds2_but_an_ineffective_scale_up_blocks_scale_ups():
    # During a ramp the load outgrew the scale-up (the backlog grew), and capacity came to 20 of the
    # 60 rec/s expected (a fifth of the gain: not met, but not ineffective either): DS2 is not
    # blocked, and the observation feeds its scalability coefficient.
    pending, log, store, learned = evaluate("ds2", 60.0)
    assert not pending and log.outcomes[0].met is False and store.entries == []
    assert [round(o.gain_ratio, 2) for o in learned] == [0.2]
    # Dhalion keeps its semantics: the unmet outcome blocks its (diagnosis, action) for Dhalion.
    _p, _l, store, _ = evaluate("dhalion", 60.0)
    assert [(e.blocked.diagnosis, e.blocked.policy) for e in store.entries] == [("under_provisioning", "dhalion")]
    assert blocks_unmet("dhalion") and not blocks_unmet("ds2") and not blocks_unmet("threshold")
    # An ineffective scale-up blocks further scale-ups for every policy.
    _p, _l, store, _ = evaluate("ds2", 300.0)
    assert [e.blocked.diagnosis for e in store.entries] == [INEFFECTIVE_SCALE_UP]


@pytest.mark.parametrize(("task_overhead", "blocked"), [(False, [INEFFECTIVE_SCALE_UP]), (True, [])])
def test_the_evaluator_measures_capacity_with_the_model_it_is_given(task_overhead: bool, blocked: list[str]):
    # Plain DS2 expected 1 -> 2 cores to double 32.8 rec/s; after it the tasks pay twice their fixed
    # cost: plain DS2 measures 35 rec/s (ineffective), the overhead model 376 (tests/unit/test_task_overhead.py).
    before = estimate(overhead_snapshot(56, tasks(CLICKS_RECORDS)))
    expected = Expectation("under_provisioning", "scale_executors", CAPACITY, before.capacity_rps(1) or 0.0,
                           before.capacity_rps(2) or 0.0, 0.0)
    pending = [PendingOutcome("d1", expected, Action.scale_executors(1, 2, "up"), due_at=0.0, policy="ds2")]
    log, store = _Log(), _Store()
    OutcomeEvaluator(store, FanOut((OutcomeFeed(log),))).judge_due(
        APP, pending, overhead_snapshot(56, tasks(CLICKS_RECORDS, f_s=0.8), backlog=1000), OutcomesConfig(),
        task_overhead=task_overhead)
    assert [e.blocked.diagnosis for e in store.entries] == blocked
    assert log.outcomes[0].met is task_overhead  # the overhead model reads 376 rec/s: "met"


def test_a_lightly_loaded_window_teaches_nothing_about_scalability():
    # 1 record/s against 20 rec/s of capacity: few records per task, the true rates are noise.
    _pending, log, _store, learned = evaluate("ds2", 30.0, arrival=1.0)
    assert log.outcomes and learned == []


def test_nothing_is_judged_before_its_due_time():
    pending, log, _store, learned = evaluate("ds2", 30.0, due_at=1e13)
    assert len(pending) == 1 and log.outcomes == [] and learned == []


def test_an_ineffective_entry_drops_scale_ups_of_any_policy_and_nothing_else():
    blocklist = Blocklist().block("app", INEFFECTIVE_SCALE_UP, "scale_executors", 0.0, 600.0)
    up = Plan("threshold", "app", actions=(Action.scale_executors(2, 3, "cpu"),))
    down = Plan("ds2", "app", actions=(Action.scale_executors(3, 2, "less"),))
    assert drop_blocked(up, blocklist, 10.0).actions == ()
    assert "an earlier one did not raise the capacity" in drop_blocked(up, blocklist, 10.0).explanation[-1]
    assert drop_blocked(down, blocklist, 10.0).actions == down.actions
    # Dhalion's own entries bind only Dhalion's plans.
    dhalion_only = Blocklist().block("app", "under_provisioning", "scale_executors", 0.0, 600.0, policy="dhalion")
    assert drop_blocked(up, dhalion_only, 10.0).actions == up.actions
    assert drop_blocked(replace(up, policy="dhalion"), dhalion_only, 10.0).actions == ()


# ---------------------------------------------------------------------------------------------
# The observed scalability coefficient


def observed(ratio: float, k: int) -> ScalingObservation:
    return ScalingObservation("q", float(k), 1, 3, 10.0, 30.0, 10.0 + 20.0 * ratio)


def test_the_coefficient_needs_three_observations_and_is_bounded():
    history = DecisionHistory.empty()
    for k, ratio in enumerate((0.6, 0.7)):
        history = history.with_scaling(observed(ratio, k))
    assert coefficient(history, "q") is None
    history = history.with_scaling(observed(0.65, 2))
    coeff = coefficient(history, "q")
    assert coeff is not None and coeff.value == pytest.approx(0.65) and coeff.observations == 3
    low = DecisionHistory(scalability=tuple(observed(0.1, k) for k in range(3)))
    assert coefficient(low, "q").value == 0.5 and coefficient(low, "q").raw == pytest.approx(0.1)
    assert coefficient(low, "other") is None  # another query's observations do not count
    assert DecisionHistory.from_dict(history.to_dict()).scalability == history.scalability


def test_ds2_asks_for_more_cores_where_scaling_was_sub_linear():
    linear = decide(two_stages(15, 8, 8))
    history = DecisionHistory(scalability=tuple(observed(0.5, k) for k in range(3)))
    learned = decide(two_stages(15, 8, 8), history)
    # 3 cores at linear scaling from 1: 2 added / 0.5 = 4 added -> 5.
    assert [a.to for a in linear.actions if a.type == "scale_executors"] == [3]
    assert [a.to for a in learned.actions if a.type == "scale_executors"] == [5]
    assert any("observed scalability coefficient 0.50" in line for line in learned.explanation)
    assert scaled_cores(3, 4, None) == 3 and scaled_cores(2, 4, coefficient(history, "q")) == 2


# ---------------------------------------------------------------------------------------------
# Two-tier: partitions migrate only when partitions per core leave the band


def band(plan: Plan, snap, partitions: int, executor_cores: int = 1) -> Plan:
    from sparkscale.policies.two_tier import band_migrations

    app = AppConfig(name="app", min_executors=1, max_executors=64, executor_cores=executor_cores)
    return band_migrations(plan, snap, app, {"q": partitions}, 1.0, 12.0, {})


def test_executor_changes_alone_while_partitions_per_core_stay_in_the_band():
    snap = two_stages(15, 12, 12)
    up = Plan("threshold", "app", actions=(Action.scale_executors(1, 4, "cpu"),))
    assert band(up, snap, 12).actions == up.actions  # 12 partitions on 4 cores: 3 per core


def test_a_target_beyond_the_partitions_migrates_up_to_a_count_with_many_divisors():
    snap = two_stages(15, 4, 4)
    up = Plan("threshold", "app", actions=(Action.scale_executors(1, 6, "cpu"),))
    plan = band(up, snap, 4)
    # 4 partitions on 6 cores leave 2 cores idle in every shuffled stage: 6 partitions (6 has 4 divisors).
    assert [a.summary() for a in plan.actions] == ["scale_executors 1 -> 6", "set_parallelism a 4 -> 6"]
    assert "two-tier: query q has 4 partitions for 6 cores" in plan.explanation[-1]


def test_many_small_tasks_per_core_migrate_down_to_the_middle_of_the_band():
    snap = two_stages(15, 60, 60, executors=4)
    down = Plan("ds2", "app", actions=(Action.scale_executors(4, 1, "less"),))
    plan = band(down, snap, 60)
    # 60 per core on 1 core > 12: sqrt(1 x 12) = 3.46 per core -> the first many-divisor count >= 4.
    assert [a.to for a in plan.actions if a.type == "set_parallelism"] == [4]
    # A plan that migrates already is left alone.
    migrating = Plan("ds2", "app", actions=(Action.set_parallelism("a", 60, 120, "bound"),))
    assert band(migrating, snap, 60) is migrating
