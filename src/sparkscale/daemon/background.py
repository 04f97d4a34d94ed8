"""Actions carried out in the background, so that a slow actuation (a scale-down waiting for its
executors to leave, a migration) never blocks the MAPE cycle and APScheduler never skips runs.

The cycle logs the decision, then `start_actions` hands its actions to a thread pool; the next
cycles see the action in progress (the planner's in-progress guard holds any other change), and
the first cycle after it ended takes in its results (`take_in_results`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass

import structlog

from sparkscale.actuators.base import ActionLogWriter, ActionResult, ActuationContext, carry_out
from sparkscale.daemon.evaluator import PendingOutcome
from sparkscale.daemon.metrics import DaemonMetrics
from sparkscale.model.plan import Action
from sparkscale.policies.outcomes import Expectation

log = structlog.get_logger("sparkscale.daemon.service")


@dataclass
class InFlight:
    """An action the daemon is carrying out in the background."""

    decision_id: str
    summary: str
    future: Future
    started: float  # time.monotonic()
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


def start_actions(pool: Executor, action_log: ActionLogWriter, ctx: ActuationContext, decision_id: str,
                  actions: Sequence[Action], expected: Expectation | None, policy: str, query: str | None,
                  on_done: Callable[[], None]) -> InFlight:
    """Carry out the logged decision's actions on `pool`; `on_done` is called when they end (the
    daemon then wakes the app's cycle at once)."""

    def run() -> tuple[list[ActionResult], float]:
        return carry_out(action_log, decision_id, actions, ctx), time.time()

    summary = "; ".join(a.summary() for a in actions)
    future = pool.submit(run)
    log.info("action.started", app=ctx.app.name, decision_id=decision_id, actions=summary)
    future.add_done_callback(lambda _f: on_done())
    return InFlight(decision_id, summary, future, time.monotonic(), expected, policy, query)


def take_in_results(flight: InFlight | None, metrics: DaemonMetrics, app: str) -> TakenIn | None:
    """The results of `flight` if it has ended (None while it runs, or with nothing in flight)."""
    if flight is None or not flight.future.done():
        return None
    try:
        results, finished_at = flight.future.result()
    except Exception as exc:  # a bug in an actuator must not kill the loop; the decision stays logged
        log.exception("action.error", app=app, decision_id=flight.decision_id, error=repr(exc))
        return TakenIn(flight, None, "", time.time())
    for result in results:
        metrics.count_action(app, result.action.type, result.status)
    done = [r for r in results if r.status == "done"]
    log.info("action.done", app=app, decision_id=flight.decision_id,
             duration_s=round(time.monotonic() - flight.started, 3),
             results=[{"action": r.action.summary(), "status": r.status, "detail": r.detail,
                       "confirm_s": r.confirm_s} for r in results])
    return TakenIn(flight, done[0].action if done else None, "; ".join(r.action.summary() for r in done),
                   finished_at)
