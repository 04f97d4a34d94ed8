"""The per-task overhead fit (policies/task_overhead.py) and DS2 with it (issue 33).

The clicks-file case: each task pays f = 0.4 s whatever its records and v = 1/300 s per record, and
14 tasks of about 15 records run in a 15 s window, so plain DS2 measures ~33 rec/s per instance
and asks for 4x the cores at 4x the rate, where 300 rec/s of variable capacity per instance and
14 x 0.4 / 15 = 0.37 fixed cores say one core keeps up.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from sparkscale.config import AppConfig, PolicyConfig
from sparkscale.model.snapshot import InstanceFigures, Snapshot
from sparkscale.policies.ds2 import Ds2Config, Ds2Policy, capacity_task_overhead
from sparkscale.policies.ds2_model import estimate
from sparkscale.policies.history import DecisionHistory
from sparkscale.policies.outcomes import CAPACITY, Expectation, judge, measured
from sparkscale.policies.task_overhead import fit_task_overhead

F_S = 0.4
V_S = 1 / 300
CLICKS_RECORDS = [5, 10, 15, 20, 25, 5, 10, 15, 20, 25, 10, 15, 20, 15]  # 14 tasks, mean 15


def tasks(records: list[float], f_s: float = F_S, v_s: float = V_S, noise_s: float = 0.0,
          seed: int = 1) -> list[InstanceFigures]:
    rng = random.Random(seed)
    return [InstanceFigures(r, r, f_s + v_s * r + rng.uniform(-noise_s, noise_s), "1") for r in records]


def snapshot(arrival: float, instances: list[InstanceFigures], window_s: float = 15.0,
             partitions: int = 4, backlog: float = 0) -> Snapshot:
    rows: list[dict[str, Any]] = [{"records_in": i.records_in, "records_out": i.records_out,
                                   "useful_time_s": i.useful_time_s, "executor": "1"} for i in instances]
    return Snapshot.from_dict({
        "version": 1, "app": "app", "query": "q", "taken_at": 0.0, "window_s": window_s,
        "executors": [{"id": "1", "host": "127.0.0.1", "cores": 1}],
        "operators": [
            {"id": "src", "parallelism": 1, "source": True, "arrival_rate": arrival, "backlog": backlog,
             "instances": [{"records_in": arrival * window_s, "records_out": arrival * window_s,
                            "useful_time_s": window_s, "executor": "1"}]},
            {"id": "stage0", "parallelism": partitions, "instances": rows},
        ],
        "edges": [["src", "stage0"]],
    })


# --- the fit ------------------------------------------------------------------------------------


def test_fit_recovers_f_and_v_on_an_exact_line():
    fit = fit_task_overhead(tasks(CLICKS_RECORDS))
    assert fit.fitted and fit.why_not == ""
    assert fit.tasks == 14
    assert fit.f_s == pytest.approx(F_S)
    assert fit.v_s_per_record == pytest.approx(V_S)
    assert fit.variable_rate == pytest.approx(300)


def test_fit_recovers_f_and_v_with_noise():
    records = [float(r) for r in range(5, 65, 2)]  # 30 tasks, 5 to 63 records
    fit = fit_task_overhead(tasks(records, noise_s=0.02, seed=7))
    assert fit.fitted
    assert fit.f_s == pytest.approx(F_S, abs=0.03)
    assert fit.v_s_per_record == pytest.approx(V_S, rel=0.15)


def test_fit_refuses_too_few_tasks():
    fit = fit_task_overhead(tasks([5, 10, 15, 20, 25]))
    assert not fit.fitted and fit.f_s == 0.0
    assert "tasks measured: 5, fewer than 6" in fit.why_not


def test_fit_ignores_tasks_without_useful_time():
    idle = [InstanceFigures(0, 0, 0.0, "1")] * 4
    fit = fit_task_overhead(tasks([5, 10, 15, 20, 25]) + idle)
    assert not fit.fitted and fit.tasks == 5


@pytest.mark.parametrize("records", [
    [15] * 14,  # uniform
    [14, 15, 16, 14, 15, 16, 15],  # spread 2 < 0.5 x 15
    [5, 25, 5, 25, 5, 25, 5, 25],  # only 2 distinct counts
])
def test_fit_refuses_record_counts_that_do_not_spread(records: list[float]):
    fit = fit_task_overhead(tasks(records))
    assert not fit.fitted and fit.f_s == 0.0
    assert "do not spread" in fit.why_not


def test_fit_clamps_a_negative_intercept_to_zero():
    # time = -0.1 + 0.01 x records: the line crosses 0 before the first record.
    fit = fit_task_overhead(tasks([20, 30, 40, 50, 60, 70], f_s=-0.1, v_s=0.01))
    assert fit.fitted and fit.f_s == 0.0
    assert fit.v_s_per_record == pytest.approx(sum(-0.1 + 0.01 * r for r in range(20, 80, 10)) / 270)


def test_fit_clamps_f_to_the_shortest_task():
    # Most tasks on a steep line, one short task with many records: the intercept (about 0.5 s)
    # lies above the shortest task (0.3 s), which bounds what every task pays.
    instances = [*tasks([5, 10, 15, 20, 25], f_s=0.5, v_s=0.01), InstanceFigures(12, 12, 0.3, "1")]
    fit = fit_task_overhead(instances)
    assert fit.fitted and fit.f_s == pytest.approx(0.3)
    assert fit.v_s_per_record == pytest.approx(sum(i.useful_time_s - 0.3 for i in instances) / 87)


def test_fit_with_a_falling_slope_puts_the_shortest_task_in_f():
    # More records, less time (noise, skewed files): f = the shortest task, v the aggregate rest.
    instances = [InstanceFigures(r, r, 1.0 - 0.01 * r, "1") for r in (5, 10, 15, 20, 25, 30)]
    fit = fit_task_overhead(instances)
    assert fit.fitted and fit.f_s == pytest.approx(0.7)
    assert fit.v_s_per_record == pytest.approx(sum(0.3 - 0.01 * r for r in (5, 10, 15, 20, 25, 30)) / 105)


def test_fit_refuses_tasks_whose_time_does_not_grow():
    fit = fit_task_overhead([InstanceFigures(r, r, 0.5, "1") for r in (5, 10, 15, 20, 25, 30)])
    assert not fit.fitted and fit.f_s == 0.0 and "do not grow" in fit.why_not


# --- DS2 with it ---------------------------------------------------------------------------------


def test_mostly_overhead_needs_far_fewer_cores_at_4x_the_rate():
    # 14 rec/s measured (210 records in 15 s); the target is 4x that, 56 rec/s, at u = 0.8.
    snap = snapshot(56, tasks(CLICKS_RECORDS))
    plain = estimate(snap, 0.8)["stage0"]
    with_overhead = estimate(snap, 0.8, task_overhead=True)["stage0"]
    # Plain: mean of r / (0.4 + r / 300) is ~32.8 rec/s -> 56 / (0.8 x 32.76) = 2.14 -> 3.
    assert plain.instance_rate == pytest.approx(32.756, abs=0.01)
    assert plain.optimal_parallelism == 3
    # Overhead: 56 / (0.8 x 300) + (14 x 0.4 / 15) / 0.8 = 0.233 + 0.467 = 0.7 -> 1.
    assert with_overhead.overhead_s == pytest.approx(F_S)
    assert with_overhead.variable_rate == pytest.approx(300)
    assert with_overhead.sizing_rate == pytest.approx(300)
    assert with_overhead.fixed_cores == pytest.approx(14 * 0.4 / 15)
    assert with_overhead.required == pytest.approx(0.7)
    assert with_overhead.optimal_parallelism == 1
    # The paper's fields keep their meaning: the measured true rate, not the net one.
    assert with_overhead.true_processing_rate == plain.true_processing_rate


def test_the_fixed_part_does_not_grow_with_the_rate():
    low = estimate(snapshot(14, tasks(CLICKS_RECORDS)), 1.0, task_overhead=True)["stage0"]
    high = estimate(snapshot(56, tasks(CLICKS_RECORDS)), 1.0, task_overhead=True)["stage0"]
    assert high.fixed_cores == low.fixed_cores
    assert high.required is not None and low.required is not None
    assert high.required - low.required == pytest.approx((56 - 14) / 300)


def test_task_overhead_false_is_todays_estimate():
    snap = snapshot(56, tasks(CLICKS_RECORDS))
    assert estimate(snap, 0.8, task_overhead=False) == estimate(snap, 0.8)
    op = estimate(snap, 0.8)["stage0"]
    assert (op.overhead_s, op.fixed_cores, op.variable_rate, op.overhead_why_not) == (0.0, 0.0, 0.0, "")


def test_no_fit_is_plain_ds2_bit_for_bit():
    snap = snapshot(56, tasks([15] * 14))
    plain, asked = estimate(snap, 0.8)["stage0"], estimate(snap, 0.8, task_overhead=True)["stage0"]
    assert asked.required == plain.required and asked.optimal_parallelism == plain.optimal_parallelism
    assert asked.overhead_s == 0.0 and "do not spread" in asked.overhead_why_not


def test_capacity_with_a_fixed_part():
    est = estimate(snapshot(56, tasks(CLICKS_RECORDS)), 0.8, task_overhead=True)
    fixed = 14 * 0.4 / 15
    # busy(rate) = rate / 300 + fixed on 1 core = 1  ->  rate = 300 x (1 - fixed).
    assert est.capacity_rps(1) == pytest.approx(300 * (1 - fixed))
    # On 2 cores (4 partitions) both parts halve: rate / 600 + fixed / 2 = 1.
    assert est.capacity_rps(2) == pytest.approx(600 * (1 - fixed / 2))
    # One partition: a second core does not shorten the stage.
    one = estimate(snapshot(56, tasks(CLICKS_RECORDS), partitions=1), 0.8, task_overhead=True)
    assert one.capacity_rps(2) == pytest.approx(one.capacity_rps(1))
    assert est.capacity_rps(1, {"stage0": 1}) == pytest.approx(300 * (1 - fixed))


def test_capacity_is_none_when_the_fixed_part_fills_the_cores():
    # 14 tasks x 1.2 s of overhead in a 15 s window: 1.12 cores of overhead alone.
    est = estimate(snapshot(56, tasks(CLICKS_RECORDS, f_s=1.2)), 1.0, task_overhead=True)
    assert est["stage0"].fixed_cores == pytest.approx(1.12)
    assert est.capacity_rps(1) is None
    assert est.capacity_rps(2) is not None


def test_capacity_without_a_fixed_part_is_unchanged():
    snap = snapshot(56, tasks([15] * 14))
    assert estimate(snap, 0.8, task_overhead=True).capacity_rps(1) == estimate(snap, 0.8).capacity_rps(1)


def decide(snap: Snapshot, task_overhead: bool) -> list[str]:
    cfg = PolicyConfig(target_utilization=0.8, utilization_band=False, ds2=Ds2Config(task_overhead=task_overhead))
    plan = Ds2Policy().decide(snap, DecisionHistory.empty(), cfg, AppConfig(name="app", max_executors=8))
    scale = [a.to for a in plan.actions if a.type == "scale_executors"]
    return [*plan.explanation, f"executors {scale}"]


def test_policy_explains_the_overhead_and_sizes_by_it():
    lines = decide(snapshot(56, tasks(CLICKS_RECORDS)), task_overhead=True)
    stage = next(line for line in lines if line.startswith("[1] stage0"))
    assert ("per-task overhead 0.4 s fitted over 14 tasks (time = f + records / rate): variable rate "
            "300 rec/s per instance, fixed 0.37 cores") in stage
    assert "π = ceil(56 / (0.8 x 300) + 0.37 / 0.8) = 1" in stage
    assert lines[-1] == "executors []"  # 1 executor, as now
    plain = decide(snapshot(56, tasks(CLICKS_RECORDS)), task_overhead=False)
    assert not any("overhead" in line for line in plain)
    assert plain[-1] == "executors [3]"


def test_policy_says_why_no_overhead_was_fitted():
    lines = decide(snapshot(56, tasks([15] * 14)), task_overhead=True)
    stage = next(line for line in lines if line.startswith("[1] stage0"))
    assert "overhead not fitted: record counts do not spread (15 to 15 records, 1 distinct)" in stage


def test_ds2_config_turns_it_on_by_default():
    assert Ds2Config().task_overhead is True


# --- the outcome judge measures as DS2 expected (policies/outcomes.py) ----------------------------


def test_the_judge_measures_capacity_with_the_model_ds2_sized_by():
    snap, app = snapshot(56, tasks(CLICKS_RECORDS)), AppConfig(name="app", max_executors=8)
    plain = estimate(snap).capacity_rps(2)
    assert plain == pytest.approx(2 * 32.756, abs=0.01)  # both cores at the linear true rate
    assert measured(CAPACITY, snap, app, 2, task_overhead=False) == (pytest.approx(plain), pytest.approx(56 / plain))
    # The overhead model reads 600 x (1 - 0.37 / 2) rec/s from the same window, as before by default.
    overhead = estimate(snap, task_overhead=True).capacity_rps(2)
    assert overhead == pytest.approx(600 * (1 - 14 * 0.4 / 15 / 2))
    assert measured(CAPACITY, snap, app, 2, task_overhead=True)[0] == pytest.approx(overhead)
    assert measured(CAPACITY, snap, app, 2) == measured(CAPACITY, snap, app, 2, task_overhead=True)


def test_an_ineffective_scale_up_by_plain_ds2_is_not_judged_met_by_the_overhead_model():
    # Plain DS2 expected 1 -> 2 cores to double the capacity of the window; after it the tasks pay
    # twice the fixed cost, so plain DS2's capacity on 2 cores barely moved (35 of the 65.5 expected)
    # and the backlog grows. The overhead model reads 376 rec/s from that window: "met".
    before = estimate(snapshot(56, tasks(CLICKS_RECORDS)))
    expected = Expectation("under_provisioning", "scale_executors", CAPACITY, before.capacity_rps(1) or 0.0,
                           before.capacity_rps(2) or 0.0, 0.0)
    after = snapshot(56, tasks(CLICKS_RECORDS, f_s=0.8), backlog=1000)  # over 3 batches of arrivals
    app = AppConfig(name="app", max_executors=8)
    plain = judge(expected, after, app, 0.5, cores=2, task_overhead=False)
    assert plain.observed == pytest.approx(34.95, abs=0.01)
    assert not plain.met and plain.ineffective
    assert judge(expected, after, app, 0.5, cores=2, task_overhead=True).met
    assert judge(expected, after, app, 0.5, cores=2).met  # the default: the overhead model, as before


@pytest.mark.parametrize(("policy", "task_overhead"), [
    (PolicyConfig(), True),
    (PolicyConfig(ds2=Ds2Config(task_overhead=False)), False),
    (PolicyConfig(name="threshold", ds2=Ds2Config(task_overhead=False)), True),  # not DS2: the default
])
def test_capacity_is_measured_with_the_overhead_only_where_ds2_sizes_by_it(policy: PolicyConfig,
                                                                          task_overhead: bool):
    assert capacity_task_overhead(policy) is task_overhead
