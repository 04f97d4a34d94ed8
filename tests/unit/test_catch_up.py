"""Issue 33: measured change costs (policies/change_costs.py), DS2's restart-aware catch-up and
migration payback (policies/catch_up.py, ds2.py), and the ineffective-scaling guard
(policies/ineffective.py). Every setting is off or neutral by default."""

from __future__ import annotations

from typing import Any

import pytest

from sparkscale.config import AppConfig, GuardsConfig, LoopConfig, PolicyConfig
from sparkscale.model.journal import Journal
from sparkscale.model.plan import Action, Observation, Plan
from sparkscale.model.snapshot import Snapshot
from sparkscale.policies.catch_up import foreseen_kind
from sparkscale.policies.change_costs import (
    EXECUTOR_ADD,
    EXECUTOR_REMOVE,
    MIGRATION_PREFIX,
    change_kind,
    cost_s,
    executor_stall_s,
    migration_kind,
    migration_stall_s,
)
from sparkscale.policies.ds2 import Ds2Config, Ds2Policy
from sparkscale.policies.ds2_model import estimate
from sparkscale.policies.guards import GuardInput, apply_guards
from sparkscale.policies.history import DecisionHistory, HistoryError, ScalingObservation
from sparkscale.policies.ineffective import ARRIVAL_FIGURE, SCALABILITY_FIGURE
from tests.unit.test_ds2 import inst, op, snapshot

DEFAULTS = {EXECUTOR_ADD: 9.0, EXECUTOR_REMOVE: 0.0, MIGRATION_PREFIX: 20.0}
EDGES = [["src", "o1"]]


def costs(kind: str, *samples: float, history: DecisionHistory | None = None) -> DecisionHistory:
    history = history if history is not None else DecisionHistory.empty()
    for s in samples:
        history = history.with_change_cost(kind, s)
    return history


# -- 1. measured change costs ------------------------------------------------------------------------


def test_cost_is_the_median_of_the_newest_samples_else_the_default():
    assert cost_s(DecisionHistory.empty(), EXECUTOR_ADD, DEFAULTS, 0.0).seconds == 9.0
    assert cost_s(DecisionHistory.empty(), EXECUTOR_ADD, DEFAULTS, 0.0).samples == 0
    assert "configured default" in cost_s(DecisionHistory.empty(), EXECUTOR_ADD, DEFAULTS, 0.0).explain()
    # The newest 5 of 1, 100, 100, 3, 4, 5: median of (100, 100, 3, 4, 5) = 5.
    measured = cost_s(costs(EXECUTOR_ADD, 1, 100, 100, 3, 4, 5), EXECUTOR_ADD, DEFAULTS, 0.0)
    assert (measured.seconds, measured.samples) == (5.0, 5)
    assert "median of the last 5 measured" in measured.explain()
    # Per kind: executor-add samples do not make a removal's cost.
    assert cost_s(costs(EXECUTOR_ADD, 30), EXECUTOR_REMOVE, DEFAULTS, 0.0).seconds == 0.0


def test_migration_costs_are_per_strategy_and_pooled_when_the_strategy_is_unknown():
    history = costs(migration_kind("ccr"), 40, 50, history=costs(migration_kind("dsm"), 10))
    assert cost_s(history, migration_kind("ccr"), DEFAULTS, 0.0).seconds == 45.0
    assert cost_s(history, migration_kind("dcr"), DEFAULTS, 0.0).seconds == 20.0  # the restart default
    assert cost_s(history, MIGRATION_PREFIX, DEFAULTS, 0.0).seconds == 40.0  # median of 40, 50, 10


