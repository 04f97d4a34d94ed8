"""Dhalion (Floratou et al., VLDB'17): symptoms -> diagnoses -> resolvers, with an action log and
a blocklist of actions that did not bring the expected outcome (lecture, "Heuristic Policy Dhalion").

Symptom detectors (over one snapshot, plus earlier windows' figures from the decision history):

- backpressure: the micro-batch takes longer than the trigger interval (batch_duration_s >
  trigger_interval_s), or the total source backlog grew over `backlog_growth_windows` windows
  (backpressure as Spark shows it: no operator queue to read);
- processing-rate skew: in one operator, max / median of its instances' processing rates above
  `skew_ratio`. Dhalion compares the tuples each instance processed (execute count), so the rate
  here is records_in / window_s. (The *true* rate, records_in / useful_time_s, would not show data
  skew on Spark: a partition with ten times the records takes ten times as long; per-record speed
  is what the slow-instance detector compares.) Instances on a slow executor are left out;
- slow instance: an executor whose time per record (useful_time_s / records_in over all its
  instances) is above `slow_instance_ratio` x the median of the other executors'.

Diagnosers, tried in this order when there is backpressure: slow instance, data skew, resource
under-provisioning (backpressure with neither). Without backpressure: over-provisioning when the
utilisation is below `over_provisioned_utilization`, else healthy.

Utilisation (our choice; the paper leaves it open): the larger of (a) the load over the capacity,
max(arrival, processed rate) x core-seconds of the non-source operators' useful time per source
record / cores held (the source is virtual: figures.py `stage_work`), and (b) batch_duration_s /
trigger_interval_s. Both must be low to scale down (stability first).

Resolvers: scale up to ceil(executors x needed / observed rate / target_utilization), at least +1
(the ratio is the batch ratio, or arrival over processed rate when the backlog grows; with
target_utilization 1 it is the plain deficit ratio); replace the slowest executor; a `warn` for
data skew (more executors do not help a hot partition); scale down to ceil(executors x utilisation
/ target_utilization), at least -1. Targets stay within the app's executor range.

Blocklist: a resolver whose (diagnosis, action type) is blocked for the app and not expired is
skipped, and the next diagnosis in order is tried (the explanation says so). The daemon keeps the
blocklist (Redis, policies/outcomes.py) and hands it to the policy on the decision history
(`history.blocklist`). It blocks an action when `evaluate_outcome` says the outcome recorded with
the plan (`plan.observation.expected`) was not met after `outcomes.evaluation_windows`.

Every plan records its figures, the diagnosis and the expected outcome in its typed observation
(`plan.observation`): the next decisions read the backlog trend from there.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal

from pydantic import Field

from sparkscale.config import AppConfig, ConfigSection, PolicyConfig
from sparkscale.model.plan import Action, ActionType, ExpectedOutcome, Observation, Plan
from sparkscale.model.snapshot import Snapshot
from sparkscale.policies.base import register_policy
from sparkscale.policies.figures import UTILIZATION, LoadFigures, load_figures
from sparkscale.policies.history import DecisionHistory


class DhalionConfig(ConfigSection):
    """`policy.dhalion`: the symptom detectors' thresholds."""

    skew_ratio: float = Field(2.0, gt=1, description=(
        "Processing-rate skew: max / median of an operator's instances' rates above this ratio."))
    slow_instance_ratio: float = Field(2.0, gt=1, description=(
        "Slow instance: an executor's time per record above this multiple of its peers' median."))
    over_provisioned_utilization: float = Field(0.5, gt=0, lt=1, description=(
        "Below this utilisation the app is over-provisioned and may scale down."))
    backlog_growth_windows: int = Field(3, ge=2, description=(
        "Backpressure from the backlog: the total source backlog grew over this many windows (this one "
        "included; earlier figures come from the decision history)."))

Diagnosis = Literal["slow_instance", "data_skew", "under_provisioning", "over_provisioning"]

