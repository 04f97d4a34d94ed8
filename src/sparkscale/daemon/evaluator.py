"""Judging executed actions at their due time, for every policy (Dhalion §4: the action log and the
blocklist). The daemon remembers what each executed decision expected (`PendingOutcome`); this
module judges it on the first snapshot at or after its due time (policies/outcomes.py's `judge`),
never earlier (a scale-up judged before its executors arrive looks like a failure), logs the
outcome, and blocks:

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

import structlog

from sparkscale.config import AppConfig, OutcomesConfig
from sparkscale.daemon.action_log import ActionLog, BlocklistEntry, BlocklistStore, LoggedDecision, OutcomeRecord
from sparkscale.daemon.metrics import DaemonMetrics
from sparkscale.model.plan import Action
from sparkscale.model.snapshot import Snapshot
from sparkscale.policies.base import policy_class
from sparkscale.policies.history import ScalingObservation
from sparkscale.policies.outcomes import CAPACITY, INEFFECTIVE_SCALE_UP, BlockedAction, Expectation, judge

log = structlog.get_logger("sparkscale.daemon.service")

# A judged scale-up teaches the scalability coefficient only when the window carried at least this
# share of the capacity measured: on a lightly loaded window, tasks carry few records and their
# fixed costs make the true rates (and so the capacity) noise.
MIN_LOAD_SHARE = 0.5


@dataclass
class PendingOutcome:
    """An executed decision waiting to be judged at `due_at` (seconds since the epoch)."""

    decision_id: str
    expected: Expectation
    action: Action
    due_at: float
    policy: str | None = None
    query: str | None = None


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


@dataclass
class OutcomeEvaluator:
    action_log: ActionLog
    blocklist: BlocklistStore
    metrics: DaemonMetrics

    def judge_due(self, app: AppConfig, pending: list[PendingOutcome], snapshot: Snapshot,
                  cfg: OutcomesConfig) -> list[ScalingObservation]:
        """Judge (and remove from `pending`) the decisions whose time has come; returns what they
        taught about the app's scalability."""
        now = time.time()
        learned: list[ScalingObservation] = []
        for item in list(pending):
            if now < item.due_at:
                continue
            cores = item.action.to * app.executor_cores if item.action.to is not None else None
            verdict = judge(item.expected, snapshot, app, cfg.fraction, cores, cfg.effectiveness)
            blocked_until = None
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
            self.action_log.append_outcome(OutcomeRecord(
                item.decision_id, app.name, now, verdict.met, item.expected.metric, item.expected.before,
                item.expected.after, verdict.observed, verdict.detail, blocked_until))
            self.metrics.count_action(app.name, item.action.type, "met" if verdict.met else "not_met")
            log.info("outcome", app=app.name, decision_id=item.decision_id, action=item.action.summary(),
                     met=verdict.met, ineffective=verdict.ineffective, detail=verdict.detail,
                     blocked_until=blocked_until)
            observation = scaling_observation(item.expected, item.action, verdict.observed, app, item.query, now)
            if observation is not None and (verdict.load_share or 0.0) >= MIN_LOAD_SHARE:
                learned.append(observation)
            pending.remove(item)
        return learned
