"""The daemon's live collaborators of the control loop (daemon/wiring.py): the leader's decisions
written to the action log before acting, and taken up again by the next leader."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

from sparkscale.config import AppConfig, Config
from sparkscale.control.decision import Decision
from sparkscale.control.judge import PendingOutcome
from sparkscale.daemon.action_log import DecisionRecord, LoggedDecision, OutcomeRecord
from sparkscale.daemon.wiring import ActionLogDecisions, ActuationContexts
from sparkscale.model.action_result import ActionResult
from sparkscale.model.plan import Action, Plan
from sparkscale.model.snapshot import Snapshot
from sparkscale.policies.outcomes import CAPACITY, Expectation

APP = AppConfig(name="app", min_executors=1, max_executors=8)
UP = Action.scale_executors(1, 3, "scale up")
EXPECTED = Expectation("under_provisioned", "scale_executors", CAPACITY, 10.0, 30.0, 0.0)
SNAPSHOT = Snapshot.from_dict({
    "version": 1, "app": "app", "query": "q", "taken_at": 1000.0, "window_s": 30.0,
    "executors": [{"id": "1", "host": "127.0.0.1", "cores": 1}],
    "operators": [{"id": "src", "parallelism": 1, "instances": []}], "edges": [],
})


@dataclass
class FakeActionLog:
    appended: list[tuple[DecisionRecord, Snapshot | None]] = field(default_factory=list)
    logged: list[LoggedDecision] = field(default_factory=list)
    reads: list[tuple[str | None, float | None]] = field(default_factory=list)

    def append_decision(self, record: DecisionRecord, snapshot: Snapshot | None = None) -> str:
        self.appended.append((record, snapshot))
        return "1-0"

    def read(self, app: str | None = None, since: float | None = None) -> list[LoggedDecision]:
        self.reads.append((app, since))
        return self.logged


def decision(plan: Plan, mode: str) -> Decision:
    return Decision("app", "leader", 7, (SNAPSHOT,), SNAPSHOT, {"q": 4}, plan, EXPECTED if plan.changes else None,
                    mode)  # type: ignore[arg-type]


def test_a_decision_is_written_with_who_made_it_and_its_snapshot_when_it_acts():
    log = FakeActionLog()
    decisions = ActionLogDecisions(log, "alpha")  # type: ignore[arg-type]
    assert decisions.write(decision(Plan("ds2", "app", actions=(UP,)), "acted")) == "1-0"
    assert decisions.write(decision(Plan("ds2", "app"), "no_change")) == "1-0"
    (acted, kept), (quiet, none_kept) = log.appended
    assert (acted.app, acted.decided_at, acted.snapshot_id, acted.daemon, acted.epoch, acted.policy) == \
        ("app", 1000.0, "app/q@1000000", "alpha", 7, "ds2")
    assert (acted.mode, acted.diagnosis, acted.expected, kept) == ("acted", "under_provisioned", EXPECTED, SNAPSHOT)
    assert (quiet.mode, none_kept) == ("no_change", None)


def logged(decision_id: str, at: float, done_at: float | None, judged: bool) -> LoggedDecision:
    record = DecisionRecord("app", at, f"app/q@{int(at * 1000)}", "alpha", 3, "ds2", "under_provisioned",
                            Plan("ds2", "app", actions=(UP,)), "acted", EXPECTED)
    results = (ActionResult(UP, "done", "3 executors"),) if done_at is not None else None
    outcome = OutcomeRecord(decision_id, "app", at + 90, True, CAPACITY, 10.0, 30.0, 29.0, "met") if judged else None
    return LoggedDecision(decision_id, record, results, outcome, done_at)


def test_a_new_leader_recalls_the_decisions_the_cooldown_and_what_is_still_to_judge():
    log = FakeActionLog(logged=[logged("1-0", 100.0, 110.0, judged=True), logged("2-0", 200.0, 215.0, judged=False),
                                logged("3-0", 300.0, None, judged=False)])
    recalled = ActionLogDecisions(log, "beta").recall(APP, now=400.0, since=-3200.0, evaluate_after_s=60.0)  # type: ignore[arg-type]
    assert log.reads == [("app", -3200.0)]
    assert recalled.decisions == 3 and len(recalled.history.decisions) == 3
    assert recalled.last_action_at == 215.0  # the last decision that did something
    assert recalled.pending == [PendingOutcome("2-0", EXPECTED, UP, 275.0, "ds2", None)]


def test_a_context_acts_at_the_locks_epoch_and_asks_the_lock_before_each_command():
    lock = SimpleNamespace(epoch=7, is_leader=True)
    contexts = ActuationContexts(zk=None, redis=None, identity="alpha", config_path=None, overrides=())  # type: ignore[arg-type]
    ctx = contexts(Config(), APP, lock, strategy="ccr")  # type: ignore[arg-type]
    assert (ctx.epoch, ctx.identity, ctx.strategy, ctx.is_leader()) == (7, "alpha", "ccr", True)
    lock.is_leader = False
    assert not ctx.is_leader()
