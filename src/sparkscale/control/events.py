"""The control loop's typed events: each decision, each action and each cycle's end is one event,
emitted to one sink (sink.py), as Flink's autoscaler hands its events to one
`AutoScalerEventHandler`. The daemon's feeds (daemon/feeds.py) make of them the log lines, the
action log's outcomes, the Prometheus metrics and the status `sparkscale status` shows.

An event holds facts (the decision, the results); how each consumer shows them is the feed's
business, so the JSON log keeps its event names and keys whatever the events look like.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import ClassVar, Literal

from sparkscale.control.decision import Decision, Role
from sparkscale.control.state import Recent
from sparkscale.model.action_result import ActionResult
from sparkscale.model.plan import Action
from sparkscale.policies.outcomes import Expectation

# absent: the driver did not answer; no_queries: its agent lists no live query; unreachable: a
# service (Spark, Redis, ZooKeeper) failed; error: a bug, logged with its traceback.
CycleResult = Literal["ok", "absent", "no_queries", "unreachable", "error"]


class EventKind(StrEnum):
    DECISION = "decision"
    ACTION_STARTED = "action_started"
    ACTION_DONE = "action_done"
    ACTION_CRASHED = "action_crashed"
    MANUAL_ACTION = "manual_action"
    MIGRATION_RESUMED = "migration_resumed"
    OUTCOME = "outcome"
    LEADER_ELECTED = "leader_elected"
    CYCLE_ENDED = "cycle_ended"


@dataclass(frozen=True)
class Decided:
    """One cycle's decision, by the app's leader or a standby, and what became of it
    (`decision_id`: its entry in the action log, None on a standby)."""

    kind: ClassVar[EventKind] = EventKind.DECISION
    decision: Decision
    decision_id: str | None
    duration_s: float  # from the cycle's start to the decision's end
    collect_s: float  # of which collecting the snapshots
    cpu_s: float  # the daemon's own CPU; the rest of duration_s waited on Spark, Redis, ZooKeeper
    # collect_s by part, in seconds: the app's shape and leadership, then the collector's own parts
    # (the driver's URL and REST round, Redis, the stages, the cluster view: monitors/collector.py)
    collect_parts_s: Mapping[str, float] = field(default_factory=dict)
    # The rest of duration_s by step (control/cycle_costs.py `decide_parts_s`): requests, history,
    # plan, write.
    decide_parts_s: Mapping[str, float] = field(default_factory=dict)

    @property
    def app(self) -> str:
        return self.decision.app


@dataclass(frozen=True)
class ActionStarted:
    """A logged decision's actions were handed to the background (`actions`: their summary), with
    each one's reason and what the first should bring (None: nothing expected), for the one line
    a console shows of it (logconsole.py)."""

    kind: ClassVar[EventKind] = EventKind.ACTION_STARTED
    app: str
    decision_id: str
    actions: str
    reasons: tuple[str, ...] = ()
    expected: Expectation | None = None


@dataclass(frozen=True)
class ActionDone:
    """A decision's actions ended, each with its result (done, failed or skipped)."""

    kind: ClassVar[EventKind] = EventKind.ACTION_DONE
    app: str
    decision_id: str
    duration_s: float
    results: tuple[ActionResult, ...]


@dataclass(frozen=True)
class ActionCrashed:
    """Carrying out a decision's actions raised (a bug in an actuator); the decision stays logged."""

    kind: ClassVar[EventKind] = EventKind.ACTION_CRASHED
    app: str
    decision_id: str
    error: BaseException


@dataclass(frozen=True)
class ManualActionDone:
    """An operator's request (daemon/manual.py) was carried out, or refused, by the leader."""

    kind: ClassVar[EventKind] = EventKind.MANUAL_ACTION
    app: str
    result: ActionResult


@dataclass(frozen=True)
class MigrationResumed:
    """A new leader finished (or rolled back) the migration a dead leader left running."""

    kind: ClassVar[EventKind] = EventKind.MIGRATION_RESUMED
    app: str
    decision_id: str
    result: ActionResult


@dataclass(frozen=True)
class OutcomeJudged:
    """An executed decision judged at its due time (daemon/evaluator.py): whether it brought what
    it expected, and until when its action is blocked (None: not blocked)."""

    kind: ClassVar[EventKind] = EventKind.OUTCOME
    app: str
    decision_id: str
    action: Action
    expected: Expectation
    evaluated_at: float
    met: bool
    ineffective: bool
    observed: float | None
    detail: str
    blocked_until: float | None


@dataclass(frozen=True)
class LeaderElected:
    """This daemon became the app's leader and took up the last leader's decisions."""

    kind: ClassVar[EventKind] = EventKind.LEADER_ELECTED
    app: str
    identity: str
    epoch: int | None
    decisions_loaded: int
    pending_outcomes: int
    last_action_at: float | None


@dataclass(frozen=True)
class CycleEnded:
    """The summary of one cycle of one app: its result, when it ended and how long it took, what it
    saw for the gauges (None: not seen this cycle, the gauge keeps its value), and what its status
    shows (`decision`: the cycle's, if it decided; `warnings`: what the operator should act on).
    `error` is what ended an unreachable or failed cycle, `retry_in_s` the back-off it caused."""

    kind: ClassVar[EventKind] = EventKind.CYCLE_ENDED
    app: str
    result: CycleResult
    ended_at: float
    duration_s: float
    role: Role | None = None
    epoch: int | None = None  # the leader's
    detail: str = ""
    error: BaseException | None = None
    failures: int = 0
    retry_in_s: float | None = None
    executors: int | None = None
    parallelism: Mapping[str, int] | None = None
    blocked: int | None = None
    needing_attention: int | None = None
    decision: Decision | None = None
    warnings: tuple[str, ...] = ()
    recent: Recent = field(default_factory=Recent)


Event = (Decided | ActionStarted | ActionDone | ActionCrashed | ManualActionDone | MigrationResumed | OutcomeJudged
         | LeaderElected | CycleEnded)
