"""Judging executed actions: expectations per policy and direction, verdicts, the blocklist filter."""

from __future__ import annotations

from typing import Any

import pytest

from sparkscale.config import AppConfig
from sparkscale.daemon.operator_view import parse_since
from sparkscale.model.plan import Action, Observation, Plan
from sparkscale.model.snapshot import Snapshot
from sparkscale.policies.outcomes import KEEPS_UP, Blocklist, diagnosis_of, drop_blocked, expectation_for, judge

APP = AppConfig(name="app", max_executors=16)


def snap(*, executors: int = 2, batch: float | None = 0.8, arrival: float = 100.0, backlog: float = 0.0,
         source_records: float = 3000, taken_at: float = 10_000.0) -> Snapshot:
    """`src -> work` over a 30 s window; `source_records` / 30 is the processed rate."""
    share = source_records / executors

    def inst(records: float, executor: str) -> dict[str, Any]:
        return {"records_in": records, "records_out": records, "useful_time_s": 1.0, "executor": executor}

    return Snapshot.from_dict({
        "version": 1, "app": "app", "query": "q", "taken_at": taken_at, "window_s": 30.0,
        "trigger_interval_s": 1.0, "batch_duration_s": batch,
        "executors": [{"id": str(k + 1), "host": "h", "cores": 1} for k in range(executors)],
        "operators": [
            {"id": "src", "source": True, "parallelism": executors, "arrival_rate": arrival, "backlog": backlog,
             "instances": [inst(share, str(k + 1)) for k in range(executors)]},
            {"id": "work", "parallelism": executors, "instances": [inst(share, str(k + 1)) for k in range(executors)]},
        ],
        "edges": [["src", "work"]],
    })


def plan_of(*actions: Action, observations: dict[str, Any] | None = None, policy: str = "ds2") -> Plan:
    return Plan(policy, "app", actions=actions, explanation=("why",), observation=Observation.from_dict(observations))


def test_diagnosis_comes_from_the_policy_or_from_the_direction():
    up, down = Action.scale_executors(2, 4, "r"), Action.scale_executors(4, 2, "r")
    assert diagnosis_of(plan_of(up), up) == "under_provisioning"
    assert diagnosis_of(plan_of(down), down) == "over_provisioning"
    assert diagnosis_of(plan_of(up, observations={"diagnosis": "slow_instance"}), up) == "slow_instance"
    replace = Action.replace_executor("3", "slow")
    assert diagnosis_of(plan_of(replace), replace) == "slow_instance"


def test_scale_up_expects_the_processed_rate_to_rise_in_proportion_up_to_the_need():
    # processed 3000/30 = 100/s, arrival 300/s, no backlog: doubling expects 200/s (below the 300/s needed).
    s = snap(arrival=300.0, source_records=3000, batch=1.5)
    e = expectation_for(plan_of(Action.scale_executors(2, 4, "r")), s, APP)
    assert (e.metric, e.before, e.after, e.diagnosis) == ("processed_rate", pytest.approx(100.0),
                                                          pytest.approx(200.0), "under_provisioning")
    # x8 would be 800/s, but only 300/s (+ backlog 3000 over 30 s = 100/s) is needed.
    s = snap(arrival=300.0, backlog=3000.0, source_records=3000, batch=1.5)
    e = expectation_for(plan_of(Action.scale_executors(2, 16, "r")), s, APP)
    assert e.after == pytest.approx(400.0)


def test_scale_down_and_nothing_expect_keeping_up():
    s = snap()
    assert expectation_for(plan_of(Action.scale_executors(4, 2, "r")), s, APP).metric == KEEPS_UP
    assert expectation_for(plan_of(Action.warn("only a warning")), s, APP) is None
    assert expectation_for(plan_of(), s, APP) is None


def test_a_dhalion_plan_keeps_its_own_expectation():
    recorded = {"diagnosis": "under_provisioning", "expected": {
        "diagnosis": "under_provisioning", "action_type": "scale_executors", "metric": "batch_ratio",
        "before": 2.0, "after": 1.0}}
    e = expectation_for(plan_of(Action.scale_executors(2, 4, "r"), observations=recorded, policy="dhalion"),
                        snap(batch=2.0), APP)
    assert (e.metric, e.before, e.after) == ("batch_ratio", 2.0, 1.0)
    assert plan_of(observations=recorded).observation.diagnosis == "under_provisioning"


def test_judge_rise_met_when_enough_of_the_change_came():
    before = snap(arrival=300.0, source_records=3000, batch=1.5, backlog=5000)
    e = expectation_for(plan_of(Action.scale_executors(2, 4, "r")), before, APP)  # 100 -> 200/s
    # 160/s is 60 % of the expected rise (>= 0.5): met, though the app still lags (backlog grew).
    v = judge(e, snap(arrival=300.0, source_records=4800, batch=1.5, backlog=9000), APP, 0.5)
    assert v.met and not v.keeps_up and v.observed == pytest.approx(160.0)
    # 120/s is 20 %: not met.
    v = judge(e, snap(arrival=300.0, source_records=3600, batch=1.5, backlog=9000), APP, 0.5)
    assert not v.met and "no" in v.detail


