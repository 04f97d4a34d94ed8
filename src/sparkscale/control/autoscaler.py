"""The control loop of the managed apps: one `cycle` of one app at a time, as collect -> decide ->
act -> record, each step calling the collaborators the daemon built and handed in (Flink's
`JobAutoScalerImpl`, a composition of collector, evaluator, executor and event handler).

A cycle for one app:

1. leadership: try the app's lock; a new leader reloads the app's recent decisions from the
   action log, finishes a migration a dead leader left running, and watches for the operator's
   requests (agents take commands only from the lock's live holder);
2. collect: one snapshot per query, with the stores' reads of the app (shape, partitions,
   blocklist) in its last Redis round trip; an app not running, or with no query yet, is
   reported, not scaled; an unreachable service: back-off and nothing done;
3. decide: the leader takes in the background action that ended, serves the operator's requests
   and judges the executed decisions that are due (blocking what their policy says), and if it
   settled any, reads the stores again; then the planner decides over all the app's queries with
   the app's typed decision history (past decisions, blocklist, last action, migration journal,
   partitions, the cluster's claims);
4. act (leader, mode act: neither `loop.dry_run` nor `apps[].mode` advise or observe): the
   decision is written to the action log first, then its actions run in the background, so a
   slow actuation never blocks the cycle: the next cycles see it in progress (a guard holds any
   other change), and the cycle after it ends takes in its results; a decision that starts
   nothing (no change, or advice) is written off the cycle, in turn (`DecisionLog.write_later`);
5. record: the decision (`cycle` in the log; one written off the cycle once it has its id), and
   at the end of every cycle its summary (the metrics, the app's status for `sparkscale status`,
   why a cycle that did not decide did not).

Standbys run 1, 2, 3 (their planning part) and 5, but never write commands or the action log.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

import redis
import structlog

from sparkscale.config import AppConfig, AppMode, Config
from sparkscale.control.act import ActionExecutor, RequestDesk
from sparkscale.control.clock import Clock
from sparkscale.control.collect import SnapshotCollector
from sparkscale.control.cycle_costs import collect_parts_s, decide_parts_s, helper_cpu_s
from sparkscale.control.decide import ClusterPlanning, Planner
from sparkscale.control.decision import Decision, Mode, Role, app_mode
from sparkscale.control.events import (
    CycleEnded,
    CycleResult,
    Decided,
    LeaderElected,
    ManualActionDone,
    MigrationResumed,
)
from sparkscale.control.judge import OutcomeJudge
from sparkscale.control.leadership import Leadership
from sparkscale.control.sink import EventSink
from sparkscale.control.state import AppState
from sparkscale.control.stores import AppReads, Stores
from sparkscale.model.journal import Journal
from sparkscale.model.plan import Plan
from sparkscale.model.snapshot import Snapshot
from sparkscale.model.snapshot_merge import merge_snapshots
from sparkscale.monitors.collector import AppNotRunningError, NoQueriesYet
from sparkscale.monitors.spark_rest import SparkRestError
from sparkscale.policies.capacity import short_warnings
from sparkscale.policies.ds2 import capacity_task_overhead
from sparkscale.policies.history import DecisionHistory
from sparkscale.policies.outcomes import expectation_for
from sparkscale.store.bad_records import escaped

log = structlog.get_logger(__name__)

MAX_BACKOFF_CYCLES = 6  # while a service is unreachable, skip up to 2^6 - 1 intervals between tries
HISTORY_S = 3600.0  # decisions kept in memory (and recalled from the action log on election)


@dataclass
class _Run:
    """What one cycle has seen so far, for its summary (monotonic and CPU times of its start)."""

    started: float
    cpu_started: float
    role: Role | None = None
    epoch: int | None = None  # the leader's
    led_at: float | None = None  # leadership tried
    collected_at: float | None = None
    # After the collect: when each step ended (requests, history, plan, write), for the cycle line.
    marks: list[tuple[str, float]] = field(default_factory=list)
    executors: int | None = None
    parallelism: dict[str, int] | None = None
    blocked: int | None = None
    needing_attention: int | None = None
    detail: str = ""
    error: BaseException | None = None
    retry_in_s: float | None = None
    decision: Decision | None = None
    warnings: tuple[str, ...] = ()

    @property
    def leader(self) -> bool:
        return self.role == "leader"


class Autoscaler:
    """Runs the apps' cycles; builds none of its collaborators. `wake(app)` asks the daemon to run
    the app's next cycle now (an action ended, a request arrived)."""

    def __init__(self, cfg: Config, identity: str, *, collector: SnapshotCollector, planner: Planner,
                 cluster: ClusterPlanning, judge: OutcomeJudge, executor: ActionExecutor, requests: RequestDesk,
                 stores: Stores, elections: Mapping[str, Leadership], clock: Clock, sink: EventSink,
                 wake: Callable[[str], None], on_failed: Callable[[str], None] = lambda _app: None) -> None:
        self.cfg = cfg
        self.identity = identity
        self.collector = collector
        self.planner = planner
        self.cluster = cluster
        self.judge = judge
        self.executor = executor
        self.requests = requests
        self.stores = stores
        self.elections = elections
        self.clock = clock
        self.sink = sink
        self.wake = wake
        self.on_failed = on_failed  # a cycle that failed past its own summary (a metric's count)
        self.states: dict[str, AppState] = {}

    # -- the managed apps -------------------------------------------------------------------------

    def configure(self, cfg: Config) -> None:
        """A reloaded config: the next cycles run with it; every app's state is kept."""
        self.cfg = cfg

    def add_app(self, name: str) -> None:
        self.states.setdefault(name, AppState())

    def remove_app(self, name: str) -> None:
        self.states.pop(name, None)
        self.cluster.forget(name)

    def session_lost(self) -> None:
        """The ZooKeeper session is gone, and with it every lock and watch: take over afresh."""
        for st in self.states.values():
            st.elected_epoch = None
            st.watching_requests = False

    def stuck(self, limit_s: float) -> list[str]:
        """The apps whose cycle, or background action, has run for over `limit_s`."""
        now = self.clock.monotonic()
        return [name for name, st in self.states.items()
                if (st.running_since is not None and now - st.running_since > limit_s)
                or (st.in_flight is not None and now - st.in_flight.started > limit_s)]

    def cycled(self, cycles: int) -> bool:
        """Whether every app has run `cycles` cycles."""
        return all(st.cycles >= cycles for st in self.states.values())

    # -- one cycle --------------------------------------------------------------------------------

    def cycle(self, app_name: str) -> CycleResult | None:
        """One cycle of the app (None: not managed, or backing off). Never raises: a service that
        fails or a bug ends the cycle, which backs off and says why in its summary; what fails even
        that (the summary's own feeds, an app gone from the config) is logged as `cycle.failed`,
        counted through `on_failed`, and the app's next cycles and the other apps' go on."""
        try:
            return self._isolated_cycle(app_name)
        except Exception as exc:
            log.error("cycle.failed", app=escaped(app_name), error=escaped(repr(exc)), exc_info=exc)
            self.on_failed(app_name)
            return "error"

    def _isolated_cycle(self, app_name: str) -> CycleResult | None:
        st = self.states.get(app_name)
        if st is None or self.clock.monotonic() < st.skip_until:
            return None
        app = self.cfg.app(app_name)
        run = _Run(self.clock.monotonic(), self.clock.thread_cpu())
        st.running_since = run.started
        result: CycleResult = "ok"
        try:
            result = self._cycle(app, st, run)
        except (SparkRestError, redis.RedisError, OSError) as exc:
            result = "unreachable"
            self._back_off(st, run, exc)
        except Exception as exc:  # a bug must not kill the loop; the summary logs its traceback
            result = "error"
            self._back_off(st, run, exc)
        finally:
            st.running_since = None
            st.cycles += 1
            self.sink.emit(CycleEnded(
                app.name, result, self.clock.now(), self.clock.monotonic() - run.started, run.role, run.epoch,
                run.detail, run.error, st.failures, run.retry_in_s, run.executors, run.parallelism, run.blocked,
                run.needing_attention, run.decision, run.warnings, st.recent()))
        return result

    def _back_off(self, st: AppState, run: _Run, exc: BaseException) -> None:
        st.failures += 1
        run.error = exc
        run.retry_in_s = self.cfg.loop.interval_s * (2 ** min(st.failures, MAX_BACKOFF_CYCLES) - 1)
        st.skip_until = self.clock.monotonic() + run.retry_in_s

    def _cycle(self, app: AppConfig, st: AppState, run: _Run) -> CycleResult:
        leadership = self.elections[app.name]
        leader = self._lead(app, st, leadership)
        run.led_at = self.clock.monotonic()
        run.role, run.epoch = ("leader", leadership.epoch) if leader else ("standby", None)
        try:
            snapshots, merged, reads = self._collect(app, run)
        except (AppNotRunningError, NoQueriesYet) as exc:
            return self._report_absent(self.stores.apps.with_shape(app), st, leadership, run, exc)
        st.failures = 0
        settled = leader and self._settle(reads.app, st, leadership, merged)
        run.marks.append(("requests", self.clock.monotonic()))
        if settled:  # what the leader settled may have changed what the stores hold: read it again
            reads = self.stores.apps.read(app, [s.query for s in snapshots], merged.taken_at)
        app = reads.app  # with the executor shape a migration gave it: what its executors have (and DS2 counts with)
        if app_mode(app, self.cfg.loop.dry_run) == AppMode.OBSERVE:
            decision = self._observe(app, leadership, snapshots, merged, reads, run)
        else:
            decision = self._decide(app, st, leadership, snapshots, merged, reads, run)
        decision_id = self._act(app, st, leadership, decision) if leader and decision.mode == "acted" else None
        run.marks.append(("write", self.clock.monotonic()))
        self._record(st, decision, decision_id, run, later=leader and decision.mode in ("no_change", "dry_run"))
        return "ok"

    # -- the steps --------------------------------------------------------------------------------

    def _lead(self, app: AppConfig, st: AppState, leadership: Leadership) -> bool:
        leader = leadership.try_acquire()
        if leader and st.elected_epoch != leadership.epoch:  # before the collect: the shape read on its own
            self._take_over(self.stores.apps.with_shape(app), st, leadership)
        return leader

    def _collect(self, app: AppConfig, run: _Run) -> tuple[list[Snapshot], Snapshot, AppReads]:
        """The app's query snapshots, and the app's own (every query's operators, the executors
        once); with what the stores read of the app in the collect's last round trip."""
        snapshots, reads = self.collector(self.cfg, app.name, self.stores.apps.ride(app))
        run.collected_at = self.clock.monotonic()
        merged = merge_snapshots(snapshots)
        run.executors, run.parallelism = len(merged.executors), {op.id: op.parallelism for op in merged.operators}
        return snapshots, merged, reads

    def _decide(self, app: AppConfig, st: AppState, leadership: Leadership, snapshots: list[Snapshot],
                snapshot: Snapshot, reads: AppReads, run: _Run) -> Decision:
        """Policy -> guards -> blocklist -> Spark mapping (policies/planner.py) over the app's
        history as the stores have it now (`reads`)."""
        now = snapshot.taken_at
        history = self._history(app, st, leadership, snapshots, snapshot, reads, run)
        run.marks.append(("history", self.clock.monotonic()))
        cluster = self.cluster.plan(now) if run.leader else None
        plan = self.planner(snapshots, history, self.cfg, app, now, cluster=cluster)
        run.marks.append(("plan", self.clock.monotonic()))
        st.history = st.history.with_decision(max(now, st.history.last_decided_at), plan).trimmed(now - HISTORY_S)
        return Decision(app.name, run.role or "standby", leadership.epoch, tuple(snapshots), snapshot,
                        reads.partitions, plan, expectation_for(plan, snapshot, app), self._mode(app, plan, run.leader))

    def _observe(self, app: AppConfig, leadership: Leadership, snapshots: list[Snapshot], snapshot: Snapshot,
                 reads: AppReads, run: _Run) -> Decision:
        """Observe mode: no plan, nothing written; the cycle line shows the snapshots (mode `observe`)."""
        self.cluster.observe(app, snapshot, None)  # its executors still count for the other apps' room
        plan = Plan(self.cfg.policy.name, app.name,
                    explanation=("mode observe (apps[].mode): snapshots only, no plan is made",))
        return Decision(app.name, run.role or "standby", leadership.epoch, tuple(snapshots), snapshot,
                        reads.partitions, plan, None, "observe")

    def _act(self, app: AppConfig, st: AppState, leadership: Leadership, decision: Decision) -> str:
        """Write the decision with actions in line (after every decision queued before it), then
        start its changes in the background. Written first: if Redis refuses it, the RedisError
        ends the cycle with nothing done (no unrecorded action)."""
        decision_id = self.stores.decisions.write(decision)
        st.in_flight = self.executor.start(self.cfg, app, leadership, decision_id, decision,
                                           on_done=lambda: self.wake(app.name))
        return decision_id

    def _record(self, st: AppState, decision: Decision, decision_id: str | None, run: _Run, later: bool) -> None:
        """The decision's event (the `cycle` line), and what the cycle's summary shows of it; one
        written `later` is emitted once the log has its id, with the times up to the hand-over."""
        st.decided(decision.mode, decision.plan, decision.decided_at)
        if decision.mode == "dry_run" and run.leader:
            st.last_action_at = decision.decided_at  # dry runs keep the cooldown, to show what would be done
        decided = Decided(decision, decision_id, duration_s=self.clock.monotonic() - run.started,
                          collect_s=(run.collected_at or run.started) - run.started,
                          cpu_s=self.clock.thread_cpu() - run.cpu_started + helper_cpu_s(decision.snapshot),
                          collect_parts_s=collect_parts_s((run.led_at or run.started) - run.started, decision.snapshot),
                          decide_parts_s=decide_parts_s(run.collected_at or run.started, run.marks))
        emit = self.sink.emit
        if later:
            self.stores.decisions.write_later(decision, lambda written: emit(replace(decided, decision_id=written)))
        else:
            emit(decided)
        cluster = self.cluster.plan(decision.decided_at) if run.leader else None
        placement = [] if cluster is None else [f"placement {cluster.policy}: {w.message}" for w in cluster.warnings]
        run.decision, run.warnings = decision, short_warnings(decision.plan) + tuple(placement)

    # -- what the steps call ----------------------------------------------------------------------

    def _report_absent(self, app: AppConfig, st: AppState, leadership: Leadership, run: _Run,
                       exc: AppNotRunningError | NoQueriesYet) -> CycleResult:
        """An app that disappears, or whose agent lists no query yet (starting), is reported, not
        scaled; a stranded migration's query is stopped, yet its journal and requests are served."""
        run.detail = str(exc)
        self._journal(app, run)
        if run.leader:
            self._serve_requests(app, st, leadership, None)
        st.failures = 0
        return "absent" if isinstance(exc, AppNotRunningError) else "no_queries"

    def _take_over(self, app: AppConfig, st: AppState, leadership: Leadership) -> None:
        """A new leader picks up where the last one left off: decisions, cooldown, pending
        judgements. No fencing command needed: the agent checks each command against the lock."""
        assert leadership.epoch is not None
        now = self.clock.now()
        recalled = self.stores.decisions.recall(app, now, now - HISTORY_S, self._evaluate_after_s())
        st.recalled(recalled)
        journal = self.stores.journals.read(app.name)
        if journal is not None and journal.active and app_mode(app, self.cfg.loop.dry_run) == AppMode.ACT:
            # A leader died during a migration: finish it (or roll it back) before anything else.
            decision_id, result = self.requests.resume(self.cfg, app, leadership, journal)
            self.sink.emit(MigrationResumed(app.name, decision_id, result))
            st.last_action_at = self.clock.now()
        if not st.watching_requests:
            self.requests.watch(app.name, lambda: self.wake(app.name))
            st.watching_requests = True
        st.elected_epoch = leadership.epoch
        self.sink.emit(LeaderElected(app.name, self.identity, leadership.epoch, recalled.decisions,
                                     len(st.pending), st.last_action_at))

    def _settle(self, app: AppConfig, st: AppState, leadership: Leadership, snapshot: Snapshot) -> bool:
        """What the leader owes before it plans: the action that ended, the requests, the outcomes due."""
        served = self._serve_requests(app, st, leadership, snapshot)
        due = len(st.pending)
        self._judge_due(app, st, snapshot)
        return served or len(st.pending) < due

    def _serve_requests(self, app: AppConfig, st: AppState, leadership: Leadership,
                        snapshot: Snapshot | None) -> bool:
        """Take in the background action that ended, if any; then, with none under way, carry out the
        operator's requests (without a snapshot only those on a journaled migration). Whether any."""
        took_in = self._take_in(app, st)
        if st.in_flight is not None:
            return took_in
        results = self.requests.serve(self.cfg, app, leadership, snapshot)
        for result in results:
            st.manual_done(result, self.clock.now())
            self.sink.emit(ManualActionDone(app.name, result))
        return took_in or bool(results)

    def _take_in(self, app: AppConfig, st: AppState) -> bool:
        taken = self.executor.take_in(st.in_flight, app.name)
        if taken is None:
            return False
        if taken.done is not None:  # the stall it caused, for EDRP's downtime model; the flight's start, wall clock
            started_at = self.clock.now() - (self.clock.monotonic() - taken.flight.started)
            self.cluster.action_done(app.name, taken.done, started_at, taken.finished_at)
        st.took_in(taken, self._evaluate_after_s())
        return True

    def _judge_due(self, app: AppConfig, st: AppState, snapshot: Snapshot) -> None:
        for learned in self.judge.judge_due(app, st.pending, snapshot, self.cfg.outcomes, self.clock.now(),
                                            task_overhead=capacity_task_overhead(self.cfg.policy)):
            st.history = st.history.with_scaling(learned)

    def _history(self, app: AppConfig, st: AppState, leadership: Leadership, snapshots: list[Snapshot],
                 snapshot: Snapshot, reads: AppReads, run: _Run) -> DecisionHistory:
        """The history the planner reads: the app's own, with what the stores and the cluster say now."""
        run.blocked = len(reads.blocklist.entries)
        journal = self._journal(app, run)
        if run.leader and st.in_flight is None:  # a done migration's pending figures (no action writes the journal now)
            journal = self.stores.journals.follow_up(self.cfg, leadership.epoch, journal)
        self.cluster.observe(app, snapshot, snapshots if run.leader else None)
        held_cores, held_memory_mb = self.cluster.held_elsewhere(app.name)
        return replace(st.history, blocklist=reads.blocklist, last_action_at=st.last_action_at or 0.0,
                       cores_claimed_elsewhere=self.cluster.claimed_elsewhere(app.name),
                       cores_held_elsewhere=held_cores, memory_mb_held_elsewhere=held_memory_mb,
                       change_costs=self.cluster.change_costs(app.name, self.cfg.migration.strategy),
                       migration_strategy=self.cfg.migration.strategy,
                       migration_running=journal is not None and journal.open,
                       last_migration_end=journal.phases.get("done") if journal else None,
                       partitions=reads.partitions, last_action_direction=st.last_action_direction,
                       action_in_progress=st.in_flight.summary if st.in_flight else None)

    def _journal(self, app: AppConfig, run: _Run) -> Journal | None:
        """The app's migration journal (None: none, or ZooKeeper not connected), and whether it
        needs the operator (the summary's gauge)."""
        if not self.stores.journals.connected:
            return None
        journal = self.stores.journals.read(app.name)
        run.needing_attention = int(journal is not None and journal.needs_attention)
        return journal

    def _mode(self, app: AppConfig, plan: Plan, leader: bool) -> Mode:
        if not plan.changes:
            return "no_change"
        if app_mode(app, self.cfg.loop.dry_run) != AppMode.ACT:  # advise: loop.dry_run, or the app's mode
            return "dry_run"
        return "acted" if leader else "standby"

    def _evaluate_after_s(self) -> float:
        """How long after an action its outcome is judged."""
        return self.cfg.outcomes.evaluation_windows * self.cfg.loop.window_s