def test_change_kinds_and_stalls():
    assert change_kind(Action.scale_executors(2, 3, "")) == EXECUTOR_ADD
    assert change_kind(Action.scale_executors(3, 2, "")) == EXECUTOR_REMOVE
    assert change_kind(Action.set_parallelism("q/o1", 2, 4, ""), "dcr") == "migration_dcr"
    assert change_kind(Action.warn("x")) is None
    assert executor_stall_s(12.5, 2.5) == 10.0
    assert executor_stall_s(1.0, 2.5) == 0.0
    journal = Journal("m1", "app", "q", "ccr", 2, 4, requested_at=100.0, by="d", epoch=1,
                      phases={"requested": 100.0, "paused": 101.0, "stopped": 102.0, "restarted": 110.0,
                              "resumed": 112.5})
    assert migration_stall_s(journal) == 11.5  # paused at 101 .. resumed at 112.5
    assert migration_stall_s(Journal("m2", "app", "q", "dsm", 2, 4, 100.0, "d", 1, phases={"stopped": 101.0})) is None


def test_change_costs_travel_in_the_history_and_old_files_parse():
    old = DecisionHistory.from_dict({"version": 1, "decisions": []})
    assert old.change_costs == {} and old.migration_strategy is None
    history = costs(EXECUTOR_ADD, 3, 4.5)
    history = DecisionHistory(change_costs=history.change_costs, migration_strategy="ccr")
    assert DecisionHistory.from_dict(history.to_dict()) == history
    assert history.to_dict()["change_costs"] == {EXECUTOR_ADD: [3.0, 4.5]}
    assert len(costs(EXECUTOR_ADD, *range(30)).change_costs[EXECUTOR_ADD]) == 20
    with pytest.raises(HistoryError, match="change_costs"):
        DecisionHistory.from_dict({"version": 1, "change_costs": {EXECUTOR_ADD: [-1]}})


# -- 2. restart-aware catch-up and migration payback --------------------------------------------------


def up_snap(arrival: float = 150, partitions: int = 8, executors: int = 1) -> Snapshot:
    # o1: 100 rec/s per instance; the source sends `arrival` rec/s with no backlog.
    return snapshot([op("src", 1, [inst(arrival, arrival, 1)], arrival=arrival, backlog=0),
                     op("o1", partitions, [inst(100, 100, 1)])], EDGES, executors)


def decide(snap: Snapshot, history: DecisionHistory | None = None, **ds2: Any) -> Plan:
    cfg = PolicyConfig(target_utilization=1.0, ds2=Ds2Config(catch_up_s=60, **ds2))
    app = AppConfig(name="app", max_executors=64)
    return Ds2Policy().decide(snap, history if history is not None else DecisionHistory.empty(), cfg, app)


def executors_to(plan: Plan) -> int | None:
    return next((a.to for a in plan.actions if a.type == "scale_executors"), None)


def test_restart_aware_is_off_by_default():
    cfg = Ds2Config()
    assert (cfg.restart_aware, cfg.payback_horizon_s) == (False, None)
    # 150 rec/s at 100 per core: 2 cores, whatever the measured cost.
    plan = decide(up_snap(), costs(EXECUTOR_ADD, 30, 30, 30))
    assert executors_to(plan) == 2
    assert not any("restart-aware" in line for line in plan.explanation)


def test_restart_aware_drains_what_arrives_during_the_measured_stall():
    # target = 150 + (0 + 150 x 30 s) / 60 s = 225 rec/s -> 2.25 cores -> 3 executors (2 without).
    plan = decide(up_snap(), costs(EXECUTOR_ADD, 30, 30, 30), restart_aware=True)
    assert executors_to(plan) == 3
    assert any("restart-aware catch-up: executor_add costs 30 s of stall (median of the last 3 measured)" in line
               for line in plan.explanation)
    assert any("target input rate = arrival 150 + (backlog 0 + arrival 150 x stall 30 s) / 60 s = 225" in line
               for line in plan.explanation)
    # Unmeasured: the default, 9 s: 150 + 150 x 9 / 60 = 172.5 -> 2 executors; the line says so.
    plan = decide(up_snap(), restart_aware=True)
    assert executors_to(plan) == 2
    assert any("executor_add costs 9 s of stall (configured default" in line for line in plan.explanation)