_SLACK = 1e-9  # relative slack before rounding up (float noise must not add an executor)


# ---------------------------------------------------------------------------------------------
# Figures and symptoms


@dataclass(frozen=True)
class Backpressure:
    """Why the app is behind: a batch ratio above 1 and/or a growing backlog."""

    batch_ratio: float | None  # set when it is above 1
    backlog_trend: tuple[float, ...] = ()  # set when the backlog grew: oldest first, this window last
    backlog_growth_rate: float = 0.0  # records/s over the trend

    def describe(self) -> str:
        parts = []
        if self.batch_ratio is not None:
            parts.append(f"batch duration is {self.batch_ratio:.2f} x the trigger interval")
        if self.backlog_trend:
            parts.append("backlog grew " + " -> ".join(f"{b:g}" for b in self.backlog_trend)
                         + f" records ({self.backlog_growth_rate:.2f} rec/s)")
        return "backpressure: " + "; ".join(parts)


@dataclass(frozen=True)
class Skew:
    """Processing-rate skew in one operator."""

    operator: str
    ratio: float  # max / median
    max_rate: float
    median_rate: float

    def describe(self) -> str:
        return (f"processing-rate skew in {self.operator}: max {self.max_rate:.2f} rec/s / median "
                f"{self.median_rate:.2f} rec/s = {self.ratio:.2f}")


@dataclass(frozen=True)
class SlowInstance:
    """An executor that takes much longer per record than its peers."""

    executor: str
    ratio: float  # its time per record / the median of the other executors'
    s_per_record: float
    peers_s_per_record: float

    def describe(self) -> str:
        return (f"slow instance: executor {self.executor} takes {self.s_per_record * 1000:.3f} ms per record, "
                f"{self.ratio:.2f} x the median {self.peers_s_per_record * 1000:.3f} ms of the other executors")


@dataclass(frozen=True)
class Symptoms:
    figures: LoadFigures
    backpressure: Backpressure | None
    skews: tuple[Skew, ...]
    slow: tuple[SlowInstance, ...]  # slowest first


def detect_backpressure(snapshot: Snapshot, history: DecisionHistory, figures: LoadFigures,
                        windows: int) -> Backpressure | None:
    """Batch ratio above 1, or a backlog that grew over `windows` windows (this one included)."""
    ratio = figures.batch_ratio if figures.batch_ratio is not None and figures.batch_ratio > 1 else None
    past = history.recent_figures("backlog", windows - 1, snapshot.query)
    series = [(t, float(b)) for t, b in past if isinstance(b, (int, float))]
    trend: tuple[float, ...] = ()
    growth = 0.0
    if len(series) == windows - 1 == len(past) and figures.backlog_known:
        series.append((snapshot.taken_at, figures.backlog))
        values = [b for _, b in series]
        # Grew: never fell, and ended higher than it started.
        if all(b >= a for a, b in itertools.pairwise(values)) and values[-1] > values[0]:
            trend = tuple(values)
            span = series[-1][0] - series[0][0]
            growth = (values[-1] - values[0]) / span if span > 0 else 0.0
    if ratio is None and not trend:
        return None
    return Backpressure(ratio, trend, growth)


def detect_slow_instances(snapshot: Snapshot, ratio: float) -> tuple[SlowInstance, ...]:
    """Executors whose time per record is above `ratio` x the median of the other executors'."""
    held = {e.id for e in snapshot.executors}
    useful: dict[str, float] = {}
    records: dict[str, float] = {}
    for op in snapshot.operators:
        for inst in op.instances:
            if inst.executor in held:
                useful[inst.executor] = useful.get(inst.executor, 0.0) + inst.useful_time_s
                records[inst.executor] = records.get(inst.executor, 0.0) + inst.records_in
    per_record = {e: useful[e] / records[e] for e in useful if records[e] > 0}
    found = []
    for executor, s in per_record.items():
        peers = [v for e, v in per_record.items() if e != executor]
        if not peers:
            continue
        median = statistics.median(peers)
        # Dhalion's slow-instance diagnosis: an instance much slower than its peers.
        if median > 0 and s / median > ratio:
            found.append(SlowInstance(executor, s / median, s, median))
    return tuple(sorted(found, key=lambda x: (-x.ratio, x.executor)))


