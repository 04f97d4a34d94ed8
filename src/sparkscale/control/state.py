"""What the loop remembers of one app between its cycles, in memory: a new leader takes it up from
the action log (`recalled`), so that it picks up where the last leader left off."""

from __future__ import annotations

from dataclasses import dataclass, field

from sparkscale.control.act import InFlight, TakenIn
from sparkscale.control.decision import Mode
from sparkscale.control.judge import PendingOutcome
from sparkscale.control.stores import Recalled
from sparkscale.model.action_result import ActionResult
from sparkscale.model.plan import Plan
from sparkscale.policies.history import DecisionHistory


@dataclass(frozen=True)
class Recent:
    """The app's last decision and action, one line each, as `sparkscale status` shows them."""

    decision: str | None = None
    decision_at: float | None = None
    action: str | None = None
    action_at: float | None = None


@dataclass
class AppState:
    cycles: int = 0
    failures: int = 0  # consecutive unreachable cycles (the back-off's exponent)
    skip_until: float = 0.0  # monotonic: no cycle before
    history: DecisionHistory = field(default_factory=DecisionHistory)
    last_action_at: float | None = None  # the cooldown's reference
    pending: list[PendingOutcome] = field(default_factory=list)  # executed decisions to judge
    elected_epoch: int | None = None  # the epoch this daemon last took the app over at
    watching_requests: bool = False
    running_since: float | None = None  # monotonic: a cycle is running (the watchdog's view)
    last_decision: str | None = None
    last_decision_at: float | None = None
    last_action: str | None = None
    last_action_direction: int | None = None
    in_flight: InFlight | None = None

    def recent(self) -> Recent:
        return Recent(self.last_decision, self.last_decision_at, self.last_action, self.last_action_at)

    def recalled(self, recalled: Recalled) -> None:
        """A new leader's state: the decisions, cooldown and pending judgements the log holds."""
        self.history, self.last_action_at, self.pending = recalled.history, recalled.last_action_at, recalled.pending

    def took_in(self, taken: TakenIn, evaluate_after_s: float) -> None:
        """What an ended background action leaves: the cooldown's reference, the direction the
        guards read, and its outcome to judge `evaluate_after_s` after it ended."""
        self.in_flight = None
        if taken.done is None:
            return
        self.last_action_at, self.last_action, self.last_action_direction = (
            taken.finished_at, taken.summary, taken.direction)
        pending = taken.pending_outcome(evaluate_after_s)
        if pending is not None:
            self.pending.append(pending)

    def manual_done(self, result: ActionResult, at: float) -> None:
        """An operator's request carried out: it holds the cooldown like the loop's own actions."""
        if result.status == "done":
            self.last_action_at = at
            self.last_action = f"manual: {result.action.summary()}"

    def decided(self, mode: Mode, plan: Plan, at: float) -> None:
        """The last decision's line: every decision that does or would do something; `no_change`
        only until there was one."""
        if plan.actions or mode != "no_change":
            self.last_decision = f"{mode}: " + ("; ".join(a.summary() for a in plan.actions) or "nothing")
            self.last_decision_at = at
        elif self.last_decision is None:
            self.last_decision, self.last_decision_at = "no_change", at
