"""Threshold rules: the heuristic policies of the lecture ("Rule-based models, e.g. if CPU
utilization > 70% => scale out"), and the old DStreams allocator as a preset.

A rule `metric op value for N windows -> executors_delta` fires when it held in this window and in
the N-1 windows before it. Earlier windows' figures come from the decision history: every plan this
policy makes records its metrics in its observations line (`guards.observations_of`), and past
values are compared with the rule as configured now, so a changed rule applies at once. A window
whose metric is unknown ends the run. Cooldowns are the guards' business, not the rules'.

Metrics, and where they come from:

- `cpu`: `snapshot.extensions["app"]["cpu_fraction"]`: CPU time of the app's executors over
  cores x window, in [0, 1], from Spark's task metrics, so executors on any host count. Spark
  counts the task threads of the executor JVM only: time in PySpark's Python workers is not in it.
- `busy`: `extensions["app"]["task_time_fraction"]`: the share of the executors' task slots in use
  (task run time over cores x window), whatever the tasks spend it on (JVM, Python workers, I/O).
- `memory`: `extensions["app"]["memory_fraction"]`: the executors' storage memory used / available,
  as Spark reports it, in [0, 1].
  A snapshot with no figure in `extensions["app"]` (older monitors; other tools) falls back to
  `extensions["host"]`, the monitor's own host (psutil). A snapshot whose `app` section has the key
  but no value (no executors) leaves the metric unknown: the daemon's host says nothing about them.
- `batch_ratio`: batch_duration_s / trigger_interval_s (the app's trigger interval when the
  snapshot has none).
- `backlog`: records waiting, summed over the source operators.

When several rules fire, scaling up wins (the largest delta up); otherwise the smallest step down
(the least risky). The target stays within the app's executor range.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import ClassVar, Literal

from pydantic import Field, JsonValue, field_validator

from sparkscale.config import AppConfig, ConfigSection, PolicyConfig
from sparkscale.model.plan import Action, Observation, Plan
from sparkscale.model.snapshot import Snapshot
from sparkscale.policies.base import register_policy
from sparkscale.policies.history import DecisionHistory


class ThresholdRule(ConfigSection):
    """`metric op value` for `for_windows` windows -> change executors by `executors_delta`."""

    metric: Literal["cpu", "busy", "batch_ratio", "backlog", "memory"] = Field(examples=["cpu"], description=(
        "cpu: task CPU time over cores x window; busy: share of task slots in use; batch_ratio: batch "
        "duration / trigger interval; backlog: records waiting at the sources; memory: storage memory used."))
    op: Literal[">", ">=", "<", "<="] = Field(examples=[">"], description="How the metric is compared with value.")
    value: float = Field(examples=[0.7], description="The threshold the metric is compared with.")
    for_windows: int = Field(1, ge=1, description="The rule fires when it held in this many windows in a row.")
    executors_delta: int = Field(examples=[1], description=(
        "Executors added (positive) or removed (negative) when the rule fires; not 0."))

    @field_validator("executors_delta")
    @classmethod
    def _nonzero(cls, value: int) -> int:
        if value == 0:
            raise ValueError("a rule must change the executor count (non-zero)")
        return value


class ThresholdConfig(ConfigSection):
    """`policy.threshold`: rules on one metric each, or the old DStreams allocator."""

    preset: Literal["dstreams", "custom"] = Field("dstreams", description=(
        "dstreams: the old DStreams allocator (up above 0.9 of the batch interval, down below 0.3, one "
        "executor at a time), plus any rules; custom: only the rules."))
    rules: list[ThresholdRule] = Field([], examples=[[
        {"metric": "cpu", "op": ">", "value": 0.7, "for_windows": 3, "executors_delta": 1}]], description=(
        "Rules `metric op value for for_windows windows -> executors_delta`; when several fire, the largest "
        "step up wins, else the smallest step down."))

METRICS = ("cpu", "batch_ratio", "backlog", "memory")

# Spark's DStreams ExecutorAllocationManager: up when batch processing time reaches 0.9 of the batch
# interval, down when it falls to 0.3; one executor per step (brief and config comment).
DSTREAMS_RULES: tuple[ThresholdRule, ...] = (
    ThresholdRule(metric="batch_ratio", op=">=", value=0.9, for_windows=1, executors_delta=1),
    ThresholdRule(metric="batch_ratio", op="<=", value=0.3, for_windows=1, executors_delta=-1),
)

_OPS: Mapping[str, Callable[[float, float], bool]] = {
    ">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le,
}


def metrics_of(snapshot: Snapshot, app: AppConfig) -> dict[str, float | None]:
    """The rule metrics for one window (None where the snapshot does not tell)."""
    trigger = snapshot.trigger_interval_s or app.trigger_interval_s
    batch_ratio = snapshot.batch_duration_s / trigger if snapshot.batch_duration_s is not None else None
    sources = [op for op in snapshot.operators if op.source]
    return {
        "cpu": _extension_fraction(snapshot.extensions, "cpu_fraction"),
        "busy": _extension_fraction(snapshot.extensions, "task_time_fraction"),
        "batch_ratio": batch_ratio,
        # Unknown when a source cannot tell its backlog: a rule on it then does not fire.
        "backlog": (sum(op.backlog or 0.0 for op in sources)
                    if sources and all(op.backlog is not None for op in sources) else None),
        "memory": _extension_fraction(snapshot.extensions, "memory_fraction"),
    }


def _extension_fraction(extensions: Mapping[str, JsonValue], key: str) -> float | None:
    """The app's figure (from Spark); the host's only for snapshots that have no app figure at all."""
    for scope in ("app", "host"):
        section = extensions.get(scope)
        if isinstance(section, Mapping) and key in section:
            value = section[key]
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return float(value)
            return None
    return None


def rules_of(cfg: PolicyConfig) -> tuple[ThresholdRule, ...]:
    """The preset's rules (if any) followed by the configured ones."""
    th = cfg.section(ThresholdPolicy.name)
    preset = DSTREAMS_RULES if th.preset == "dstreams" else ()
    return (*preset, *th.rules)