def detect_skew(snapshot: Snapshot, ratio: float, exclude_executors: Sequence[str] = ()) -> tuple[Skew, ...]:
    """Operators whose instances' processing rates (records_in / window_s) have max / median > ratio."""
    found = []
    for op in snapshot.operators:
        rates = [inst.records_in / snapshot.window_s for inst in op.instances
                 if inst.executor is None or inst.executor not in exclude_executors]
        if len(rates) < 2:
            continue
        median = statistics.median(rates)
        top = max(rates)
        # Dhalion's processing-rate skew detector: instances of one operator processing unequal amounts.
        if median > 0 and top / median > ratio:
            found.append(Skew(op.id, top / median, top, median))
    return tuple(found)


def detect(snapshot: Snapshot, history: DecisionHistory, cfg: DhalionConfig, app: AppConfig) -> Symptoms:
    """Run every symptom detector."""
    figures = load_figures(snapshot, app)
    slow = detect_slow_instances(snapshot, cfg.slow_instance_ratio)
    skews = detect_skew(snapshot, cfg.skew_ratio, [s.executor for s in slow])
    backpressure = detect_backpressure(snapshot, history, figures, cfg.backlog_growth_windows)
    return Symptoms(figures, backpressure, skews, slow)


def diagnoses(symptoms: Symptoms, cfg: DhalionConfig) -> tuple[Diagnosis, ...]:
    """Candidate diagnoses, most specific first (the policy takes the first not blocked)."""
    if symptoms.backpressure is not None:
        found: list[Diagnosis] = []
        if symptoms.slow:
            found.append("slow_instance")
        if symptoms.skews:
            found.append("data_skew")
            return tuple(found)  # a hot partition: more executors would not help
        found.append("under_provisioning")
        return tuple(found)
    u = symptoms.figures.utilization
    if u is not None and u < cfg.over_provisioned_utilization:
        return ("over_provisioning",)
    return ()


# ---------------------------------------------------------------------------------------------
# Resolvers


@dataclass(frozen=True)
class Resolution:
    action: Action
    why: str  # the resolver's reasoning with figures
    expected: ExpectedOutcome | None = None


def _ceil(x: float) -> int:
    return math.ceil(x - _SLACK * max(1.0, abs(x)))


