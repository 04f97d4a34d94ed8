"""Where the control loop's events go (control/events.py, emitted to one `control.sink.FanOut`):
the action log's outcomes, the Prometheus metrics, the log, and each app's status for `sparkscale
status`. The daemon chains them in that order (daemon/service.py): an outcome Redis refuses is
neither counted nor logged, and the caller's cycle fails as if it had written it itself.

The log lines keep the event names and keys operators, `sparkscale explain`, the lab's reports and
the integration tests read (`cycle`, `action.started`, `action.done`, `outcome`, `cycle.unreachable`,
...), under the logger name they always had. The `cycle` line carries every figure of the decision
for the JSON log; on a terminal logconsole.py shows it, and each action event, as one short line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import redis
import structlog

from sparkscale.control.decision import Decision
from sparkscale.control.events import (
    ActionCrashed,
    ActionDone,
    ActionStarted,
    CycleEnded,
    Decided,
    Event,
    LeaderElected,
    ManualActionDone,
    MigrationResumed,
    OutcomeJudged,
)
from sparkscale.daemon import status as app_status
from sparkscale.daemon.action_log import OutcomeRecord, snapshot_id
from sparkscale.daemon.metrics import DaemonMetrics
from sparkscale.policies.capacity import short_warnings, shortfall
from sparkscale.policies.ineffective import SCALABILITY_FIGURE

LOGGER = "sparkscale.daemon.service"  # the name the loop's events have always been logged under

log = structlog.get_logger(LOGGER)


def query_views(decision: Decision) -> tuple[app_status.QueryView, ...]:
    """Each query's figures as the `cycle` line and `sparkscale status` show them."""
    return tuple(app_status.query_view(s, decision.partitions.get(s.query)) for s in decision.snapshots)


class OutcomeWriter(Protocol):
    """The part of the action log outcomes are written to (daemon/action_log.py's ActionLog)."""

    def append_outcome(self, record: OutcomeRecord) -> str:
        ...


@dataclass(frozen=True)
class OutcomeFeed:
    """Judged outcomes into the action log, joined there to the decision they judge (Dhalion §4)."""

    action_log: OutcomeWriter

    def emit(self, event: Event) -> None:
        if isinstance(event, OutcomeJudged):
            expected = event.expected
            self.action_log.append_outcome(OutcomeRecord(
                event.decision_id, event.app, event.evaluated_at, event.met, expected.metric, expected.before,
                expected.after, event.observed, event.detail, event.blocked_until))


@dataclass(frozen=True)
class MetricsFeed:
    """Cycles and their duration, decisions, actions by outcome, and the gauges a cycle saw."""

    metrics: DaemonMetrics

    def emit(self, event: Event) -> None:
        m = self.metrics
        match event:
            case Decided(decision=d) if d.mode == "observe":
                pass  # apps[].mode observe: no plan was made, no decision to count
            case Decided(decision=d):
                m.count_decision(d.app, d.plan.policy, bool(d.plan.changes))
                m.set_cluster_short(d.app, shortfall(d.plan))
                if (ratio := d.plan.observation.figure(SCALABILITY_FIGURE)) is not None:
                    m.set_observed_scalability(d.app, float(ratio))
                if d.role == "leader" and d.mode == "dry_run":  # what the daemon would have done
                    for action in d.plan.changes:
                        m.count_action(d.app, action.type, "dry_run")
            case ActionDone():
                for result in event.results:
                    m.count_action(event.app, result.action.type, result.status)
            case ManualActionDone():
                m.count_action(event.app, event.result.action.type, event.result.status)
            case OutcomeJudged():
                m.count_action(event.app, event.action.type, "met" if event.met else "not_met")
            case CycleEnded():
                _gauges(m, event)
                m.observe_cycle(event.app, event.duration_s)
                m.count_cycle(event.app, event.result)


def _gauges(m: DaemonMetrics, event: CycleEnded) -> None:
    """What the cycle saw; a gauge it did not see (the cycle ended first) keeps its value."""
    if event.role is not None:
        m.set_leader(event.app, event.role == "leader")
    if event.executors is not None:
        m.set_executors(event.app, event.executors)
    if event.parallelism is not None:
        m.set_parallelism(event.app, event.parallelism)
    if event.blocked is not None:
        m.set_blocked(event.app, event.blocked)
    if event.needing_attention is not None:
        m.set_migrations_needing_attention(event.app, event.needing_attention)


