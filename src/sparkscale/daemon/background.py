"""Actions carried out in the background, so that a slow actuation (a scale-down waiting for its
executors to leave, a migration) never blocks the MAPE cycle and APScheduler never skips runs.

The cycle writes the decision, then `BackgroundExecutor.start` hands its changes to a thread pool;
the next cycles see the action in progress (the planner's in-progress guard holds any other
change), and the first cycle after it ended takes in its results (`take_in`). What starts and
ends is emitted to the loop's event sink (`action.started`, `action.done` in the log).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor

from sparkscale.actuators.base import ActionLogWriter, ActuationContext, carry_out
from sparkscale.config import AppConfig, Config
from sparkscale.control.act import InFlight, TakenIn
from sparkscale.control.clock import Clock, SystemClock
from sparkscale.control.decision import Decision
from sparkscale.control.events import ActionCrashed, ActionDone, ActionStarted
from sparkscale.control.leadership import Leadership
from sparkscale.control.sink import EventSink
from sparkscale.model.action_result import ActionResult

# What an actuator gets to act on the app at the lock's epoch (daemon/wiring.py's ActuationContexts).
Contexts = Callable[[Config, AppConfig, Leadership], ActuationContext]


class BackgroundExecutor:
    """Carries out logged decisions on `pool` (one at a time per app: the in-progress guard; apps
    in parallel), their results logged to `action_log` by `carry_out`."""

    def __init__(self, pool: Executor, action_log: ActionLogWriter, contexts: Contexts, sink: EventSink,
                 clock: Clock | None = None) -> None:
        self.pool = pool
        self.action_log = action_log
        self.contexts = contexts
        self.sink = sink
        self.clock = clock or SystemClock()

    def start(self, cfg: Config, app: AppConfig, leadership: Leadership, decision_id: str, decision: Decision,
              on_done: Callable[[], None]) -> InFlight:
        """Carry out the logged decision's changes; `on_done` is called when they end (the daemon
        then wakes the app's cycle at once)."""
        ctx = self.contexts(cfg, app, leadership)
        actions, clock, action_log = decision.plan.changes, self.clock, self.action_log

        def run() -> tuple[list[ActionResult], float]:
            return carry_out(action_log, decision_id, actions, ctx), clock.now()

        summary = "; ".join(a.summary() for a in actions)
        future = self.pool.submit(run)
        self.sink.emit(ActionStarted(app.name, decision_id, summary, tuple(a.reason for a in actions),
                                     decision.expected))
        future.add_done_callback(lambda _f: on_done())
        return InFlight(decision_id, summary, future, clock.monotonic(), decision.expected, decision.plan.policy,
                        decision.snapshot.query)

    def take_in(self, flight: InFlight | None, app: str) -> TakenIn | None:
        """The results of `flight` if it has ended (None while it runs, or with nothing in flight)."""
        if flight is None or not flight.future.done():
            return None
        try:
            results, finished_at = flight.future.result()
        except Exception as exc:  # a bug in an actuator must not kill the loop; the decision stays logged
            self.sink.emit(ActionCrashed(app, flight.decision_id, exc))
            return TakenIn(flight, None, "", self.clock.now())
        self.sink.emit(ActionDone(app, flight.decision_id, self.clock.monotonic() - flight.started, tuple(results)))
        done = [r for r in results if r.status == "done"]
        return TakenIn(flight, done[0].action if done else None, "; ".join(r.action.summary() for r in done),
                       finished_at)