def test_judge_rise_short_but_keeping_up_is_met():
    before = snap(arrival=300.0, source_records=3000, batch=1.5, backlog=5000)
    e = expectation_for(plan_of(Action.scale_executors(2, 4, "r")), before, APP)
    # The load fell: processed 110/s only, but batches fit and the backlog is gone.
    v = judge(e, snap(arrival=110.0, source_records=3300, batch=0.5, backlog=0), APP, 0.5)
    assert v.met and v.keeps_up


def test_judge_scale_down_fails_when_the_app_falls_behind():
    e = expectation_for(plan_of(Action.scale_executors(4, 2, "r")), snap(backlog=50), APP)
    assert judge(e, snap(batch=0.7, backlog=40), APP, 0.5).met
    # Batches longer than the trigger with a steady backlog: still keeping up (back-to-back batches).
    assert judge(e, snap(batch=1.8, backlog=40), APP, 0.5).met
    v = judge(e, snap(batch=0.9, backlog=5000), APP, 0.5)
    assert not v.met and "does not keep up" in v.detail


def test_drop_blocked_removes_only_the_blocked_pair_and_explains():
    up = Action.scale_executors(2, 4, "more")
    warn = Action.warn("skew")
    plan = plan_of(up, warn, observations={"figures": {"x": 1}})
    blocked = Blocklist().block("app", "under_provisioning", "scale_executors", now=100.0, ttl_s=600)
    out = drop_blocked(plan, blocked, now=200.0)
    assert out.actions == (warn,)
    assert any(line.startswith("blocklist: dropped scale_executors 2 -> 4") for line in out.explanation)
    assert out.explanation[0] == "why" and out.observation == plan.observation  # kept as they were
    # Another diagnosis, another app, or an expired entry: untouched.
    assert drop_blocked(plan_of(Action.scale_executors(4, 2, "less")), blocked, 200.0).changes
    assert drop_blocked(plan, blocked, now=800.0) is plan
    assert drop_blocked(Plan("ds2", "other", actions=(up,)), blocked, 200.0).changes == (up,)


def test_parse_since():
    assert parse_since("90s", 1000.0) == 910.0
    assert parse_since("2m", 1000.0) == 880.0
    assert parse_since("1h", 7200.0) == 3600.0
    assert parse_since("2026-11-22T10:00:00+00:00", 0) == 1795341600.0
    with pytest.raises(ValueError, match="expected a duration"):
        parse_since("yesterday", 0)


def test_a_plans_stage_wishes_become_one_migration_of_the_query():
    from sparkscale.model.plan import Action
    from sparkscale.policies.planner import map_to_spark

    actions = (Action.scale_executors(2, 4, "more"), Action.set_parallelism("stage0", 2, 26, "source stage"),
               Action.set_parallelism("stage1", 4, 18, "bound"), Action.set_parallelism("stage2", 4, 24, "bound too"))
    mapped = map_to_spark(Plan("ds2", "app", actions=actions), "counts", current_partitions=4)
    migration = mapped.actions[1]
    assert (migration.query, migration.from_, migration.to) == ("counts", 4, 24)
    assert migration.operator == "stage2"  # the stage that asked for the most stays the action's operator
    assert "stage1: bound" in migration.reason and "stage2: bound too" in migration.reason
    # stage0 reads the source: its 2 partitions are the source's, which no migration changes.
    assert mapped.actions == (actions[0], migration)
    assert any("dropped set_parallelism stage0 2 -> 26" in line for line in mapped.explanation)
    only_source = map_to_spark(Plan("ds2", "app", actions=actions[:2]), "counts", 4)
    assert only_source.changes == (actions[0],)


def test_a_dhalion_scale_down_is_judged_by_the_utilisation_it_recorded_not_the_batch_ratio():
    # Dhalion's scale-down records `utilization`, the larger of load utilisation and batch ratio.
    recorded = {"diagnosis": "over_provisioning", "expected": {
        "diagnosis": "over_provisioning", "action_type": "scale_executors", "metric": "utilization",
        "before": 0.2, "after": 0.4}}
    e = expectation_for(plan_of(Action.scale_executors(4, 2, "r"), observations=recorded, policy="dhalion"),
                        snap(executors=4, batch=0.1), APP)
    # After: 2 executors, batch ratio 0.1; load 1000 rec/s x (2 x 1 s of the stage / 3000 source
    # records) / 2 cores = 0.333, the larger: that is the figure judged.
    v = judge(e, snap(executors=2, batch=0.1, arrival=1000.0), APP, 0.5)
    assert v.observed == pytest.approx(1 / 3)
    assert v.met
