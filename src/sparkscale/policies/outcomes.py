"""Judging executed actions and the blocklist, for every policy (Dhalion §4: the action log and
the blocklist; moved out of the Dhalion policy because the daemon applies them to every policy).

Pure functions: what a plan's action is expected to do to the app's figures (`expectation_for`),
whether a later snapshot shows it did (`judge`), and dropping actions the blocklist forbids
(`drop_blocked`). The daemon owns time: it calls `judge` `outcomes.evaluation_windows` windows
after the change showed in Spark, and blocks what fell short (a `BlockedAction` in the
`Blocklist`, which the planner applies to every plan and the Dhalion policy also consults).

Expectations:
- a plan that recorded its own (`plan.observation.expected`, e.g. Dhalion's): the batch ratio
  falls, or the processed rate rises, by the factor of the change;
- any other scale-up: the processed rate rises in proportion to the executors added, up to what is
  needed (arrival rate plus draining the backlog within one window);
- a scale-down or a replacement: the app keeps up afterwards.

An action that did not bring `fraction` of the expected change is still met when the app keeps up
(its backlog did not grow; with the backlog unknown, its batches fit their trigger interval): the
symptom it was taken against is gone, so there is nothing to blame it for.

What is blocked, and for whom:
- an unmet outcome blocks its (diagnosis, action type) only for the policy whose semantics say so
  (Dhalion §4: `blocks_unmet_outcomes` on the policy class), and only that policy's plans;
- an ineffective scale-up (capacity grew by less than `effectiveness` of the expected gain: the
  FLINK-30571 / Flink autoscaler's scaling-effectiveness detection) blocks further scale-ups of the
  app for every policy: more executors did not help, so asking for more again would not either.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated

from pydantic import GetCoreSchemaHandler, JsonValue
from pydantic_core import CoreSchema

from sparkscale.config import AppConfig
from sparkscale.model.codec import NAME, Codec, between, json_form, known_keys, reshaped
from sparkscale.model.fields import MAX_TIME
from sparkscale.model.plan import Action, ActionType, Plan, evaluate_outcome
from sparkscale.model.snapshot import Snapshot
from sparkscale.policies.ds2_model import estimate  # the model a capacity expectation comes from
from sparkscale.policies.figures import UTILIZATION, load_figures, usual_backlog

KEEPS_UP = "keeps_up"
CAPACITY = "capacity_rps"  # source records/s the query can take in on the action's cores (DS2's model)
INEFFECTIVE_SCALE_UP = "ineffective_scale_up"
Time = Annotated[float, between(0, MAX_TIME)]  # seconds since the epoch


# Blocklist (lecture: "A blocklist records actions that did not produce the expected outcome")


@dataclass(frozen=True)
class BlockedAction:
    """`action_type` must not resolve `diagnosis` for `app` until `until` (seconds since the epoch),
    in the plans of `policy` (None: of every policy). The diagnosis `ineffective_scale_up` blocks
    every scale-up of the app, whatever it answers."""

    app: Annotated[str, NAME]
    diagnosis: Annotated[str, NAME]
    action_type: Annotated[str, NAME]  # an ActionType, or a plug-in's registered type
    until: Time
    policy: Annotated[str, NAME] | None = None

    @classmethod
    def __get_pydantic_core_schema__(cls, source: object, handler: GetCoreSchemaHandler) -> CoreSchema:
        return reshaped(handler, source, lambda v: known_keys(v, ("app", "diagnosis", "action_type", "until",
                                                                  "policy")))

    def applies(self, app: str, diagnosis: str, action_type: str, now: float, policy: str | None = None,
                scale_up: bool = False) -> bool:
        if self.app != app or now >= self.until or (self.policy is not None and self.policy != policy):
            return False
        if self.diagnosis == INEFFECTIVE_SCALE_UP:
            return scale_up and action_type == ActionType.SCALE_EXECUTORS
        return (self.diagnosis, self.action_type) == (diagnosis, action_type)


@dataclass(frozen=True)
class Blocklist:
    """Blocked (diagnosis, action) pairs. Immutable; the daemon persists it. Written as the list
    of its entries."""

    entries: tuple[BlockedAction, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "entries", tuple(self.entries))

    @classmethod
    def __get_pydantic_core_schema__(cls, source: object, handler: GetCoreSchemaHandler) -> CoreSchema:
        return json_form(handler, tuple[BlockedAction, ...], cls, lambda blocklist: blocklist.entries)

    def find(self, app: str, diagnosis: str, action_type: str, now: float, policy: str | None = None,
             scale_up: bool = False) -> BlockedAction | None:
        """The entry blocking this pair now (for `policy`'s plans), if any."""
        return next((e for e in self.entries if e.applies(app, diagnosis, action_type, now, policy, scale_up)), None)

    def block(self, app: str, diagnosis: str, action_type: str, now: float, ttl_s: float,
              policy: str | None = None) -> Blocklist:
        """This blocklist with the pair blocked until now + ttl_s (replacing an older entry for it)."""
        kept = tuple(e for e in self.entries if (e.app, e.diagnosis, e.action_type) != (app, diagnosis, action_type))
        return Blocklist((*kept, BlockedAction(app, diagnosis, action_type, now + ttl_s, policy)))

    def active(self, now: float) -> Blocklist:
        """Without the expired entries."""
        return Blocklist(tuple(e for e in self.entries if now < e.until))



def diagnosis_of(plan: Plan, action: Action) -> str:
    """The diagnosis an action answers: the one the policy recorded, else read from the action."""
    recorded = plan.observation.diagnosis
    if recorded:
        return recorded
    if action.type == "scale_executors" and action.from_ is not None and action.to is not None:
        return "under_provisioning" if action.to > action.from_ else "over_provisioning"
    if action.type == "replace_executor":
        return "slow_instance"
    if action.type == "set_parallelism":
        return "partition_bound"
    return action.type


@dataclass(frozen=True)
class Expectation:
    """`metric` should go from `before` towards `after` (or, for keeps_up, the app should keep up).
    Kept in the action log's decisions (`daemon/action_log.py`)."""

    diagnosis: str
    action_type: str
    metric: str  # processed_rate | batch_ratio | utilization | keeps_up | capacity_rps
    before: float
    after: float
    backlog_before: float = 0.0  # absent from decisions logged before it was kept

    def to_dict(self) -> dict[str, JsonValue]:
        return EXPECTATION_JSON.dump_object(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, JsonValue]) -> Expectation:
        return EXPECTATION_JSON.load(data)