@dataclass(frozen=True)
class RuleResult:
    rule: ThresholdRule
    values: tuple[float | None, ...]  # oldest first, this window last; up to for_windows of them
    fired: bool

    def describe(self) -> str:
        r = self.rule
        shown = ", ".join("unknown" if v is None else f"{v:g}" for v in self.values)
        state = "fires" if self.fired else "does not fire"
        return (f"rule {r.metric} {r.op} {r.value:g} for {r.for_windows} window(s) -> "
                f"{r.executors_delta:+d} executor(s): {state} (last {len(self.values)} window(s): {shown})")


def evaluate_rule(rule: ThresholdRule, now: float | None, history: DecisionHistory, query: str) -> RuleResult:
    """Does `rule` hold in this window (value `now`) and the for_windows - 1 before it?"""
    past: list[float | None] = []
    for decision in reversed(history.decisions):
        if len(past) >= rule.for_windows - 1:
            break
        obs = decision.observation
        if (obs.query or query) != query:
            continue
        value = obs.figure(rule.metric)
        past.append(None if value is None else float(value))
    values = (*reversed(past), now)
    fired = len(values) >= rule.for_windows and all(v is not None and _OPS[rule.op](v, rule.value) for v in values)
    return RuleResult(rule, values, fired)


@register_policy
class ThresholdPolicy:
    """Rules over one window's metrics, each holding for N consecutive windows."""

    name: ClassVar[str] = "threshold"
    config_model: ClassVar[type[ThresholdConfig]] = ThresholdConfig

    def decide(self, snapshot: Snapshot, history: DecisionHistory, cfg: PolicyConfig, app: AppConfig) -> Plan:
        """Executors change by the delta of the fired rule chosen (module docstring)."""
        metrics = metrics_of(snapshot, app)
        rules = rules_of(cfg)
        th = cfg.section(self.name)
        explanation = [
            f"threshold rules ({th.preset} preset, {len(th.rules)} configured rule(s)); "
            "metrics: " + ", ".join(f"{k} {'unknown' if v is None else f'{v:g}'}" for k, v in metrics.items())
        ]
        results = [evaluate_rule(rule, metrics[rule.metric], history, snapshot.query) for rule in rules]
        explanation += [r.describe() for r in results]

        fired = [r.rule for r in results if r.fired]
        ups = [r.executors_delta for r in fired if r.executors_delta > 0]
        downs = [r.executors_delta for r in fired if r.executors_delta < 0]
        delta = max(ups) if ups else max(downs) if downs else 0

        actions: list[Action] = []
        current = len(snapshot.executors)
        if delta:
            target = min(max(current + delta, app.min_executors), app.max_executors)
            chosen = "largest scale-up" if ups else "smallest scale-down"
            explanation.append(
                f"{len(fired)} rule(s) fired; {chosen}: {delta:+d} -> {current + delta} executors, within "
                f"[{app.min_executors}, {app.max_executors}] -> {target} (current {current})")
            if target != current:
                fired_rule = next(r for r in fired if r.executors_delta == delta)
                actions.append(Action.scale_executors(
                    current, target,
                    f"{fired_rule.metric} {fired_rule.op} {fired_rule.value:g} for {fired_rule.for_windows} window(s)"))
        else:
            explanation.append("no rule fired: nothing changes")

        return Plan(policy=self.name, app=snapshot.app, actions=tuple(actions), explanation=tuple(explanation),
                    observation=Observation(query=snapshot.query, figures=metrics))
