"""Judging executed actions at their due time, for every policy (Dhalion §4: the action log and the
blocklist). The loop remembers what each executed decision expected (control/judge.py's
`PendingOutcome`); this module judges it on the first snapshot at or after its due time
(policies/outcomes.py's `judge`), never earlier (a scale-up judged before its executors arrive
looks like a failure), emits the outcome to the loop's sink (the action log, the metrics and the
log take it from there: daemon/feeds.py), and blocks:

- an unmet outcome, for its diagnosis, only when its policy blocks unmet outcomes (Dhalion);
- an ineffective scale-up (capacity grew by under `outcomes.effectiveness` of the expected gain),
  every further scale-up of the app, whatever the policy (Flink's scaling-effectiveness detection).

A judged scale-up of the capacity metric, on a window loaded to at least `MIN_LOAD_SHARE` of the
capacity measured, also becomes a `ScalingObservation` for the query's observed scalability
coefficient.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from sparkscale.config import AppConfig, OutcomesConfig
from sparkscale.control.events import OutcomeJudged
from sparkscale.control.judge import PendingOutcome
from sparkscale.control.sink import EventSink
from sparkscale.daemon.action_log import BlocklistEntry, LoggedDecision
from sparkscale.model.plan import Action
from sparkscale.model.snapshot import Snapshot
from sparkscale.policies.base import policy_class
from sparkscale.policies.history import ScalingObservation
from sparkscale.policies.outcomes import CAPACITY, INEFFECTIVE_SCALE_UP, BlockedAction, Expectation, judge

# A judged scale-up teaches the scalability coefficient only when the window carried at least this
# share of the capacity measured: on a lightly loaded window, tasks carry few records and their
# fixed costs make the true rates (and so the capacity) noise.
MIN_LOAD_SHARE = 0.5


def blocks_unmet(policy: str | None) -> bool:
    """Whether `policy`'s semantics block an action whose outcome was not met (Dhalion's do)."""
    if policy is None:
        return False
    try:
        return bool(getattr(policy_class(policy), "blocks_unmet_outcomes", False))
    except KeyError:
        return False


def scaling_observation(expected: Expectation, action: Action, observed: float | None, app: AppConfig,
                        query: str | None, at: float) -> ScalingObservation | None:
    """The judged scale-up as an observation of the query's scalability (capacity metric only)."""
    if expected.metric != CAPACITY or observed is None or action.executor_direction <= 0:
        return None
    assert action.from_ is not None and action.to is not None  # a scale-up has both counts
    return ScalingObservation(query, at, action.from_ * app.executor_cores, action.to * app.executor_cores,
                              expected.before, expected.after, observed)


def observations_from_log(logged: Iterable[LoggedDecision], app: AppConfig) -> tuple[ScalingObservation, ...]:
    """The scalability observations of judged decisions in the action log (a new leader's start)."""
    found = []
    for d in sorted(logged, key=lambda x: x.decision.decided_at):
        if d.outcome is None or d.decision.expected is None or not d.decision.plan.changes:
            continue
        obs = scaling_observation(d.decision.expected, d.decision.plan.changes[0], d.outcome.observed, app,
                                  d.decision.plan.observation.query, d.outcome.evaluated_at)
        if obs is not None:
            found.append(obs)
    return tuple(found)


class BlocklistWriter(Protocol):
    """The part of the blocklist a judgement writes (daemon/action_log.py's BlocklistStore)."""

    def block(self, entry: BlocklistEntry) -> None:
        ...


@dataclass
class OutcomeEvaluator:
    blocklist: BlocklistWriter
    sink: EventSink

    def judge_due(self, app: AppConfig, pending: list[PendingOutcome], snapshot: Snapshot,
                  cfg: OutcomesConfig, now: float | None = None,
                  task_overhead: bool = True) -> list[ScalingObservation]:
        """Judge (and remove from `pending`) the decisions whose time has come at `now` (epoch s;
        None: the wall clock's), capacities measured with the per-task overhead when `task_overhead`
        (outcomes.py `measured`); returns what they taught about the app's scalability."""
        now = time.time() if now is None else now
        learned: list[ScalingObservation] = []
        for item in list(pending):
            if now < item.due_at:
                continue
            cores = item.action.to * app.executor_cores if item.action.to is not None else None
            verdict = judge(item.expected, snapshot, app, cfg.fraction, cores, cfg.effectiveness, task_overhead)
            blocked_until: float | None = None
            if not verdict.met and blocks_unmet(item.policy):
                # Dhalion: an action that did not bring the expected outcome is blocked for its diagnosis.
                blocked_until = now + cfg.blocklist_ttl_s
                self.blocklist.block(BlocklistEntry(
                    BlockedAction(app.name, item.expected.diagnosis, item.action.type, blocked_until, item.policy),
                    now, item.decision_id, verdict.detail))
            if verdict.ineffective:
                # Flink's scaling-effectiveness detection: more executors did not help; do not ask again.
                blocked_until = now + cfg.blocklist_ttl_s
                self.blocklist.block(BlocklistEntry(
                    BlockedAction(app.name, INEFFECTIVE_SCALE_UP, "scale_executors", blocked_until),
                    now, item.decision_id, verdict.detail))
            self.sink.emit(OutcomeJudged(app.name, item.decision_id, item.action, item.expected, now, verdict.met,
                                         verdict.ineffective, verdict.observed, verdict.detail, blocked_until))
            observation = scaling_observation(item.expected, item.action, verdict.observed, app, item.query, now)
            if observation is not None and (verdict.load_share or 0.0) >= MIN_LOAD_SHARE:
                learned.append(observation)
            pending.remove(item)
        return learned
