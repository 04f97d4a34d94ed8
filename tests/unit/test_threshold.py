"""Threshold rules: metrics from the snapshot, rules that fire only after N windows, the DStreams preset."""

from __future__ import annotations

from typing import Any

import pytest

from sparkscale.config import AppConfig, PolicyConfig
from sparkscale.model.plan import Plan
from sparkscale.model.snapshot import Snapshot
from sparkscale.policies.base import get_policy
from sparkscale.policies.history import DecisionHistory
from sparkscale.policies.threshold import ThresholdConfig, ThresholdPolicy, ThresholdRule, metrics_of

APP = AppConfig(name="app", max_executors=8)


def make(*, batch: float | None = 0.5, trigger: float | None = 1.0, executors: int = 2, backlog: float = 0,
         extensions: dict[str, Any] | None = None, taken_at: float = 1000.0, query: str = "q") -> Snapshot:
    return Snapshot.from_dict({
        "version": 1, "app": "app", "query": query, "taken_at": taken_at, "window_s": 10.0,
        "trigger_interval_s": trigger, "batch_duration_s": batch,
        "executors": [{"id": str(k + 1), "host": "h", "cores": 1} for k in range(executors)],
        "operators": [{"id": "src", "source": True, "parallelism": 1, "arrival_rate": 10.0, "backlog": backlog,
                       "instances": []}],
        "edges": [],
        "extensions": extensions or {},
    })


def rule(metric: str, op: str, value: float, for_windows: int = 1, delta: int = 1) -> ThresholdRule:
    return ThresholdRule(metric=metric, op=op, value=value, for_windows=for_windows, executors_delta=delta)  # type: ignore[arg-type]


def cfg(*rules: ThresholdRule, preset: str = "custom") -> PolicyConfig:
    return PolicyConfig(name="threshold", threshold=ThresholdConfig(preset=preset, rules=list(rules)))  # type: ignore[arg-type]


def decide(snap: Snapshot, history: DecisionHistory | None = None, config: PolicyConfig | None = None,
           app: AppConfig = APP) -> Plan:
    history = history if history is not None else DecisionHistory.empty()
    return ThresholdPolicy().decide(snap, history, config or cfg(preset="dstreams"), app)


def delta(plan: Plan) -> int:
    scales = [a for a in plan.actions if a.type == "scale_executors"]
    return 0 if not scales else scales[0].to - scales[0].from_  # type: ignore[operator]


def cpu(fraction: float, scope: str = "host") -> dict[str, Any]:
    return {scope: {"cpu_fraction": fraction}}


def run(config: PolicyConfig, cpus: list[float]) -> list[Plan]:
    """Decide on successive windows 10 s apart, each decision going into the next one's history."""
    history = DecisionHistory.empty()
    plans = []
    for n, value in enumerate(cpus):
        t = 1000.0 + 10 * n
        plan = decide(make(extensions=cpu(value), taken_at=t), history, config)
        history = history.with_decision(t, plan)
        plans.append(plan)
    return plans


# ---------------------------------------------------------------------------------------------
# DStreams preset


@pytest.mark.parametrize(("batch", "change"), [(0.95, +1), (0.9, +1), (0.5, 0), (0.3, -1), (0.2, -1)])
def test_dstreams_preset_follows_the_batch_ratio(batch, change):
    plan = decide(make(batch=batch))
    assert delta(plan) == change
    if change:
        assert plan.changes[0].from_ == 2


def test_dstreams_preset_uses_the_apps_trigger_interval_when_the_snapshot_has_none():
    app = AppConfig(name="app", trigger_interval_s=4.0, max_executors=8)
    assert delta(decide(make(batch=3.8, trigger=None), app=app)) == +1  # 3.8 / 4 = 0.95
    assert delta(decide(make(batch=0.8, trigger=None), app=app)) == -1  # 0.2


def test_dstreams_preset_stays_within_the_executor_range():
    assert decide(make(batch=0.95, executors=8)).changes == ()
    assert decide(make(batch=0.2, executors=1)).changes == ()


def test_custom_preset_ignores_the_dstreams_rules():
    assert decide(make(batch=0.95), config=cfg()).actions == ()


# ---------------------------------------------------------------------------------------------
# Rules over N windows


