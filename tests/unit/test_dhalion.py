"""Dhalion: each symptom, diagnosis and resolver, the blocklist, and outcome evaluation.

The query is `src -> work`; executors have one core; the window is 30 s and the trigger 1 s.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from sparkscale.config import AppConfig, PolicyConfig
from sparkscale.model.plan import ExpectedOutcome, Plan, evaluate_outcome
from sparkscale.model.snapshot import Snapshot
from sparkscale.policies.base import get_policy
from sparkscale.policies.dhalion import (
    DhalionConfig,
    DhalionPolicy,
    detect_backpressure,
    detect_skew,
    detect_slow_instances,
)
from sparkscale.policies.figures import load_figures
from sparkscale.policies.history import DecisionHistory
from sparkscale.policies.outcomes import BlockedAction, Blocklist

NOW = 10_000.0


def inst(records: float, useful_s: float, executor: str) -> dict[str, Any]:
    return {"records_in": records, "records_out": records, "useful_time_s": useful_s, "executor": executor}


def even(executors: int, records: float = 1000, useful_s: float = 1.0) -> list[dict[str, Any]]:
    """One `work` instance per executor, all alike."""
    return [inst(records, useful_s, str(k + 1)) for k in range(executors)]


def make(work: list[dict[str, Any]] | None = None, *, executors: int = 2, batch: float | None = 0.8,
         arrival: float = 100.0, backlog: float = 0.0, source_records: float = 3000,
         taken_at: float = NOW, query: str = "q") -> Snapshot:
    share = source_records / executors
    return Snapshot.from_dict({
        "version": 1, "app": "app", "query": query, "taken_at": taken_at, "window_s": 30.0,
        "trigger_interval_s": 1.0, "batch_duration_s": batch,
        "executors": [{"id": str(k + 1), "host": "h", "cores": 1} for k in range(executors)],
        "operators": [
            {"id": "src", "source": True, "parallelism": executors, "arrival_rate": arrival, "backlog": backlog,
             "instances": [inst(share, 0.1, str(k + 1)) for k in range(executors)]},
            {"id": "work", "parallelism": executors, "instances": work if work is not None else even(executors)},
        ],
        "edges": [["src", "work"]],
    })


def config(u: float = 1.0, **dhalion: Any) -> PolicyConfig:
    return PolicyConfig(name="dhalion", target_utilization=u, dhalion=DhalionConfig(**dhalion))


def decide(snap: Snapshot, history: DecisionHistory | None = None, u: float = 1.0,
           app: AppConfig | None = None, **dhalion: Any) -> Plan:
    history = history if history is not None else DecisionHistory.empty()  # an empty history is falsy
    return DhalionPolicy().decide(snap, history, config(u, **dhalion),
                                  app or AppConfig(name="app", max_executors=16))


def scale(plan: Plan) -> tuple[int | None, int | None]:
    [action] = [a for a in plan.actions if a.type == "scale_executors"]
    return action.from_, action.to


def line(plan: Plan, prefix: str) -> str:
    found = [text for text in plan.explanation if text.startswith(prefix)]
    assert found, f"no explanation line starting {prefix!r} in {plan.explanation}"
    return found[0]


def backlog_history(*backlogs: float, step_s: float = 10.0, query: str = "q") -> DecisionHistory:
    """Past Dhalion decisions whose snapshots had these backlogs, the last one step_s before NOW."""
    history = DecisionHistory.empty()
    for n, backlog in enumerate(backlogs):
        t = NOW - step_s * (len(backlogs) - n)
        snap = make(backlog=backlog, batch=0.8, taken_at=t, query=query)
        history = history.with_decision(t, decide(snap, history))
    return history


# ---------------------------------------------------------------------------------------------
# Symptoms


def test_backpressure_from_a_batch_longer_than_the_trigger_interval():
    snap = make(batch=1.5)
    bp = detect_backpressure(snap, DecisionHistory.empty(), load_figures(snap, AppConfig(name="app")), 3)
    assert bp is not None and bp.batch_ratio == pytest.approx(1.5)
    calm = make(batch=1.0)  # equal to the trigger interval is not above it
    assert detect_backpressure(calm, DecisionHistory.empty(), load_figures(calm, AppConfig(name="app")), 3) is None


def test_backpressure_from_a_backlog_that_grew_over_the_windows():
    snap = make(backlog=300, batch=0.8)
    figures = load_figures(snap, AppConfig(name="app"))
    bp = detect_backpressure(snap, backlog_history(100, 200), figures, 3)
    assert bp is not None and bp.batch_ratio is None
    assert bp.backlog_trend == (100, 200, 300)
    assert bp.backlog_growth_rate == pytest.approx(200 / 20)  # records over the 20 s the trend spans


@pytest.mark.parametrize("past", [(300, 200), (100, 400), (200, 200), (200,)],
                         ids=["draining", "fell-then-rose", "flat", "too-few-windows"])
def test_no_backpressure_from_a_backlog_that_did_not_grow_throughout(past):
    snap = make(backlog=300 if past != (200, 200) else 200, batch=0.8)
    figures = load_figures(snap, AppConfig(name="app"))
    assert detect_backpressure(snap, backlog_history(*past), figures, 3) is None


def test_backlog_of_another_query_is_not_a_trend():
    snap = make(backlog=300, batch=0.8, query="q")
    figures = load_figures(snap, AppConfig(name="app"))
    assert detect_backpressure(snap, backlog_history(100, 200, query="other"), figures, 3) is None


def test_processing_rate_skew_is_max_over_median_of_records_per_instance():
    snap = make([inst(1000, 1, "1"), inst(1000, 1, "2"), inst(5000, 5, "1")])
    [skew] = detect_skew(snap, 2.0)
    assert skew.operator == "work"
    assert skew.ratio == pytest.approx(5.0)
    assert detect_skew(snap, 5.0) == ()  # not above the ratio
    # Equal amounts at unequal speeds are not skew (that is the slow-instance detector's business).
    assert detect_skew(make([inst(1000, 1, "1"), inst(1000, 5, "2"), inst(1000, 1, "1")]), 2.0) == ()


def test_slow_instance_is_an_executor_slower_per_record_than_the_median_of_the_others():
    work = [inst(1000, 1, "1"), inst(1000, 3, "2"), inst(1000, 1, "3")]
    snap = make(work, executors=3)
    [slow] = detect_slow_instances(snap, 2.0)
    assert slow.executor == "2"
    # executor 2: (0.1 + 3) s / 2000 records vs the others' (0.1 + 1) / 2000
    assert slow.ratio == pytest.approx(3.1 / 1.1)
    assert detect_slow_instances(snap, 3.0) == ()


# ---------------------------------------------------------------------------------------------
# Diagnoses and resolvers


def test_under_provisioning_scales_up_in_proportion_to_the_batch_ratio():
    plan = decide(make(batch=2.0, executors=2))
    assert scale(plan) == (2, 4)  # ceil(2 x 2.0 / 1.0)
    assert "resource under-provisioning" in line(plan, "diagnosis:")
    assert "batch duration is 2.00 x the trigger interval" in line(plan, "symptoms:")
    assert "ceil(2 x batch ratio 2.00 / target utilisation 1) = 4" in line(plan, "resolver:")
    assert plan.observation.diagnosis == "under_provisioning"


def test_under_provisioning_targets_the_utilisation_and_adds_at_least_one():
    assert scale(decide(make(batch=2.0, executors=2), u=0.8)) == (2, 5)  # ceil(4 / 0.8)
    assert scale(decide(make(batch=1.01, executors=2))) == (2, 3)  # ceil(2.02) = 3
    assert scale(decide(make(batch=1.2, executors=1))) == (1, 2)  # ceil(1.2) = 2


def test_under_provisioning_from_a_growing_backlog_uses_needed_over_processed_rate():
    # processed 6000 records / 30 s = 200 rec/s; needed = arrival 300 rec/s -> x1.5
    snap = make(backlog=300, batch=0.8, arrival=300, source_records=6000)
    plan = decide(snap, backlog_history(100, 200))
    assert scale(plan) == (2, 3)
    assert "backlog grew 100 -> 200 -> 300 records" in line(plan, "symptoms:")
    assert "needed/processed rate 1.50" in line(plan, "resolver:")


def test_under_provisioning_at_max_executors_warns_instead():
    plan = decide(make(batch=2.0, executors=2), app=AppConfig(name="app", max_executors=2, initial_executors=1))
    assert plan.changes == ()
    assert "max_executors 2" in plan.warnings[0].reason


def test_slow_instance_is_replaced_not_scaled():
    work = [inst(1000, 1, "1"), inst(1000, 3, "2"), inst(1000, 1, "3")]
    plan = decide(make(work, executors=3, batch=1.5))
    [action] = plan.actions
    assert (action.type, action.executor) == ("replace_executor", "2")
    assert "slow instance" in line(plan, "diagnosis:")
    assert "executor 2 takes" in line(plan, "symptoms:")


def test_data_skew_is_reported_as_a_warning_not_with_more_executors():
    plan = decide(make([inst(1000, 1, "1"), inst(1000, 1, "2"), inst(5000, 5, "1")], batch=3.0))
    assert plan.changes == ()
    [warning] = plan.warnings
    assert warning.operator == "work" and "data skew" in warning.reason
    assert "processing-rate skew in work" in line(plan, "symptoms:")
    assert "data skew" in line(plan, "diagnosis:")


def test_symptoms_without_backpressure_change_nothing():
    plan = decide(make([inst(1000, 1, "1"), inst(1000, 1, "2"), inst(5000, 5, "1")], batch=0.8))
    assert plan.actions == ()
    assert "processing-rate skew in work" in line(plan, "symptoms:")
    assert "healthy" in line(plan, "diagnosis:")


def over_provisioned(executors: int = 4, batch: float = 0.2) -> Snapshot:
    # 3000 source records, arrival 100 rec/s; useful time 4 x 2.9 (work) = 11.6 core-s (the source's
    # 4 x 0.1 s is not work: the source is virtual), 0.003867 core-s per record: load utilisation
    # 100 x 11.6 / 3000 / 4 cores = 0.0967 (0.1 when the source counted); batch ratio 0.2 -> u 0.2
    return make(even(executors, useful_s=2.9), executors=executors, batch=batch)


def test_over_provisioning_scales_down_to_what_the_utilisation_needs():
    snap = over_provisioned()
    figures = load_figures(snap, AppConfig(name="app"))
    assert figures.load_utilization == pytest.approx(100 * 11.6 / 3000 / 4)
    assert figures.utilization == pytest.approx(0.2)
    plan = decide(snap, u=0.8)
    assert scale(plan) == (4, 1)  # ceil(4 x 0.2 / 0.8) = 1
    assert "over-provisioning" in line(plan, "diagnosis:")
    assert scale(decide(snap, u=0.8, app=AppConfig(name="app", min_executors=2, initial_executors=2))) == (4, 2)


def test_over_provisioning_scales_down_by_at_least_one():
    # utilisation 0.4 < 0.5, but at target 0.3 it would need ceil(4 x 0.4 / 0.3) = 6: still -1.
    assert scale(decide(over_provisioned(batch=0.4), u=0.3)) == (4, 3)


def test_utilisation_above_the_bound_is_healthy():
    plan = decide(over_provisioned(batch=0.6), u=0.8)
    assert plan.actions == ()
    assert "utilisation 0.60 >= 0.5" in line(plan, "diagnosis:")


def test_the_larger_of_load_and_batch_ratio_is_the_utilisation():
    # batch ratio 0.1 but load 600 rec/s x 11.6 core-s of work / 3000 records / 4 cores = 0.58:
    # not over-provisioned. (The work stage's 4 x 2.9 s only: adding the source's 4 x 0.1 s, as the
    # old sum did, gave 0.6; on a real snapshot the source carries the whole window per partition.)
    snap = make(even(4, useful_s=2.9), executors=4, batch=0.1, arrival=600)
    figures = load_figures(snap, AppConfig(name="app"))
    assert figures.load_utilization == pytest.approx(0.58)
    assert figures.utilization == pytest.approx(0.58)
    assert decide(snap).actions == ()


# ---------------------------------------------------------------------------------------------
# Blocklist and outcomes


def blocked(diagnosis: str, action_type: str, until: float, app: str = "app") -> DecisionHistory:
    return DecisionHistory(blocklist=Blocklist((BlockedAction(app, diagnosis, action_type, until),)))  # type: ignore[arg-type]


def test_a_blocked_resolver_is_skipped_until_it_expires():
    snap = make(batch=2.0)
    plan = decide(snap, blocked("under_provisioning", "scale_executors", NOW + 100))
    assert plan.actions == ()
    text = line(plan, "diagnosis:")
    assert "skipped: blocked for this diagnosis until 10100 (100 s from now)" in text
    assert scale(decide(snap, blocked("under_provisioning", "scale_executors", NOW))) == (2, 4)  # expired


def test_a_block_for_another_app_or_diagnosis_does_not_apply():
    snap = make(batch=2.0)
    assert scale(decide(snap, blocked("under_provisioning", "scale_executors", NOW + 100, app="other"))) == (2, 4)
    assert scale(decide(snap, blocked("over_provisioning", "scale_executors", NOW + 100))) == (2, 4)


def test_a_blocked_replacement_falls_back_to_scaling_up():
    work = [inst(1000, 1, "1"), inst(1000, 3, "2"), inst(1000, 1, "3")]
    plan = decide(make(work, executors=3, batch=1.5), blocked("slow_instance", "replace_executor", NOW + 1))
    assert scale(plan) == (3, 5)  # ceil(3 x 1.5)
    assert any("replace_executor 2 skipped" in text for text in plan.explanation)
    assert plan.observation.diagnosis == "under_provisioning"


def test_blocklist_block_replaces_and_active_drops_expired():
    bl = Blocklist().block("app", "under_provisioning", "scale_executors", now=100, ttl_s=50)
    bl = bl.block("app", "under_provisioning", "scale_executors", now=120, ttl_s=50)
    assert bl.entries == (BlockedAction("app", "under_provisioning", "scale_executors", 170),)
    assert bl.find("app", "under_provisioning", "scale_executors", 169) is not None
    assert bl.find("app", "under_provisioning", "scale_executors", 170) is None
    assert bl.active(170).entries == ()
    assert bl.active(169) == bl


def test_the_history_keeps_its_blocklist_when_decisions_are_added():
    history = blocked("data_skew", "warn", 5).with_decision(1.0, Plan("dhalion", "app"))
    assert isinstance(history, DecisionHistory) and len(history) == 1
    assert history.blocklist.entries[0].diagnosis == "data_skew"
    assert replace(history, blocklist=Blocklist()).blocklist == Blocklist()


@pytest.mark.parametrize(("expected", "observed", "fraction", "met"), [
    (100, 60, 0.5, True),
    (100, 40, 0.5, False),
    (100, -10, 0.5, False),  # went the wrong way
    (-1.0, -0.6, 0.5, True),  # an expected decrease, mostly achieved
    (-1.0, -0.3, 0.5, False),
    (-1.0, 0.2, 0.5, False),
    (0, -5, 0.5, True),  # nothing expected
    (100, 100, 1.0, True),
])
def test_evaluate_outcome(expected, observed, fraction, met):
    assert evaluate_outcome(expected, observed, fraction) is met


def test_evaluate_outcome_rejects_a_fraction_outside_0_1():
    with pytest.raises(ValueError, match="fraction"):
        evaluate_outcome(1, 1, 0)
    with pytest.raises(ValueError, match="fraction"):
        evaluate_outcome(1, 1, 1.5)


def test_each_action_records_the_outcome_it_expects():
    up = expected_of(decide(make(batch=2.0)))  # 2 -> 4 executors should halve the batch ratio
    assert up == ExpectedOutcome("under_provisioning", "scale_executors", "batch_ratio", 2.0, 1.0)
    assert up.met(1.4, 0.5) and not up.met(1.8, 0.5)
    down = expected_of(decide(over_provisioned(), u=0.8))  # 4 -> 1: utilisation 0.2 -> 0.8
    assert down is not None and down.metric == "utilization" and down.after == pytest.approx(0.8)
    assert expected_of(decide(make(batch=0.8, arrival=10))) is None  # healthy: no action


def expected_of(plan: Plan) -> ExpectedOutcome | None:
    return plan.observation.expected


def test_observations_carry_the_figures_later_decisions_need():
    plan = decide(make(backlog=42, batch=1.5))
    obs = plan.observation
    assert obs.figure("backlog") == 42 and obs.figure("batch_ratio") == pytest.approx(1.5)
    assert obs.query == "q" and obs.figure("executors") == 2 and plan.actions[0].type == "scale_executors"


def test_registered_as_dhalion():
    assert isinstance(get_policy("dhalion"), DhalionPolicy)