EXPECTATION_JSON: Codec[Expectation] = Codec(Expectation, label="expected")


@dataclass(frozen=True)
class Verdict:
    met: bool
    observed: float | None
    keeps_up: bool
    detail: str
    ineffective: bool = False  # a scale-up whose capacity gain fell below `effectiveness` of the expected
    load_share: float | None = None  # capacity_rps: the target rate over the capacity measured (None: unknown)


def expectation_for(plan: Plan, snapshot: Snapshot, app: AppConfig) -> Expectation | None:
    """What the plan's first change should bring (None when it changes nothing)."""
    if not plan.changes:
        return None
    action = plan.changes[0]
    fig = load_figures(snapshot, app)
    diagnosis = diagnosis_of(plan, action)
    recorded = plan.observation.expected
    if recorded is not None and recorded.action_type == action.type:
        return Expectation(diagnosis, action.type, recorded.metric, recorded.before, recorded.after, fig.backlog)
    if action.type == "scale_executors" and action.from_ and action.to and action.to > action.from_:
        factor = action.to / action.from_
        if fig.processed_rate:
            # Needed: keep up with arrivals and drain the backlog within one window.
            needed = max(fig.arrival_rate + fig.backlog / snapshot.window_s, fig.processed_rate)
            return Expectation(diagnosis, action.type, "processed_rate", fig.processed_rate,
                               min(needed, fig.processed_rate * factor), fig.backlog)
        if fig.batch_ratio is not None:
            return Expectation(diagnosis, action.type, "batch_ratio", fig.batch_ratio, fig.batch_ratio / factor,
                               fig.backlog)
    return Expectation(diagnosis, action.type, KEEPS_UP, fig.arrival_rate, fig.arrival_rate, fig.backlog)


def keeps_up(snapshot: Snapshot, app: AppConfig, backlog_before: float) -> bool:
    """The backlog is no larger than before, or than a few batches' worth of arrivals (what a
    healthy micro-batch source always has waiting). The batch ratio alone does not decide: a query
    of many stages can take longer than its trigger per batch and still take in all that arrives
    (Spark then runs the batches back to back)."""
    fig = load_figures(snapshot, app)
    if not fig.backlog_known:
        # No backlog to judge by (a source cannot tell): a batch that fits its trigger keeps up.
        return fig.batch_ratio is None or fig.batch_ratio <= 1.0
    return fig.backlog <= max(backlog_before, usual_backlog(snapshot, app, fig.arrival_rate))


