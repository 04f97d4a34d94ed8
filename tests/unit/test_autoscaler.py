"""The control loop with fake collaborators (no Spark, Redis or ZooKeeper): one cycle of one app
as collect -> decide -> act -> record, what a standby and a failing collector do, and the events
the one sink receives (control/autoscaler.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis

from sparkscale.config import AppConfig, Config
from sparkscale.control.act import InFlight, TakenIn
from sparkscale.control.autoscaler import Autoscaler
from sparkscale.control.decision import Decision
from sparkscale.control.events import (
    ActionDone,
    ActionStarted,
    CycleEnded,
    Decided,
    Event,
    EventKind,
    LeaderElected,
    MigrationResumed,
)
from sparkscale.control.judge import PendingOutcome
from sparkscale.control.state import AppState
from sparkscale.control.stores import AppReads, Recalled, Stores
from sparkscale.daemon import background
from sparkscale.daemon.background import BackgroundExecutor
from sparkscale.model.action_result import ActionResult
from sparkscale.model.journal import Journal
from sparkscale.model.plan import Action, Plan
from sparkscale.model.snapshot import Snapshot
from sparkscale.monitors.collector import NoQueriesYet
from sparkscale.monitors.spark_rest import SparkRestError
from sparkscale.policies.history import DecisionHistory
from sparkscale.policies.outcomes import CAPACITY, Blocklist, Expectation

APP = "app"
TAKEN_AT = 1_000_000.0
SCALE_UP = Plan("ds2", APP, actions=(Action.scale_executors(1, 3, "scale up: 3 cores needed"),),
                explanation=("DS2 over 1 operator",))
NO_CHANGE = Plan("ds2", APP, explanation=("DS2 over 1 operator",))
EXPECTED = Expectation("under_provisioned", "scale_executors", CAPACITY, 10.0, 30.0, 0.0)


def snapshot(executors: int = 1) -> Snapshot:
    return Snapshot.from_dict({
        "version": 1, "app": APP, "query": "q", "taken_at": TAKEN_AT, "window_s": 30.0,
        "executors": [{"id": str(k + 1), "host": "127.0.0.1", "cores": 1} for k in range(executors)],
        "operators": [{"id": "src", "parallelism": 2, "source": True, "arrival_rate": 10.0, "backlog": 0,
                       "instances": [{"records_in": 10.0, "records_out": 10.0, "useful_time_s": 1.0,
                                      "executor": "1"}]}],
        "edges": [],
    })


# -- fakes ------------------------------------------------------------------------------------------


@dataclass
class FakeClock:
    wall: float = TAKEN_AT + 1.0
    mono: float = 500.0

    def now(self) -> float:
        return self.wall

    def monotonic(self) -> float:
        return self.mono

    def thread_cpu(self) -> float:
        return 0.0


@dataclass
class FakeLock:
    leader: bool = True
    held_epoch: int = 7

    @property
    def epoch(self) -> int | None:
        return self.held_epoch if self.leader else None

    @property
    def is_leader(self) -> bool:
        return self.leader

    def try_acquire(self) -> bool:
        return self.leader


@dataclass
class FakeCollector:
    """The snapshots, with what the ride reads queued on `client`'s pipeline (None: a pipeline that
    answers nothing), one round trip."""

    snapshots: list[Snapshot] = field(default_factory=lambda: [snapshot()])
    error: Exception | None = None
    calls: int = 0
    client: Any = None

    def __call__(self, cfg: Config, app_name: str, ride: Any, /) -> tuple[list[Snapshot], AppReads]:
        self.calls += 1
        if self.error is not None:
            raise self.error
        pipe = self.client.pipeline(transaction=False) if self.client is not None else SilentPipeline()
        ridden = ride(pipe, [s.query for s in self.snapshots])
        return self.snapshots, ridden(pipe.execute(raise_on_error=False), self.snapshots[0].taken_at)


class SilentPipeline:
    def execute(self, raise_on_error: bool = True) -> list[Any]:
        return []


@dataclass
class FakePlanner:
    plans: list[Plan]
    seen: list[DecisionHistory] = field(default_factory=list)
    snapshots: list[Sequence[Snapshot]] = field(default_factory=list)  # each plan's
    apps: list[AppConfig] = field(default_factory=list)  # each plan's

    def __call__(self, snapshots: Sequence[Snapshot], history: DecisionHistory, config: Config, app: AppConfig,
                 now: float | None = None, /, *, cluster: Any = None) -> Plan:
        self.seen.append(history)
        self.snapshots.append(snapshots)
        self.apps.append(app)
        return self.plans.pop(0) if len(self.plans) > 1 else self.plans[0]


@dataclass
class FakeCluster:
    done: list[tuple[str, Action]] = field(default_factory=list)

    def observe(self, app: AppConfig, merged: Snapshot, led: Sequence[Snapshot] | None) -> None:
        pass

    def claimed_elsewhere(self, app: str) -> int:
        return 0

    def change_costs(self, app: str, strategy: str) -> dict[str, tuple[float, ...]]:
        return {f"migration_{strategy}": (12.0,)}  # a measured stall: handed to DS2 through the history

    def held_elsewhere(self, app: str) -> tuple[int, int]:
        return (5, 6144)  # what the other apps hold: handed to the quotas through the history

    def plan(self, now: float) -> None:
        return None

    def action_done(self, app: str, action: Action, started_at: float, ended_at: float) -> None:
        self.done.append((app, action))

    def forget(self, app: str) -> None:
        pass


@dataclass
class FakeJudge:
    calls: int = 0
    task_overhead: list[bool] = field(default_factory=list)  # each call's

    def judge_due(self, app: AppConfig, pending: list[Any], snapshot: Snapshot, cfg: Any,
                  now: float | None = None, task_overhead: bool = True) -> list[Any]:
        self.calls += 1
        self.task_overhead.append(task_overhead)
        return []


@dataclass
class FakeExecutor:
    """Records what it is asked to carry out; nothing ever ends."""

    started: list[tuple[str, tuple[Action, ...]]] = field(default_factory=list)

    def start(self, cfg: Config, app: AppConfig, leadership: Any, decision_id: str, decision: Decision,
              on_done: Callable[[], None]) -> InFlight:
        actions = decision.plan.changes
        self.started.append((decision_id, actions))
        return InFlight(decision_id, "; ".join(a.summary() for a in actions), Future(), 500.0, decision.expected,
                        decision.plan.policy, decision.snapshot.query)

    def take_in(self, flight: InFlight | None, app: str) -> TakenIn | None:
        return None


@dataclass
class FakeDesk:
    served: int = 0
    watched: list[str] = field(default_factory=list)
    resumed: list[str] = field(default_factory=list)

    def serve(self, cfg: Config, app: AppConfig, leadership: Any, snapshot: Snapshot | None) -> list[ActionResult]:
        self.served += 1
        return []

    def watch(self, app: str, on_request: Callable[[], None]) -> None:
        self.watched.append(app)

    def resume(self, cfg: Config, app: AppConfig, leadership: Any, journal: Journal) -> tuple[str, ActionResult]:
        self.resumed.append(journal.id)
        return "5-0", ActionResult(Action.set_parallelism("q", 4, 8, "resume"), "done", "migrated")


@dataclass
class FakeDecisions:
    records: list[Decision] = field(default_factory=list)
    refuse: bool = False
    recalled: Recalled = field(default_factory=lambda: Recalled(DecisionHistory(), None))

    def write(self, decision: Decision) -> str:
        if self.refuse:
            raise redis.ConnectionError("Redis is down")
        self.records.append(decision)
        return f"{len(self.records)}-0"

    def write_later(self, decision: Decision, on_written: Callable[[str | None], None]) -> None:
        """Written at once (the daemon's writer is tested in test_decision_writer.py); refused: None."""
        on_written(None if self.refuse else self.write(decision))

    def recall(self, app: AppConfig, now: float, since: float, evaluate_after_s: float) -> Recalled:
        return self.recalled


class FakeJournals:
    connected = True
    journal: Journal | None = None

    def read(self, app: str) -> Journal | None:
        return self.journal

    def follow_up(self, cfg: Config, epoch: int | None, journal: Journal | None) -> Journal | None:
        return journal


class FakeApps:
    def with_shape(self, app: AppConfig) -> AppConfig:
        return app

    def ride(self, app: AppConfig) -> Callable[[Any, Sequence[str]], Callable[[Any, float], AppReads]]:
        return lambda pipe, queries: lambda replies, taken_at: self.read(app, queries, taken_at)

    def read(self, app: AppConfig, queries: Sequence[str], now: float) -> AppReads:
        return AppReads(app, dict.fromkeys(queries, 4), Blocklist())


@dataclass
class RecordingSink:
    events: list[Event] = field(default_factory=list)

    def emit(self, event: Event) -> None:
        self.events.append(event)

    def of(self, kind: EventKind) -> list[Event]:
        return [e for e in self.events if e.kind == kind]


@dataclass
class Loop:
    autoscaler: Autoscaler
    collector: FakeCollector
    planner: FakePlanner
    executor: Any
    desk: FakeDesk
    judge: FakeJudge
    decisions: FakeDecisions
    sink: RecordingSink
    lock: FakeLock
    clock: FakeClock
    woken: list[str]

    @property
    def state(self) -> AppState:
        return self.autoscaler.states[APP]

    def ended(self) -> list[CycleEnded]:
        return [e for e in self.sink.events if isinstance(e, CycleEnded)]

    def decided(self) -> list[Decided]:
        return [e for e in self.sink.events if isinstance(e, Decided)]


def loop(*plans: Plan, leader: bool = True, dry_run: bool = False, executor: Any = None,
         sink: RecordingSink | None = None, elected: bool = True, policy: dict[str, Any] | None = None,
         decisions: FakeDecisions | None = None) -> Loop:
    cfg = Config.model_validate({"apps": [{"name": APP, "pipeline": "wordcount"}], "loop": {"dry_run": dry_run},
                                 "policy": policy or {}})
    collector, planner, desk, judge = FakeCollector(), FakePlanner(list(plans) or [NO_CHANGE]), FakeDesk(), FakeJudge()
    decisions, sink, lock, clock = decisions or FakeDecisions(), sink or RecordingSink(), FakeLock(leader), FakeClock()
    executor = executor if executor is not None else FakeExecutor()
    woken: list[str] = []
    autoscaler = Autoscaler(
        cfg, "me", collector=collector, planner=planner, cluster=FakeCluster(), judge=judge, executor=executor,
        requests=desk, stores=Stores(decisions, FakeJournals(), FakeApps()),
        elections={APP: lock}, clock=clock, sink=sink, wake=woken.append)
    autoscaler.add_app(APP)
    if elected:
        autoscaler.states[APP].elected_epoch = lock.held_epoch
    return Loop(autoscaler, collector, planner, executor, desk, judge, decisions, sink, lock, clock, woken)


# -- one cycle --------------------------------------------------------------------------------------


def test_a_decision_with_an_action_is_written_once_then_dispatched_once():
    run = loop(SCALE_UP, NO_CHANGE)
    assert run.autoscaler.cycle(APP) == "ok"
    assert [d.mode for d in run.decisions.records] == ["acted"]
    written = run.decisions.records[0]
    assert (written.app, written.role, written.epoch, written.plan, written.decided_at) == \
        (APP, "leader", 7, SCALE_UP, TAKEN_AT)
    assert run.executor.started == [("1-0", SCALE_UP.changes)]
    [decided] = run.decided()
    assert (decided.decision, decided.decision_id, decided.decision.target_executors) == (written, "1-0", 3)
    assert run.state.in_flight is not None and run.state.last_decision == "acted: scale_executors 1 -> 3"
    # The cycle's summary: what `sparkscale status` shows and the gauges.
    [ended] = run.ended()
    assert (ended.result, ended.role, ended.epoch, ended.decision, ended.executors, ended.parallelism) == \
        ("ok", "leader", 7, written, 1, {"src": 2})
    assert ended.recent.decision == "acted: scale_executors 1 -> 3" and ended.recent.decision_at == TAKEN_AT
    assert run.desk.served == 1 and run.judge.calls == 1  # the leader settles what it owes first
    # An action under way: the next cycle's planner sees it (its guard holds any other change), and
    # the operator's requests wait for it to end.
    run.autoscaler.cycle(APP)
    assert run.planner.seen[-1].action_in_progress == "scale_executors 1 -> 3"
    assert (run.planner.seen[-1].cores_held_elsewhere, run.planner.seen[-1].memory_mb_held_elsewhere) == (5, 6144)
    assert run.planner.seen[-1].change_costs == {"migration_ccr": (12.0,)}
    assert run.planner.seen[-1].migration_strategy == "ccr"
    assert len(run.executor.started) == 1 and run.desk.served == 1
    assert [d.mode for d in run.decisions.records] == ["acted", "no_change"]


@pytest.mark.parametrize(("policy", "task_overhead"), [
    ({}, True),  # DS2 with its default
    ({"ds2": {"task_overhead": False}}, False),  # DS2's linear model: its expectations are measured by it
    ({"name": "dhalion", "ds2": {"task_overhead": False}}, True),  # another policy: the overhead model
])
def test_outcomes_are_judged_with_the_capacity_model_ds2_expected_by(policy: dict[str, Any], task_overhead: bool):
    run = loop(NO_CHANGE, policy=policy)
    run.autoscaler.cycle(APP)
    assert run.judge.task_overhead == [task_overhead]


def test_the_decision_is_written_before_acting_and_a_refused_write_does_nothing():
    run = loop(SCALE_UP)
    run.decisions.refuse = True
    assert run.autoscaler.cycle(APP) == "unreachable"
    assert run.executor.started == [] and run.sink.of(EventKind.DECISION) == []
    ended = run.sink.of(EventKind.CYCLE_ENDED)
    assert len(ended) == 1 and isinstance(ended[0], CycleEnded) and "Redis is down" in str(ended[0].error)


def test_a_collector_error_backs_off_and_records_nothing():
    run = loop(SCALE_UP)
    run.collector.error = SparkRestError("http://driver:4040/api/v1", "connection refused")
    assert run.autoscaler.cycle(APP) == "unreachable"
    interval_s = run.autoscaler.cfg.loop.interval_s
    assert run.state.failures == 1 and run.state.skip_until == run.clock.mono + interval_s
    assert run.decisions.records == [] and run.executor.started == [] and run.planner.seen == []
    assert [type(e) for e in run.sink.events] == [CycleEnded]
    ended = run.sink.events[0]
    assert isinstance(ended, CycleEnded) and (ended.result, ended.failures, ended.retry_in_s) == \
        ("unreachable", 1, interval_s)
    # Backing off: the next tries are skipped, then come further apart.
    assert run.autoscaler.cycle(APP) is None and run.collector.calls == 1 and len(run.sink.events) == 1
    run.clock.mono += interval_s
    run.autoscaler.cycle(APP)
    assert run.state.failures == 2 and run.state.skip_until == run.clock.mono + 3 * interval_s
    # A collected snapshot ends the back-off.
    run.collector.error = None
    run.clock.mono += 3 * interval_s
    assert run.autoscaler.cycle(APP) == "ok" and run.state.failures == 0


def test_a_bug_in_a_cycle_is_an_error_that_backs_off_too():
    run = loop(SCALE_UP)
    run.collector.error = ZeroDivisionError("oops")
    assert run.autoscaler.cycle(APP) == "error"
    ended = run.sink.events[-1]
    assert isinstance(ended, CycleEnded) and isinstance(ended.error, ZeroDivisionError)
    assert run.state.failures == 1 and run.decisions.records == []


def test_a_standby_decides_but_dispatches_nothing():
    run = loop(SCALE_UP, leader=False, elected=False)
    assert run.autoscaler.cycle(APP) == "ok"
    assert len(run.planner.seen) == 1
    assert run.executor.started == [] and run.decisions.records == []
    assert run.desk.served == 0 and run.judge.calls == 0 and run.desk.watched == []
    [decided] = run.decided()
    assert (decided.decision.mode, decided.decision.role, decided.decision_id) == ("standby", "standby", None)
    [ended] = run.ended()
    assert (ended.result, ended.role, ended.epoch) == ("ok", "standby", None)


def test_dry_run_writes_the_decision_keeps_the_cooldown_and_dispatches_nothing():
    run = loop(SCALE_UP, dry_run=True)
    run.autoscaler.cycle(APP)
    assert [d.mode for d in run.decisions.records] == ["dry_run"] and run.executor.started == []
    assert run.state.last_action_at == TAKEN_AT


@dataclass
class LaterDecisions(FakeDecisions):
    """A decision log whose writes off the cycle wait for `write_waiting` (the daemon's writer thread)."""

    waiting: list[tuple[Decision, Callable[[str | None], None]]] = field(default_factory=list)

    def write_later(self, decision: Decision, on_written: Callable[[str | None], None]) -> None:
        self.waiting.append((decision, on_written))

    def write_waiting(self) -> None:
        waiting, self.waiting = self.waiting, []
        for decision, on_written in waiting:
            on_written(None if self.refuse else self.write(decision))


@pytest.mark.parametrize(("plan", "dry_run"), [(NO_CHANGE, False), (SCALE_UP, True)])
def test_a_decision_that_starts_nothing_is_written_off_the_cycle_and_logged_once_it_has_its_id(
        plan: Plan, dry_run: bool):
    later = LaterDecisions()
    run = loop(plan, dry_run=dry_run, decisions=later)
    assert run.autoscaler.cycle(APP) == "ok"
    assert run.decided() == [] and later.records == [] and run.ended()[-1].result == "ok"  # the cycle did not wait
    assert run.state.last_action_at == (TAKEN_AT if dry_run else None)  # a dry run keeps the cooldown at once
    run.clock.mono += 5.0  # the write takes 5 s
    later.write_waiting()
    [decided] = run.decided()
    assert decided.decision_id == "1-0" and decided.decision is later.records[0]
    assert decided.duration_s == 0.0 and decided.decide_parts_s["write"] == 0.0  # timed to the hand-over
    later.refuse = True  # a write that fails: the cycle line without an id
    run.autoscaler.cycle(APP)
    later.write_waiting()
    assert [d.decision_id for d in run.decided()] == ["1-0", None]


def test_a_decision_with_actions_is_written_in_the_cycle_and_a_standbys_is_logged_at_once():
    later = LaterDecisions()
    run = loop(SCALE_UP, decisions=later)
    run.autoscaler.cycle(APP)
    assert later.waiting == [] and [d.decision_id for d in run.decided()] == ["1-0"]
    standby = loop(SCALE_UP, leader=False, elected=False, decisions=LaterDecisions())
    standby.autoscaler.cycle(APP)
    assert [(d.decision.mode, d.decision_id) for d in standby.decided()] == [("standby", None)]
    assert standby.decisions.waiting == []  # type: ignore[attr-defined]


def test_an_app_without_queries_is_reported_not_decided():
    run = loop(SCALE_UP)
    run.collector.error = NoQueriesYet(APP)
    assert run.autoscaler.cycle(APP) == "no_queries"
    assert run.planner.seen == [] and run.decisions.records == [] and run.state.failures == 0
    assert run.desk.served == 1  # a stranded migration's requests are still served
    [ended] = run.ended()
    assert (ended.result, ended.role, ended.needing_attention, ended.decision, ended.detail) == \
        ("no_queries", "leader", 0, None, str(NoQueriesYet(APP)))


def test_a_new_leader_takes_over_once_and_watches_for_requests():
    run = loop(NO_CHANGE, elected=False)
    due = PendingOutcome("9-0", EXPECTED, SCALE_UP.changes[0], TAKEN_AT + 60.0, "ds2", "q")
    run.decisions.recalled = Recalled(DecisionHistory(), 900.0, [due], decisions=3)
    run.autoscaler.cycle(APP)
    run.autoscaler.cycle(APP)
    elected = run.sink.of(EventKind.LEADER_ELECTED)
    assert len(elected) == 1 and isinstance(elected[0], LeaderElected)
    assert (elected[0].epoch, elected[0].decisions_loaded, elected[0].pending_outcomes, elected[0].last_action_at) == \
        (7, 3, 1, 900.0)
    assert run.state.pending == [due] and run.planner.seen[0].last_action_at == 900.0  # the cooldown goes on
    assert run.desk.watched == [APP] and run.state.elected_epoch == 7
    run.autoscaler.session_lost()
    run.autoscaler.cycle(APP)
    assert len(run.sink.of(EventKind.LEADER_ELECTED)) == 2 and run.desk.watched == [APP, APP]


def test_a_new_leader_finishes_the_migration_a_dead_leader_left_running_unless_in_dry_run():
    running = Journal(id="mig-1", app=APP, query="q", strategy="ccr", from_partitions=4, to_partitions=8,
                      requested_at=100.0, by="t", epoch=3, status="running")
    for dry_run, resumed in ((False, ["mig-1"]), (True, [])):
        run = loop(NO_CHANGE, elected=False, dry_run=dry_run)
        run.autoscaler.stores.journals.journal = running  # type: ignore[attr-defined]
        run.autoscaler.cycle(APP)
        assert run.desk.resumed == resumed
        assert [e.decision_id for e in run.sink.events if isinstance(e, MigrationResumed)] == \
            ["5-0" for _ in resumed]
        assert run.state.last_action_at == (run.clock.wall if resumed else None)


# -- the events, through the real background executor -----------------------------------------------


class RunAtOnce(Executor):
    """Runs a submitted call on the caller's thread (the pool of the background executor)."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except Exception as exc:
            future.set_exception(exc)
        return future


def test_the_sink_receives_one_event_per_decision_and_per_action(monkeypatch):
    done = ActionResult(SCALE_UP.changes[0], "done", "3 executors", confirm_s=1.5, executors_after=3)
    carried: list[str] = []
    monkeypatch.setattr(background, "carry_out", lambda log, decision_id, actions, ctx: carried.append(decision_id)
                        or [done])
    sink = RecordingSink()
    executor = BackgroundExecutor(RunAtOnce(), action_log=None, contexts=lambda cfg, app, lock: None,  # type: ignore[arg-type]
                                  sink=sink, clock=FakeClock())
    run = loop(SCALE_UP, NO_CHANGE, executor=executor, sink=sink)
    run.autoscaler.cycle(APP)  # decides, logs, starts the action (which ends at once and wakes the app)
    assert carried == ["1-0"] and run.woken == [APP]
    run.autoscaler.cycle(APP)  # takes in its results, decides no change
    kinds = [e.kind for e in sink.events]
    assert kinds == [EventKind.ACTION_STARTED, EventKind.DECISION, EventKind.CYCLE_ENDED,
                     EventKind.ACTION_DONE, EventKind.DECISION, EventKind.CYCLE_ENDED]
    started, action_done = sink.events[0], sink.events[3]
    assert isinstance(started, ActionStarted) and started.actions == "scale_executors 1 -> 3"
    # With each change's reason and the decision's expectation, for the console's action line.
    decided = sink.events[1]
    assert isinstance(decided, Decided) and started.reasons == ("scale up: 3 cores needed",)
    assert started.expected is not None and started.expected == decided.decision.expected
    assert isinstance(action_done, ActionDone) and action_done.results == (done,)
    # What the ended action left: the cooldown's reference and the direction the guards read.
    assert run.state.last_action == "scale_executors 1 -> 3" and run.state.last_action_direction == 1
    assert run.state.in_flight is None


def test_an_actuator_that_raises_is_an_event_and_the_loop_goes_on(monkeypatch):
    def broken(*_args: Any) -> list[ActionResult]:
        raise RuntimeError("actuator bug")

    monkeypatch.setattr(background, "carry_out", broken)
    sink = RecordingSink()
    executor = BackgroundExecutor(RunAtOnce(), None, lambda cfg, app, lock: None, sink, FakeClock())  # type: ignore[arg-type]
    run = loop(SCALE_UP, NO_CHANGE, executor=executor, sink=sink)
    run.autoscaler.cycle(APP)
    assert run.autoscaler.cycle(APP) == "ok"
    crashed = sink.of(EventKind.ACTION_CRASHED)
    assert len(crashed) == 1 and "actuator bug" in repr(crashed[0].error)  # type: ignore[union-attr]
    assert run.state.in_flight is None and run.state.last_action is None


@pytest.mark.parametrize("cycles", [1, 2])
def test_every_app_counts_its_cycles(cycles: int):
    run = loop(NO_CHANGE)
    for _ in range(cycles):
        run.autoscaler.cycle(APP)
    assert run.autoscaler.cycled(cycles) and not run.autoscaler.cycled(cycles + 1)


def test_the_cycle_line_says_where_the_collect_went():
    """collect_s by part (issue 33): the leadership step, then the collector's own (the shape is
    read in its Redis round trip); cpu_s with the CPU of the collector's helper threads."""
    run = loop(NO_CHANGE)
    timed = snapshot().to_dict()
    timed["extensions"] = {"spark": {"app_id": "a", "collect_parts_s": {"driver": 0.25, "redis": 0.01},
                                     "rest_cpu_s": 0.125}}
    run.collector.snapshots = [Snapshot.from_dict(timed)]
    clock, try_acquire = run.clock, run.lock.try_acquire
    collector = run.collector.__call__

    def slow_lock() -> bool:
        clock.mono += 0.5
        return try_acquire()

    def slow_collect(cfg: Config, app_name: str, ride: Any, /) -> tuple[list[Snapshot], AppReads]:
        clock.mono += 2.0
        return collector(cfg, app_name, ride)

    run.lock.try_acquire = slow_lock  # type: ignore[method-assign]
    run.autoscaler.collector = slow_collect
    assert run.autoscaler.cycle(APP) == "ok"
    [decided] = run.decided()
    assert decided.collect_s == 2.5
    assert decided.collect_parts_s == {"leadership": 0.5, "driver": 0.25, "redis": 0.01}
    # The daemon's own CPU: the cycle thread's (0 on this clock) and the collector's REST threads'.
    assert decided.cpu_s == 0.125


def test_the_cycle_line_says_where_the_time_after_the_collect_went():
    """The rest of duration_s by step (issue 33: the 10-app p99 spent 0.43 s outside the collect):
    a slow policy shows under `plan`, a slow decision write under `write`, and the parts add up."""
    run = loop(SCALE_UP)  # a decision with actions: written in the cycle
    clock, planner, write = run.clock, run.planner.__call__, run.autoscaler.stores.decisions.write

    def slow_plan(*args: Any, **kwargs: Any) -> Plan:
        clock.mono += 1.5
        return planner(*args, **kwargs)

    def slow_write(decision: Decision) -> str:
        clock.mono += 0.25
        return write(decision)

    run.autoscaler.planner = slow_plan
    run.autoscaler.stores.decisions.write = slow_write  # type: ignore[method-assign]
    assert run.autoscaler.cycle(APP) == "ok"
    [decided] = run.decided()
    assert decided.decide_parts_s == {"requests": 0.0, "history": 0.0, "plan": 1.5, "write": 0.25}
    assert decided.duration_s == pytest.approx(decided.collect_s + sum(decided.decide_parts_s.values()))