def resolve(diagnosis: Diagnosis, symptoms: Symptoms, snapshot: Snapshot, u: float,
            app: AppConfig) -> Resolution | None:
    """The action for one diagnosis (None when there is nothing to do, e.g. already at the bound)."""
    fig = symptoms.figures
    current = fig.executors
    if diagnosis == "data_skew":
        worst = max(symptoms.skews, key=lambda s: s.ratio)
        reason = (f"data skew in {worst.operator} (max/median processing rate {worst.ratio:.2f}): more executors "
                  "would not help the hot partition; consider a better key or repartitioning")
        return Resolution(Action.warn(reason, worst.operator), "report the skew rather than add executors")
    if diagnosis == "slow_instance":
        slow = symptoms.slow[0]
        expected = _backpressure_outcome(diagnosis, ActionType.REPLACE_EXECUTOR, symptoms, 1.0)
        return Resolution(
            Action.replace_executor(slow.executor, f"slow instance: {slow.ratio:.2f} x its peers' time per record"),
            f"replace executor {slow.executor}", expected)
    if diagnosis == "under_provisioning":
        ratio, basis = _deficit(symptoms)
        wanted = max(current + 1, _ceil(current * ratio / u)) if ratio is not None else current + 1
        target = min(wanted, app.max_executors)
        how = (f"ceil({current} x {basis} {ratio:.2f} / target utilisation {u:g}) = {_ceil(current * ratio / u)}, "
               f"at least +1 -> {wanted}" if ratio is not None else f"no rate figures: +1 -> {wanted}")
        how += f", within max_executors {app.max_executors} -> {target}"
        if target <= current:
            return None
        expected = _backpressure_outcome(diagnosis, ActionType.SCALE_EXECUTORS, symptoms,
                                         target / current if current else 2.0)
        return Resolution(Action.scale_executors(current, target, f"under-provisioned: {basis} {ratio or 0:.2f}"),
                          f"scale up: {how}", expected)
    # over_provisioning
    util = fig.utilization or 0.0
    needed = max(_ceil(current * util / u), 0)
    wanted = min(needed, current - 1)
    target = max(wanted, app.min_executors)
    how = (f"ceil({current} x utilisation {util:.2f} / target utilisation {u:g}) = {needed}, at least -1 -> "
           f"{wanted}, within min_executors {app.min_executors} -> {target}")
    if target >= current:
        return None
    expected = ExpectedOutcome(diagnosis, "scale_executors", UTILIZATION, util, util * current / max(target, 1))
    return Resolution(Action.scale_executors(current, target, f"over-provisioned: utilisation {util:.2f}"),
                      f"scale down: {how}", expected)


def _deficit(symptoms: Symptoms) -> tuple[float | None, str]:
    """needed / observed: the batch ratio, or (backlog growing) the rate needed over the rate taken in."""
    fig, bp = symptoms.figures, symptoms.backpressure
    ratios: list[tuple[float, str]] = []
    if bp is not None and bp.batch_ratio is not None:
        ratios.append((bp.batch_ratio, "batch ratio"))
    if bp is not None and bp.backlog_trend and fig.processed_rate:
        needed = max(fig.arrival_rate, fig.processed_rate + bp.backlog_growth_rate)
        ratios.append((needed / fig.processed_rate, "needed/processed rate"))
    if not ratios:
        return None, "deficit"
    return max(ratios)


def _backpressure_outcome(diagnosis: Diagnosis, action_type: ActionType, symptoms: Symptoms,
                          factor: float) -> ExpectedOutcome | None:
    """Expected after an action against backpressure: the batch ratio falls by `factor` (to at most 1
    for a replacement), or the processed rate rises by it up to the rate needed."""
    fig, bp = symptoms.figures, symptoms.backpressure
    if bp is not None and bp.batch_ratio is not None:
        after = 1.0 if action_type == "replace_executor" else bp.batch_ratio / factor
        return ExpectedOutcome(diagnosis, action_type, "batch_ratio", bp.batch_ratio, after)
    if bp is not None and fig.processed_rate:
        needed = max(fig.arrival_rate, fig.processed_rate + bp.backlog_growth_rate)
        after = needed if action_type == "replace_executor" else min(needed, fig.processed_rate * factor)
        return ExpectedOutcome(diagnosis, action_type, "processed_rate", fig.processed_rate, after)
    return None


# ---------------------------------------------------------------------------------------------
# The policy