def measured(metric: str, snapshot: Snapshot, app: AppConfig, cores: int | None = None,
             task_overhead: bool = True) -> tuple[float | None, float | None]:
    """The figure `metric` in `snapshot`, and for `capacity_rps` the share of it the window's target
    rate took (else None). Capacity is on `cores` cores (default: the snapshot's), from the window's
    true rates, so that a later change of the count does not blur the judgement; with the per-task
    overhead fitted where the tasks allow it when `task_overhead` (ds2_model's), else DS2's linear
    model: the model the expectation was computed with (`policy.ds2.task_overhead`,
    ds2.py `capacity_task_overhead`), or the overhead model would read a higher capacity on
    overhead-heavy stages than plain DS2 expected and judge an ineffective scale-up met."""
    if metric == CAPACITY:
        est = estimate(snapshot, task_overhead=task_overhead)
        capacity = est.capacity_rps(cores if cores is not None else snapshot.cores)
        return capacity, (est.source_target_rate / capacity if capacity else None)
    fig = load_figures(snapshot, app)
    if metric == "processed_rate":
        return fig.processed_rate, None
    # Dhalion's scale-down expects `utilization`, the larger of load utilisation and batch ratio:
    # judged by the same figure it recorded, not by the batch ratio alone.
    return (fig.utilization if metric == UTILIZATION else fig.batch_ratio), None


def judge(expected: Expectation, snapshot: Snapshot, app: AppConfig, fraction: float, cores: int | None = None,
          effectiveness: float = 0.1, task_overhead: bool = True) -> Verdict:
    """Did the action do what was expected, judged on a snapshot taken well after it (`cores`: the
    count the action set, and `task_overhead` the model, for `capacity_rps`: see `measured`)?"""
    fig = load_figures(snapshot, app)
    ok_now = keeps_up(snapshot, app, expected.backlog_before)
    if expected.metric == KEEPS_UP:
        backlog = (f"backlog {fig.backlog:g} (was {expected.backlog_before:g})" if fig.backlog_known
                   else "backlog unknown")
        detail = "the app keeps up" if ok_now else (
            f"the app does not keep up: {backlog}, batch ratio {_show(fig.batch_ratio)}")
        return Verdict(ok_now, fig.batch_ratio, ok_now, detail)
    observed, load_share = measured(expected.metric, snapshot, app, cores, task_overhead)
    if observed is None:
        return Verdict(ok_now, None, ok_now, f"{expected.metric} unknown in the window; app keeps up: {ok_now}")
    # Dhalion: an action met its outcome when the figure moved by at least `fraction` of the expected change.
    moved = evaluate_outcome(expected.after - expected.before, observed - expected.before, fraction)
    met = moved or ok_now
    gain = expected.after - expected.before
    # Flink autoscaler (scaling effectiveness): a scale-up that brought under `effectiveness` of the
    # gain, and after which the app still does not keep up (one that keeps up needs no more anyway,
    # and a lightly loaded window's capacity figure is noise).
    ineffective = (expected.metric in (CAPACITY, "processed_rate") and expected.action_type == "scale_executors"
                   and gain > 0 and observed - expected.before < effectiveness * gain and not ok_now)
    detail = (f"{expected.metric} {expected.before:.3g} -> {observed:.3g} (expected {expected.after:.3g}, "
              f"at least {fraction:g} of the change: {'yes' if moved else 'no'}); app keeps up: "
              f"{'yes' if ok_now else 'no'}" + (f"; ineffective: under {effectiveness:g} of the expected gain"
                                                 if ineffective else ""))
    return Verdict(met, observed, ok_now, detail, ineffective, load_share)


def drop_blocked(plan: Plan, blocklist: Blocklist, now: float) -> Plan:
    """`plan` without the actions the blocklist forbids for their diagnosis (one explanation line each)."""
    kept: list[Action] = []
    notes: list[str] = []
    for action in plan.actions:
        if action.type != "warn":
            diagnosis = diagnosis_of(plan, action)
            entry = blocklist.find(plan.app, diagnosis, action.type, now, plan.policy, action.executor_direction > 0)
            if entry is not None:
                what = ("scale-ups are blocked: an earlier one did not raise the capacity"
                        if entry.diagnosis == INEFFECTIVE_SCALE_UP
                        else f"{action.type} is blocked for {diagnosis}")
                notes.append(f"blocklist: dropped {action.summary()}: {what} "
                             f"until {entry.until:.0f} ({entry.until - now:.0f} s from now)")
                continue
        kept.append(action)
    if not notes:
        return plan
    return plan.with_actions(kept, notes)


def _show(x: float | None) -> str:
    return "unknown" if x is None else f"{x:.2f}"