def test_restart_aware_counts_no_stall_when_nothing_changes():
    plan = decide(up_snap(arrival=100), costs(EXECUTOR_ADD, 30), restart_aware=True)
    assert executors_to(plan) is None
    assert "restart-aware catch-up: no change foreseen, no stall counted" in plan.explanation


def test_the_foreseen_change_is_a_migration_when_ds2_repartitions():
    est = estimate(up_snap(partitions=1))
    assert foreseen_kind(est, 1, "ccr") == "migration_ccr"
    assert foreseen_kind(est, 1, None) == MIGRATION_PREFIX
    assert foreseen_kind(estimate(up_snap()), 1, None) == EXECUTOR_ADD
    assert foreseen_kind(estimate(up_snap(arrival=50)), 2, None) == EXECUTOR_REMOVE
    assert foreseen_kind(estimate(up_snap(arrival=100)), 1, None) is None


def test_stall_adds_to_the_sources_target_rate():
    assert estimate(up_snap(), catch_up_s=60, stall_s=20).source_target_rate == pytest.approx(200.0)
    with pytest.raises(ValueError, match="stall_s"):
        estimate(up_snap(), stall_s=-1)


def migrations(plan: Plan) -> list[Action]:
    return [a for a in plan.actions if a.type == "set_parallelism"]


def test_a_migration_is_kept_only_when_it_pays_back_its_measured_stall():
    # o1 has 1 partition for 1.5 cores of work: DS2 asks 2 executors and a repartition. On 2 cores,
    # 1 partition takes in 100 rec/s and the repartition all 150: it gains 50 rec/s.
    snap = up_snap(partitions=1)
    assert migrations(decide(snap)) != []  # no horizon: no check, as before
    cheap = costs(migration_kind("ccr"), 5)
    cheap = DecisionHistory(change_costs=cheap.change_costs, migration_strategy="ccr")
    # 50 rec/s x 60 s = 3000 records > 150 rec/s x 5 s = 750 lost: kept.
    plan = decide(snap, cheap, payback_horizon_s=60)
    assert migrations(plan) != [] and executors_to(plan) == 2
    assert any("migration payback: it gains 50 rec/s x 60 s horizon = 3,000 records; its stall loses 750 records"
               in line and "it pays back" in line for line in plan.explanation)
    # Measured at 100 s: 15,000 records lost > 3,000 gained: dropped, executor scaling alone.
    dear = DecisionHistory(change_costs=costs(migration_kind("ccr"), 100).change_costs, migration_strategy="ccr")
    plan = decide(snap, dear, payback_horizon_s=60)
    assert migrations(plan) == [] and executors_to(plan) == 2
    assert any("does not pay back" in line and "migration_ccr costs 100 s" in line for line in plan.explanation)
    assert any(line.startswith("migration dropped: set_parallelism") and line.endswith("executor scaling alone")
               for line in plan.explanation)


# -- 3. ineffective scaling ---------------------------------------------------------------------------

NOW = 10_000.0
APP = AppConfig(name="app", min_executors=1, max_executors=8)
OFF: dict[str, Any] = {"scale_down_delay_s": 0, "max_scale_up_factor": 100, "max_scale_down_factor": 100}
LOOP_OFF = LoopConfig(cooldown_s=0, stabilization_s=0)
ON: dict[str, Any] = {"ineffective_scale_up_fraction": 0.5, "ineffective_hold_s": 600}


def g_snap(arrival: float = 100.0, taken_at: float = NOW, executors: int = 4) -> Snapshot:
    return Snapshot.from_dict({
        "version": 1, "app": "app", "query": "q", "taken_at": taken_at, "window_s": 30.0,
        "executors": [{"id": str(k + 1), "host": "h", "cores": 1} for k in range(executors)],
        "operators": [{"id": "src", "source": True, "parallelism": 1, "arrival_rate": arrival, "instances": [],
                       "backlog": 0}],
        "edges": [],
    })