@register_policy
class DhalionPolicy:
    """Dhalion as a sparkscale policy: one diagnosis and at most one resolver action per decision."""

    name: ClassVar[str] = "dhalion"
    # Dhalion §4: a resolver whose outcome was not met is blocklisted for its diagnosis.
    blocks_unmet_outcomes: ClassVar[bool] = True
    config_model: ClassVar[type[DhalionConfig]] = DhalionConfig

    def decide(self, snapshot: Snapshot, history: DecisionHistory, cfg: PolicyConfig, app: AppConfig) -> Plan:
        """Detect symptoms, diagnose, and resolve with the first resolver not blocked."""
        dh = cfg.section(self.name)
        now = snapshot.taken_at
        blocklist = history.blocklist
        symptoms = detect(snapshot, history, dh, app)
        fig = symptoms.figures

        explanation = [_describe_figures(fig)]
        found = [s.describe() for s in (*((symptoms.backpressure,) if symptoms.backpressure else ()),
                                        *symptoms.slow, *symptoms.skews)]
        explanation.append("symptoms: " + ("; ".join(found) if found else "none"))

        candidates = diagnoses(symptoms, dh)
        if not candidates:
            why = ("no backpressure and utilisation "
                   + (f"{fig.utilization:.2f} >= {dh.over_provisioned_utilization:g}" if fig.utilization is not None
                      else "unknown"))
            explanation.append(f"diagnosis: healthy ({why}); nothing to do")

        actions: list[Action] = []
        chosen: Diagnosis | None = None
        expected: ExpectedOutcome | None = None
        for diagnosis in candidates:
            resolution = resolve(diagnosis, symptoms, snapshot, cfg.target_utilization, app)
            if resolution is None:
                bounds = f"[{app.min_executors}, {app.max_executors}]"
                explanation.append(f"diagnosis: {_DIAGNOSIS_WHY[diagnosis]}; resolver: no action possible "
                                   f"(executors {fig.executors} at the bound of {bounds})")
                chosen = diagnosis
                if diagnosis == "under_provisioning":
                    actions.append(Action.warn(f"under-provisioned but already at max_executors {app.max_executors}"))
                break
            blocked = blocklist.find(snapshot.app, diagnosis, resolution.action.type, now)
            if blocked is not None:
                # Dhalion: a resolver on the blocklist for this diagnosis is not applied again.
                explanation.append(f"diagnosis: {_DIAGNOSIS_WHY[diagnosis]}; resolver {resolution.action.summary()} "
                                   f"skipped: blocked for this diagnosis until {blocked.until:g} "
                                   f"({blocked.until - now:g} s from now)")
                continue
            chosen, expected = diagnosis, resolution.expected
            explanation.append(f"diagnosis: {_DIAGNOSIS_WHY[diagnosis]}")
            explanation.append(f"resolver: {resolution.why}")
            actions.append(resolution.action)
            break
        else:
            if candidates:
                explanation.append("every resolver for the diagnoses found is blocked: nothing to do")

        observation = Observation(
            query=snapshot.query, diagnosis=chosen, expected=expected,
            figures={"executors": fig.executors, "backlog": fig.backlog if fig.backlog_known else None,
                     "batch_ratio": fig.batch_ratio,
                     "arrival_rate": fig.arrival_rate, "processed_rate": fig.processed_rate,
                     "utilization": fig.utilization})
        return Plan(policy=self.name, app=snapshot.app, actions=tuple(actions), explanation=tuple(explanation),
                    observation=observation)


_DIAGNOSIS_WHY: dict[str, str] = {
    "slow_instance": "slow instance (backpressure, and an executor much slower per record than its peers)",
    "data_skew": "data skew (backpressure, and one operator's instances process very unequal amounts)",
    "under_provisioning": "resource under-provisioning (backpressure, and no skew or slow instance to act on)",
    "over_provisioning": "over-provisioning (no backpressure, utilisation below over_provisioned_utilization)",
}


def _describe_figures(fig: LoadFigures) -> str:
    def show(x: float | None, unit: str = "") -> str:
        return "unknown" if x is None else f"{x:.2f}{unit}"

    return (f"figures: {fig.executors} executors ({fig.cores} cores); batch ratio {show(fig.batch_ratio)}; "
            f"{f'backlog {fig.backlog:g} records' if fig.backlog_known else 'backlog unknown'}; "
            f"arrival {fig.arrival_rate:.2f} rec/s; processed "
            f"{show(fig.processed_rate, ' rec/s')}; utilisation {show(fig.utilization)} (load "
            f"{show(fig.load_utilization)}, the larger of it and the batch ratio)")