class LogFeed:
    def emit(self, event: Event) -> None:
        match event:
            case Decided():
                _decided(event)
            case ActionStarted():
                log.info("action.started", app=event.app, decision_id=event.decision_id, actions=event.actions,
                         reasons=list(event.reasons),
                         expected=event.expected.to_dict() if event.expected is not None else None)
            case ActionDone():
                log.info("action.done", app=event.app, decision_id=event.decision_id,
                         duration_s=round(event.duration_s, 3),
                         results=[{"action": r.action.summary(), "status": r.status, "detail": r.detail,
                                   "confirm_s": r.confirm_s} for r in event.results])
            case ActionCrashed():
                log.error("action.error", app=event.app, decision_id=event.decision_id, error=repr(event.error),
                          exc_info=event.error)
            case MigrationResumed():
                log.info("migration.resumed", app=event.app, decision_id=event.decision_id,
                         status=event.result.status, detail=event.result.detail)
            case OutcomeJudged():
                log.info("outcome", app=event.app, decision_id=event.decision_id, action=event.action.summary(),
                         met=event.met, ineffective=event.ineffective, detail=event.detail,
                         blocked_until=event.blocked_until)
            case LeaderElected():
                log.info("leader.elected", app=event.app, identity=event.identity, epoch=event.epoch,
                         decisions_loaded=event.decisions_loaded, pending_outcomes=event.pending_outcomes,
                         last_action_at=event.last_action_at)
            case CycleEnded():
                _cycle_ended(event)
            case ManualActionDone():
                pass  # the actuators log a manual request's action (`actuator.*`); the metrics count it


def _decided(event: Decided) -> None:
    d = event.decision
    plan = d.plan
    short = shortfall(plan)
    if short:
        log.warning("cluster.short", app=d.app, short_executors=short, warning=short_warnings(plan)[0])
    log.info(
        "cycle", app=d.app, role=d.role, epoch=d.epoch, snapshot_id=snapshot_id(d.snapshot), policy=plan.policy,
        diagnosis=d.diagnosis, executors=len(d.snapshot.executors), mode=d.mode, decision_id=event.decision_id,
        target_executors=d.target_executors,
        queries=[q.to_dict() for q in query_views(d)],
        actions=[a.summary() for a in plan.actions],
        reasons=[a.reason for a in plan.actions],
        explanation=list(plan.explanation), observation=plan.observation.to_dict(),
        duration_s=round(event.duration_s, 4), collect_s=round(event.collect_s, 4), cpu_s=round(event.cpu_s, 4),
        collect_parts_s=dict(event.collect_parts_s), decide_parts_s=dict(event.decide_parts_s),
    )


def _cycle_ended(event: CycleEnded) -> None:
    """A cycle that decided logged its `cycle` line already; the others say why they did not."""
    if event.result in ("absent", "no_queries"):
        log.warning("cycle.app_absent" if event.result == "absent" else "cycle.no_queries", app=event.app,
                    role=event.role, reason=event.detail, action="none")
    elif event.result in ("unreachable", "error") and event.error is not None:
        if event.result == "error":  # a bug must not kill the loop: it is logged with its traceback
            log.error("cycle.error", app=event.app, error=repr(event.error), action="none", exc_info=event.error)
        log.warning("cycle.unreachable", app=event.app, error=str(event.error) or repr(event.error),
                    failures=event.failures, retry_in_s=event.retry_in_s, action="none")


@dataclass(frozen=True)
class StatusFeed:
    """Each cycle that reached the app (decided, or found it absent) publishes what this daemon saw
    of it (daemon/status.py); best effort: the loop goes on without it."""

    redis: redis.Redis
    prefix: str
    identity: str

    def emit(self, event: Event) -> None:
        if not isinstance(event, CycleEnded) or event.result not in ("ok", "absent", "no_queries"):
            return
        recent = event.recent
        status = app_status.AppStatus(
            daemon=self.identity, role=app_status.Role(event.role or "standby"), epoch=event.epoch,
            cycle_at=event.ended_at,
            result=event.result, executors=event.executors, parallelism=dict(event.parallelism or {}),
            last_decision=recent.decision, last_decision_at=recent.decision_at, last_action=recent.action,
            last_action_at=recent.action_at, detail=event.detail,
            queries=query_views(event.decision) if event.decision else (), warnings=event.warnings)
        try:
            app_status.publish(self.redis, self.prefix, event.app, status)
        except redis.RedisError as exc:
            log.warning("status.publish_failed", app=event.app, error=str(exc))