def judged(gain_ratio: float, at: float = NOW - 100, arrival: float = 100.0, query: str = "q") -> DecisionHistory:
    """A history whose decision before the scale-up recorded `arrival`, and the scale-up 2 -> 4
    cores judged at `at`, expected 100 -> 200 rec/s, observed 100 + 100 x gain_ratio."""
    before = Plan("ds2", "app", observation=Observation(query="q", figures={ARRIVAL_FIGURE: arrival}))
    history = DecisionHistory.empty().with_decision(at - 60, before)
    return history.with_scaling(ScalingObservation(query, at, 2, 4, 100.0, 200.0, 100.0 + 100.0 * gain_ratio))


def guard(history: DecisionHistory, snap: Snapshot | None = None, plan: Plan | None = None, **settings: Any) -> Plan:
    plan = plan if plan is not None else Plan("ds2", "app", actions=(Action.scale_executors(4, 6, "ds2 says so"),))
    given = GuardInput(snap if snap is not None else g_snap(), history, APP)
    return apply_guards(plan, given, GuardsConfig(**{**OFF, **settings}), LOOP_OFF)


def scaled(plan: Plan) -> int | None:
    return executors_to(plan)


def test_ineffective_scaling_is_off_by_default():
    assert GuardsConfig().ineffective_scale_up_fraction is None
    plan = guard(judged(0.1))
    assert scaled(plan) == 6
    assert ARRIVAL_FIGURE not in plan.observation.figures


def test_a_scale_up_after_an_ineffective_one_is_held_with_a_warning():
    plan = guard(judged(0.2), **ON)
    assert scaled(plan) is None
    (warning,) = [a for a in plan.actions if a.type == "warn"]
    assert warning.reason.startswith("ineffective scaling: the last scale-up (2 -> 4 cores) brought 0.20 of the "
                                     "capacity gain expected (under 0.5)")
    assert "until the arrival rate moves by more than 20% from 100 rec/s" in warning.reason
    assert any(line.startswith("guard ineffective scaling: scale_executors") for line in plan.explanation)
    assert plan.observation.figures[SCALABILITY_FIGURE] == pytest.approx(0.2)
    assert plan.observation.figures[ARRIVAL_FIGURE] == 100.0


def test_an_effective_scale_up_a_scale_down_or_another_query_hold_nothing():
    assert scaled(guard(judged(0.8), **ON)) == 6
    down = Plan("ds2", "app", actions=(Action.scale_executors(4, 2, "less"),))
    assert scaled(guard(judged(0.1), plan=down, **ON)) == 2
    assert scaled(guard(judged(0.1, query="other"), **ON)) == 6


def test_the_hold_ends_when_the_load_changes_or_the_window_passes():
    plan = guard(judged(0.1), g_snap(arrival=130), **ON)  # +30 % > 20 %
    assert scaled(plan) == 6
    assert any("the arrival rate moved 100 -> 130 rec/s" in line for line in plan.explanation)
    assert scaled(guard(judged(0.1), g_snap(arrival=115), **ON)) is None  # +15 %: held
    assert scaled(guard(judged(0.1), g_snap(arrival=115), ineffective_load_change=0.1,
                        ineffective_scale_up_fraction=0.5)) == 6
    plan = guard(judged(0.1, at=NOW - 700), **ON)
    assert scaled(plan) == 6
    assert any("hold is over" in line for line in plan.explanation)


def test_the_next_ds2_decision_uses_the_observed_scalability():
    # Judged at 0.5 of its expected gain: once the hold ends, DS2 asks twice the added cores
    # (policies/scalability.py): 2 cores needed, 1 held -> 1 + 1 / 0.5 = 3.
    history = judged(0.5)
    plan = decide(up_snap(), history, scalability_min_observations=1)
    assert executors_to(plan) == 3
    assert any(line.startswith("observed scalability coefficient 0.50") for line in plan.explanation)
    assert executors_to(decide(up_snap(), history)) == 2  # fewer than 3 judged scale-ups: not used
