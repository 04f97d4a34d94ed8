"""How the loop's actions get carried out (Flink's `ScalingRealizer`): the executor of the loop's
own decisions, in the background, and the desk where the operator's requests are served.

Both act only for the app's leader, at its lock's epoch; the autoscaler never calls them on a
standby or in dry-run mode (the desk answers a dry-run daemon's requests with a refusal).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Protocol

from sparkscale.config import AppConfig, Config
from sparkscale.control.decision import Decision
from sparkscale.control.judge import PendingOutcome
from sparkscale.control.leadership import Leadership
from sparkscale.model.action_result import ActionResult
from sparkscale.model.journal import Journal
from sparkscale.model.plan import Action
from sparkscale.model.snapshot import Snapshot
from sparkscale.policies.outcomes import Expectation


@dataclass
class InFlight:
    """A decision's actions being carried out in the background."""

    decision_id: str
    summary: str
    future: Future[tuple[list[ActionResult], float]]  # the results, and when they ended (epoch s)
    started: float  # the clock's monotonic()
    expected: Expectation | None
    policy: str
    query: str | None


@dataclass(frozen=True)
class TakenIn:
    """What an ended action left: its first action done (None: nothing was done) and when it ended."""

    flight: InFlight
    done: Action | None
    summary: str
    finished_at: float

    @property
    def direction(self) -> int:
        """+1 when it added executors, -1 when it removed some, 0 for any other change."""
        return self.done.executor_direction if self.done is not None else 0

    def pending_outcome(self, after_s: float) -> PendingOutcome | None:
        """The outcome to judge `after_s` after the change showed (None: nothing expected or done)."""
        flight = self.flight
        if self.done is None or flight.expected is None:
            return None
        return PendingOutcome(flight.decision_id, flight.expected, self.done, self.finished_at + after_s,
                              flight.policy, flight.query)


class ActionExecutor(Protocol):
    """daemon/background.py's BackgroundExecutor."""

    def start(self, cfg: Config, app: AppConfig, leadership: Leadership, decision_id: str, decision: Decision,
              on_done: Callable[[], None]) -> InFlight:
        """Start carrying out the changes of the logged decision `decision_id`; `on_done()` when they end."""
        ...

    def take_in(self, flight: InFlight | None, app: str) -> TakenIn | None:
        """What `flight` left once it has ended (None: still running, or nothing in flight)."""
        ...


class RequestDesk(Protocol):
    """The operator's requests (daemon/manual.py), served by the leader between its own actions."""

    def serve(self, cfg: Config, app: AppConfig, leadership: Leadership,
              snapshot: Snapshot | None) -> list[ActionResult]:
        """Carry out and answer the pending requests (without a snapshot, only those on a
        journaled migration); what was carried out."""
        ...

    def watch(self, app: str, on_request: Callable[[], None]) -> None:
        """Call `on_request()` whenever a request arrives (for as long as the process lives)."""
        ...

    def resume(self, cfg: Config, app: AppConfig, leadership: Leadership,
               journal: Journal) -> tuple[str, ActionResult]:
        """Finish (or roll back) the migration a dead leader left running: its decision id, result."""
        ...