def test_a_rule_fires_only_after_holding_for_its_windows():
    plans = run(cfg(rule("cpu", ">", 0.7, for_windows=3)), [0.8, 0.9, 0.75, 0.5, 0.8])
    assert [delta(p) for p in plans] == [0, 0, 1, 0, 0]
    assert "fires (last 3 window(s): 0.8, 0.9, 0.75)" in plans[2].explanation[1]
    assert "does not fire (last 3 window(s): 0.9, 0.75, 0.5)" in plans[3].explanation[1]


def test_a_window_in_between_that_missed_resets_the_count():
    plans = run(cfg(rule("cpu", ">", 0.7, for_windows=3)), [0.8, 0.6, 0.8, 0.8])
    assert [delta(p) for p in plans] == [0, 0, 0, 0]
    plans = run(cfg(rule("cpu", ">", 0.7, for_windows=3)), [0.8, 0.6, 0.8, 0.8, 0.8])
    assert delta(plans[-1]) == 1


def test_a_window_whose_metric_is_unknown_breaks_the_run():
    config = cfg(rule("cpu", ">", 0.7, for_windows=2))
    history = DecisionHistory.empty().with_decision(990.0, decide(make(), config=config))  # no cpu figure
    assert decide(make(extensions=cpu(0.9)), history, config).actions == ()
    history = DecisionHistory.empty().with_decision(990.0, decide(make(extensions=cpu(0.9)), config=config))
    assert delta(decide(make(extensions=cpu(0.9)), history, config)) == 1


def test_windows_of_another_query_do_not_count():
    config = cfg(rule("cpu", ">", 0.7, for_windows=2))
    other = decide(make(extensions=cpu(0.9), query="other"), config=config)
    history = DecisionHistory.empty().with_decision(990.0, other)
    assert decide(make(extensions=cpu(0.9)), history, config).actions == ()


# ---------------------------------------------------------------------------------------------
# Metrics


def test_metrics_read_from_the_snapshot_and_its_extensions():
    snap = make(batch=0.4, trigger=2.0, backlog=250,
                extensions={"host": {"cpu_fraction": 0.9, "memory_fraction": 0.3},
                            "app": {"cpu_fraction": 0.6, "task_time_fraction": 0.7}})
    assert metrics_of(snap, APP) == {"cpu": 0.6, "busy": 0.7, "batch_ratio": 0.2, "backlog": 250, "memory": 0.3}
    assert metrics_of(make(batch=None), APP) == {"cpu": None, "busy": None, "batch_ratio": None, "backlog": 0,
                                                 "memory": None}


@pytest.mark.parametrize(("metric", "snap_kwargs", "op", "value"), [
    ("backlog", {"backlog": 5000}, ">", 1000),
    ("memory", {"extensions": {"app": {"memory_fraction": 0.95}}}, ">=", 0.9),
    ("batch_ratio", {"batch": 0.1}, "<", 0.2),
])
def test_each_metric_can_drive_a_rule(metric, snap_kwargs, op, value):
    config = cfg(rule(metric, op, value, delta=2))
    assert delta(decide(make(**snap_kwargs), config=config)) == 2
    assert decide(make(), config=config).actions == ()


def test_an_unknown_metric_never_fires():
    plan = decide(make(batch=None), config=cfg(rule("memory", "<", 0.5, delta=-1)))
    assert plan.actions == ()
    assert "does not fire (last 1 window(s): unknown)" in plan.explanation[1]


def test_scale_up_wins_and_the_least_risky_step_down_is_taken():
    snap = make(executors=4, extensions={"host": {"cpu_fraction": 0.2, "memory_fraction": 0.95}})
    up_and_down = cfg(rule("cpu", "<", 0.3, delta=-1), rule("memory", ">", 0.9, delta=1),
                      rule("memory", ">", 0.8, delta=3))
    assert delta(decide(snap, config=up_and_down)) == 3
    downs = cfg(rule("cpu", "<", 0.3, delta=-2), rule("cpu", "<", 0.5, delta=-1))
    assert delta(decide(snap, config=downs)) == -1


def test_observations_record_every_metric():
    obs = decide(make(batch=0.5, extensions=cpu(0.4))).observation
    assert (obs.query, dict(obs.figures)) == ("q", {"cpu": 0.4, "busy": None, "batch_ratio": 0.5, "backlog": 0,
                                                   "memory": None})


def test_registered_as_threshold():
    assert isinstance(get_policy("threshold"), ThresholdPolicy)
