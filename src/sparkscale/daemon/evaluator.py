"""Judging executed actions at their due time, for every policy (Dhalion §4: the action log and the
blocklist). The daemon remembers what each executed decision expected (`PendingOutcome`); this
module judges it on a later snapshot (policies/outcomes.py's `judge`), logs the outcome, and blocks
the action for its diagnosis when it fell short."""

from __future__ import annotations

import time
from dataclasses import dataclass

import structlog

from sparkscale.config import AppConfig, OutcomesConfig
from sparkscale.daemon.action_log import ActionLog, BlocklistEntry, BlocklistStore, OutcomeRecord
from sparkscale.daemon.metrics import DaemonMetrics
from sparkscale.plan import Action
from sparkscale.policies.outcomes import BlockedAction, Expectation, judge
from sparkscale.snapshot import Snapshot

log = structlog.get_logger("sparkscale.daemon.service")


@dataclass
class PendingOutcome:
    """An executed decision waiting to be judged."""

    decision_id: str
    expected: Expectation
    action: Action
    due_at: float


@dataclass
class OutcomeEvaluator:
    action_log: ActionLog
    blocklist: BlocklistStore
    metrics: DaemonMetrics

    def judge_due(self, app: AppConfig, pending: list[PendingOutcome], snapshot: Snapshot, cfg: OutcomesConfig,
                  force: bool) -> None:
        """Judge (and remove from `pending`) the decisions whose time has come; all of them with `force`."""
        now = time.time()
        for item in list(pending):
            if not force and now < item.due_at:
                continue
            verdict = judge(item.expected, snapshot, app, cfg.fraction)
            blocked_until = None
            if not verdict.met:
                # Dhalion: an action that did not bring the expected outcome is blocked for its diagnosis.
                blocked_until = now + cfg.blocklist_ttl_s
                self.blocklist.block(BlocklistEntry(
                    BlockedAction(app.name, item.expected.diagnosis, item.action.type, blocked_until),
                    now, item.decision_id, verdict.detail))
            detail = verdict.detail + (" (judged early: a new action follows)" if now < item.due_at else "")
            self.action_log.append_outcome(OutcomeRecord(
                item.decision_id, app.name, now, verdict.met, item.expected.metric, item.expected.before,
                item.expected.after, verdict.observed, detail, blocked_until))
            self.metrics.count_action(app.name, item.action.type, "met" if verdict.met else "not_met")
            log.info("outcome", app=app.name, decision_id=item.decision_id, action=item.action.summary(),
                     met=verdict.met, detail=detail, blocked_until=blocked_until)
            pending.remove(item)
