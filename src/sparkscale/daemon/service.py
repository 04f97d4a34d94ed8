"""The daemon: the MAPE loop, one APScheduler job per managed application (the composition root).

A cycle for one app (the daemon owns time; each stage below is a module of its own):

1. leadership: try the app's ZooKeeper lock (leader.py); a new leader reloads the app's recent
   decisions from the action log and fences older leaders with a `report` command at its epoch;
2. monitor: `collect_snapshot` (Spark REST, Redis, psutil); an app that is not running is
   reported, not scaled; an unreachable service means back-off and no action;
3. manual requests (leader): carry out `sparkscale scale-executors` requests (manual.py);
4. evaluate: judge earlier executed actions whose time has come (outcomes.py), blocking those that
   fell short (the blocklist, in Redis);
5. plan: the configured policy, then the guards (cooldown, stabilisation, delays, step caps), then
   the blocklist;
6. execute (leader, not dry-run): log the decision first, carry out the executor actions through
   the control agent (actuators/executors.py), log the results.

Every cycle logs one `cycle` event: snapshot id, role, the plan's actions, the mode and what was
done. Standbys run 1, 2, 5 and log, but never write commands or the action log.

A slow or failing cycle never piles up: one run per app at a time, missed runs coalesce.
"""

from __future__ import annotations

import json
import math
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone

import redis
import structlog
from apscheduler.jobstores.base import JobLookupError
from apscheduler.schedulers.background import BackgroundScheduler
from kazoo.client import KazooState

from sparkscale.actuators.executors import ActionResult, ExecutorActuator
from sparkscale.actuators.migration import JournalStore, MigrationRunner
from sparkscale.config import AppConfig, Config, ConfigError, load_config
from sparkscale.daemon import manual
from sparkscale.daemon import status as app_status
from sparkscale.daemon.action_log import (
    ActionLog,
    BlocklistEntry,
    BlocklistStore,
    DecisionRecord,
    LoggedDecision,
    OutcomeRecord,
    snapshot_id,
)
from sparkscale.daemon.leader import LeaderElection, default_identity, zk_client
from sparkscale.daemon.metrics import DaemonMetrics
from sparkscale.daemon.migrations import app_restarter, migrate, query_migration, run_migration
from sparkscale.daemon.notify import Notifier
from sparkscale.daemon.outcomes import Expectation, drop_blocked, expectation_for, judge
from sparkscale.monitors.collector import AppNotRunningError, collect_snapshot
from sparkscale.monitors.spark_rest import SparkRestClient, SparkRestError
from sparkscale.pipeline.submit import driver_ui_port, with_stored_shape
from sparkscale.pipeline.workloads import workload
from sparkscale.plan import Action
from sparkscale.policies.base import DecisionHistory, PastDecision, get_policy
from sparkscale.policies.dhalion import BlockedAction, DhalionHistory
from sparkscale.policies.guards import GuardInput, apply_guards, observations_of
from sparkscale.protocol.commands import send_command
from sparkscale.redisconn import connect
from sparkscale.snapshot import Snapshot

log = structlog.get_logger(__name__)

MAX_BACKOFF_CYCLES = 6  # while a service is unreachable, skip up to 2^6 - 1 intervals between tries
HISTORY_S = 3600.0  # decisions kept in memory (and reloaded from the action log on election)
# Sections whose change needs a restart (connections and identity); a reload keeps the old ones.
RESTART_SECTIONS = ("spark", "cluster", "redis", "zookeeper", "metrics", "daemon", "logging")


@dataclass
class _Pending:
    """An executed decision waiting to be judged."""

    decision_id: str
    expected: Expectation
    action: Action
    due_at: float


@dataclass
class _AppState:
    cycles: int = 0
    failures: int = 0
    skip_until: float = 0.0
    history: DecisionHistory = field(default_factory=DecisionHistory)
    last_action_at: float | None = None
    pending: list[_Pending] = field(default_factory=list)
    elected_epoch: int | None = None
    watching_requests: bool = False
    running_since: float | None = None
    last_decision: str | None = None
    last_decision_at: float | None = None
    last_action: str | None = None


class Daemon:
    def __init__(self, cfg: Config, max_cycles: int | None = None, config_path: str | None = None,
                 overrides: tuple[str, ...] | list[str] = ()):
        self.cfg = cfg
        self.config_path = config_path
        self.overrides = tuple(overrides)
        self.max_cycles = max_cycles
        self.identity = cfg.daemon.id or default_identity()
        self.policy = get_policy(cfg.policy.name)
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._reload_requested = threading.Event()
        self._apps_to_wake: set[str] = set()
        self._apps_to_wake_lock = threading.Lock()
        self.zk = zk_client(cfg.zookeeper.hosts, cfg.zookeeper.session_timeout_s)
        self.redis = connect(cfg.redis)
        self.action_log = ActionLog(self.redis, cfg.redis.key_prefix, cfg.action_log)
        self.blocklist = BlocklistStore(self.redis, cfg.redis.key_prefix)
        self.metrics = DaemonMetrics()
        self.notifier = Notifier()
        self._state: dict[str, _AppState] = {}
        self.elections: dict[str, LeaderElection] = {}
        self.scheduler = BackgroundScheduler(
            # A slow cycle never piles up: one run per app at a time, missed runs coalesce into one.
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None},
        )

    # -- lifecycle --------------------------------------------------------------------------------

    def run(self) -> int:
        """Run until SIGTERM/SIGINT (or `max_cycles` cycles per app); SIGHUP reloads the config."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda signum, _frame: self.stop(f"signal {signal.Signals(signum).name}"))
        signal.signal(signal.SIGHUP, lambda _signum, _frame: self.request_reload())
        self.zk.add_listener(self._on_zk_state)
        self.zk.start_async()  # connects (and reconnects) in the background; until then: standby
        metrics_port = None
        if self.cfg.metrics.enabled:
            metrics_port = self.metrics.serve(self.cfg.metrics.host, self.cfg.metrics.port)
        log.info("daemon.start", identity=self.identity, apps=[a.name for a in self.cfg.apps],
                 interval_s=self.cfg.loop.interval_s, policy=self.cfg.policy.name, dry_run=self.cfg.loop.dry_run,
                 master=self.cfg.spark.master_web_url, zookeeper=self.cfg.zookeeper.hosts,
                 metrics=f"http://{self.cfg.metrics.host}:{metrics_port}/metrics" if metrics_port else None)
        for app in self.cfg.apps:
            self._add_app(app)
        if self.notifier.watchdog_interval_s:
            self.scheduler.add_job(self._watchdog, "interval", seconds=self.notifier.watchdog_interval_s,
                                   id="watchdog", next_run_time=_now())
        self.scheduler.start()
        self.notifier.ready(f"managing {len(self.cfg.apps)} apps")
        while not self._stop.is_set():
            self._wake.wait()
            self._wake.clear()
            if self._reload_requested.is_set():
                self._reload_requested.clear()
                self.reload()
            self._run_woken_apps()
        self.notifier.stopping()
        self.scheduler.shutdown(wait=True)
        for election in self.elections.values():
            election.release()
        self.zk.stop()
        self.zk.close()
        self.metrics.close()
        log.info("daemon.stop", identity=self.identity)
        return 0

    def stop(self, reason: str) -> None:
        if not self._stop.is_set():
            log.info("daemon.stopping", reason=reason)
            self._stop.set()
            self._wake.set()

    def request_reload(self) -> None:
        self._reload_requested.set()
        self._wake.set()

    def reload(self) -> None:
        """Re-read the config file; keep every app's state. An invalid file changes nothing."""
        self.notifier.reloading()
        try:
            new = load_config(self.config_path, self.overrides)
        except ConfigError as exc:
            log.error("config.reload_refused", path=self.config_path, error=str(exc), keeping="the running config")
            self.notifier.ready("config reload refused")
            return
        kept = {name for name in RESTART_SECTIONS if getattr(new, name) != getattr(self.cfg, name)}
        if kept:
            log.warning("config.reload_needs_restart", sections=sorted(kept), keeping="the running values")
            new = new.model_copy(update={name: getattr(self.cfg, name) for name in kept})
        old_apps = {a.name for a in self.cfg.apps}
        new_apps = {a.name for a in new.apps}
        interval_changed = new.loop.interval_s != self.cfg.loop.interval_s
        if new.policy.name != self.cfg.policy.name:
            self.policy = get_policy(new.policy.name)
        self.cfg = new
        for name in old_apps - new_apps:
            self._remove_app(name)
        for app in new.apps:
            if app.name not in old_apps:
                self._add_app(app)
            elif interval_changed:
                self.scheduler.reschedule_job(f"cycle:{app.name}", trigger="interval", seconds=new.loop.interval_s)
        log.info("config.reloaded", path=self.config_path, added=sorted(new_apps - old_apps),
                 removed=sorted(old_apps - new_apps), policy=new.policy.name, dry_run=new.loop.dry_run,
                 interval_s=new.loop.interval_s)
        self.notifier.ready(f"managing {len(new.apps)} apps")

    def _add_app(self, app: AppConfig) -> None:
        self._state.setdefault(app.name, _AppState())
        self.elections[app.name] = LeaderElection(self.zk, self.cfg.zookeeper.root, app.name, self.identity)
        self.scheduler.add_job(self.cycle, "interval", args=[app.name], seconds=self.cfg.loop.interval_s,
                               id=f"cycle:{app.name}", next_run_time=_now())

    def _remove_app(self, name: str) -> None:
        self.scheduler.remove_job(f"cycle:{name}")
        election = self.elections.pop(name, None)
        if election is not None:
            election.release()
        self._state.pop(name, None)
        self.metrics.forget_app(name)

    def _on_zk_state(self, state: str) -> None:
        if state == KazooState.LOST:
            for st in self._state.values():
                st.elected_epoch = None
                st.watching_requests = False
        log.info("zookeeper.state", state=str(state))

    def _watchdog(self) -> None:
        """Ping systemd's watchdog only while no cycle is stuck (a hung loop gets restarted)."""
        limit_s = max(2 * self.cfg.actuator.ack_timeout_s + self.cfg.actuator.confirm_timeout_s,
                      # a migration: up to 8 phases, then following the query to measure it
                      8 * self.cfg.migration.phase_timeout_s + self.cfg.migration.measure_timeout_s,
                      ) + 3 * self.cfg.loop.interval_s + 60
        now = time.monotonic()
        stuck = [name for name, st in self._state.items()
                 if st.running_since is not None and now - st.running_since > limit_s]
        if stuck:
            log.error("daemon.stuck", apps=stuck, limit_s=limit_s, watchdog="not pinged")
            return
        self.notifier.watchdog()

    # -- one cycle --------------------------------------------------------------------------------

    def cycle(self, app_name: str) -> None:
        st = self._state.get(app_name)
        if st is None or time.monotonic() < st.skip_until:
            return
        app = self.cfg.app(app_name)
        started = time.monotonic()
        st.running_since = started
        result = "ok"
        try:
            result = self._cycle(app, st, started)
        except (SparkRestError, redis.RedisError, OSError) as exc:
            result = "unreachable"
            self._back_off(app, st, exc)
        except Exception as exc:  # a bug must not kill the loop; it is logged with its traceback
            result = "error"
            log.exception("cycle.error", app=app.name, error=repr(exc), action="none")
            self._back_off(app, st, exc)
        finally:
            st.running_since = None
            st.cycles += 1
            duration_s = time.monotonic() - started
            self.metrics.observe_cycle(app.name, duration_s)
            self.metrics.count_cycle(app.name, result)
        if self.max_cycles is not None and all(s.cycles >= self.max_cycles for s in self._state.values()):
            self.stop(f"{self.max_cycles} cycles done")

    def _back_off(self, app: AppConfig, st: _AppState, exc: BaseException) -> None:
        st.failures += 1
        backoff_s = self.cfg.loop.interval_s * (2 ** min(st.failures, MAX_BACKOFF_CYCLES) - 1)
        st.skip_until = time.monotonic() + backoff_s
        log.warning("cycle.unreachable", app=app.name, error=str(exc) or repr(exc), failures=st.failures,
                    retry_in_s=backoff_s, action="none")

    def _cycle(self, app: AppConfig, st: _AppState, started: float) -> str:
        # The executor shape a migration gave the app is what its executors have (and DS2 counts with).
        app = with_stored_shape(app, self.redis, self.cfg.redis.key_prefix)
        election = self.elections[app.name]
        leader = election.try_acquire()
        if leader and st.elected_epoch != election.epoch:
            self._on_elected(app, st, election)
        self.metrics.set_leader(app.name, leader)
        role = "leader" if leader else "standby"

        try:
            snapshot = collect_snapshot(self.cfg, app.name)
        except AppNotRunningError as exc:
            # An app that disappears is reported, not scaled.
            log.warning("cycle.app_absent", app=app.name, role=role, reason=str(exc), action="none")
            self._publish(app, st, election, role, "absent", detail=str(exc))
            st.failures = 0
            return "absent"
        st.failures = 0
        now = snapshot.taken_at
        self.metrics.set_executors(app.name, len(snapshot.executors))
        self.metrics.set_parallelism(app.name, {op.id: op.parallelism for op in snapshot.operators})

        if leader:
            self._serve_manual_requests(app, st, election, snapshot)
            self._evaluate(app, st, snapshot, force=False)
        blocklist = self.blocklist.blocklist(now, app.name)
        self.metrics.set_blocked(app.name, len(blocklist.entries))

        # Monitor -> snapshot -> policy -> plan -> guards -> blocklist.
        plan = self.policy.decide(snapshot, DhalionHistory.of(st.history, blocklist), self.cfg.policy, app)
        journal = JournalStore(self.zk, self.cfg.zookeeper.root, app.name).read() if self.zk.connected else None
        guarded = apply_guards(plan, GuardInput(
            snapshot, st.history, app, migration_running=journal is not None and journal.status == "running",
            last_migration_end=journal.phases.get("done") if journal else None,
            last_action_at=st.last_action_at if st.last_action_at else 0.0), self.cfg.guards, self.cfg.loop)
        guarded = drop_blocked(guarded, blocklist, now)
        st.history = _trim(st.history.with_decision(max(now, _last_time(st.history)), guarded), now)
        self.metrics.count_decision(app.name, guarded.policy, bool(guarded.changes))
        expected = expectation_for(guarded, snapshot, app)
        diagnosis = expected.diagnosis if expected else observations_of(guarded).get("diagnosis")
        snap_id = snapshot_id(snapshot)

        if not guarded.changes:
            mode = "no_change"
        elif self.cfg.loop.dry_run:
            mode = "dry_run"
        else:
            mode = "acted" if leader else "standby"
        results: list[ActionResult] = []
        decision_id = None
        if leader:
            record = DecisionRecord(app.name, now, snap_id, self.identity, election.epoch, guarded.policy,
                                    diagnosis, guarded, "acted" if mode == "acted" else mode, expected)
            # Written before acting: if Redis refuses it, the RedisError ends the cycle with no action.
            decision_id = self.action_log.append_decision(record, snapshot if guarded.actions else None)
            if mode == "acted":
                self._evaluate(app, st, snapshot, force=True)  # judge what is pending before changing more
                results = self._execute(app, st, election, guarded.changes)
                self.action_log.append_results(decision_id, app.name, results)
                done = [r for r in results if r.status == "done"]
                if done:
                    st.last_action_at = time.time()
                    st.last_action = "; ".join(r.action.summary() for r in done)
                    if expected is not None:
                        windows_s = self.cfg.outcomes.evaluation_windows * self.cfg.loop.window_s
                        st.pending.append(_Pending(decision_id, expected, done[0].action, time.time() + windows_s))
            elif mode == "dry_run":
                st.last_action_at = now  # dry runs keep the cooldown, to show what the daemon would do
                for action in guarded.changes:
                    self.metrics.count_action(app.name, action.type, "dry_run")
        if guarded.actions or mode != "no_change":
            st.last_decision = f"{mode}: " + ("; ".join(a.summary() for a in guarded.actions) or "nothing")
            st.last_decision_at = now
        elif st.last_decision is None:
            st.last_decision, st.last_decision_at = "no_change", now
        log.info(
            "cycle", app=app.name, role=role, epoch=election.epoch, snapshot_id=snap_id, policy=guarded.policy,
            diagnosis=diagnosis, executors=len(snapshot.executors), mode=mode, decision_id=decision_id,
            actions=[a.summary() for a in guarded.actions],
            reasons=[a.reason for a in guarded.actions],
            results=[{"action": r.action.summary(), "status": r.status, "detail": r.detail, "confirm_s": r.confirm_s}
                     for r in results],
            explanation=[line for line in guarded.explanation if not line.startswith("observations: ")],
            duration_s=round(time.monotonic() - started, 4),
        )
        self._publish(app, st, election, role, "ok", executors=len(snapshot.executors),
                      parallelism={op.id: op.parallelism for op in snapshot.operators})
        return "ok"

    # -- stages -----------------------------------------------------------------------------------

    def _on_elected(self, app: AppConfig, st: _AppState, election: LeaderElection) -> None:
        """A new leader picks up where the last one left off: decisions, cooldown, pending judgements."""
        assert election.epoch is not None
        now = time.time()
        logged = self.action_log.read(app.name, since=now - HISTORY_S)
        st.history = _history_of(logged)
        acted = [d for d in logged if d.results and any(r.status == "done" for r in d.results)]
        st.last_action_at = acted[-1].done_at if acted else None
        windows_s = self.cfg.outcomes.evaluation_windows * self.cfg.loop.window_s
        st.pending = [
            _Pending(d.id, d.decision.expected, d.decision.plan.changes[0], (d.done_at or now) + windows_s)
            for d in acted if d.outcome is None and d.decision.expected is not None and d.decision.plan.changes
        ]
        # Fence: the agent keeps the highest epoch it has seen and refuses older leaders' commands.
        send_command(self.zk, self.cfg.zookeeper.root, app.name, "report", {}, election.epoch)
        journal = JournalStore(self.zk, self.cfg.zookeeper.root, app.name).read()
        if journal is not None and journal.status == "running" and not self.cfg.loop.dry_run:
            # A leader died during a migration: finish it (or roll it back) before anything else.
            decision_id, journal, result = run_migration(
                self.cfg, app, self.zk, self.redis, self.action_log, election.epoch, lambda: election.is_leader,
                self.identity, journal.query, journal.to_partitions, journal.strategy,
                f"resume migration {journal.id} left at {journal.next} by epoch {journal.epoch}", resume=True,
                restart_app=self._restarter(app))
            log.info("migration.resumed", app=app.name, decision_id=decision_id, status=result.status,
                     detail=result.detail)
            st.last_action_at = time.time()
        if not st.watching_requests:
            manual.watch_requests(self.zk, self.cfg.zookeeper.root, app.name, lambda: self._wake_app(app.name))
            st.watching_requests = True
        st.elected_epoch = election.epoch
        log.info("leader.elected", app=app.name, identity=self.identity, epoch=election.epoch,
                 decisions_loaded=len(logged), pending_outcomes=len(st.pending),
                 last_action_at=st.last_action_at)

    def _wake_app(self, app_name: str) -> None:
        """Ask for the app's cycle to run now. Called on cycle and kazoo threads, so it only hands the
        app to the main thread: APScheduler's shutdown holds its job-store lock while it waits for the
        running cycles, and a `modify_job` from one of them would wait on that lock for ever."""
        with self._apps_to_wake_lock:
            self._apps_to_wake.add(app_name)
        self._wake.set()

    def _run_woken_apps(self) -> None:
        """On the main thread: bring the woken apps' next cycle forward to now."""
        with self._apps_to_wake_lock:
            woken, self._apps_to_wake = self._apps_to_wake, set()
        for app_name in sorted(woken):
            try:
                self.scheduler.modify_job(f"cycle:{app_name}", next_run_time=_now())
            except JobLookupError:  # the app was removed meanwhile: nothing to wake
                pass

    def _restarter(self, app: AppConfig) -> Callable[[], object]:
        return app_restarter(self.cfg, app.name, self.config_path, self.overrides)

    def _actuator(self, app: AppConfig, election: LeaderElection) -> ExecutorActuator:
        rest = SparkRestClient.for_port(driver_ui_port(self.cfg, app), timeout_s=self.cfg.spark.rest_timeout_s)
        return ExecutorActuator(self.zk, self.cfg.zookeeper.root, app.name, rest, self.cfg.actuator,
                                lambda: election.is_leader)

    def _execute(self, app: AppConfig, st: _AppState, election: LeaderElection,
                 actions: tuple[Action, ...]) -> list[ActionResult]:
        actuator = self._actuator(app, election)
        results = []
        query = workload(app.pipeline).query
        current = MigrationRunner(self.cfg, app, self.zk, self.redis, election.epoch or 0,
                                  lambda: election.is_leader).current_partitions(query)
        migration, covered = query_migration(actions, query, current)
        for action in actions:
            if action.type == "set_parallelism":
                if not covered or action is not covered[0]:
                    why = (f"covered by one migration of the query: {migration.summary()}" if migration
                           and action in covered else
                           f"{action.operator} has {action.from_} partitions, not the query's {current} shuffle "
                           "partitions (e.g. the source's): a migration cannot change them")
                    results.append(ActionResult(action, "skipped", why))
                    continue
                # A stateful query's partitions change only by a migration (stop, repartition, restart).
                log.info("migration.start", app=app.name, action=migration.summary(), epoch=election.epoch,
                         strategy=self.cfg.migration.strategy, reason=migration.reason)
                _journal, result = migrate(self.cfg, app, self.zk, self.redis, election.epoch or 0,
                                           lambda: election.is_leader, self.identity, migration,
                                           self.cfg.migration.strategy, restart_app=self._restarter(app))
                result = replace(result, action=action)  # logged against the plan's own action
            else:
                log.info("actuator.start", app=app.name, action=action.summary(), epoch=election.epoch,
                         reason=action.reason)
                result = actuator.execute(action, election.epoch or 0)
            if result.status == "failed":
                log.error("actuator.failed", app=app.name, action=action.summary(), detail=result.detail)
            self.metrics.count_action(app.name, action.type, result.status)
            results.append(result)
        return results

    def _serve_manual_requests(self, app: AppConfig, st: _AppState, election: LeaderElection,
                               snapshot: Snapshot) -> None:
        root = self.cfg.zookeeper.root
        for request in manual.pending_requests(self.zk, root, app.name):
            now = time.time()
            if request.expires_at < now:
                manual.answer(self.zk, root, app.name, request.name,
                              manual.ManualResult(False, "expired before a leader could carry it out"))
                continue
            if self.cfg.loop.dry_run:
                manual.answer(self.zk, root, app.name, request.name,
                              manual.ManualResult(False, "the daemon runs in dry-run mode: it never acts",
                                                  leader=self.identity))
                continue
            if request.type == "migrate":
                done = JournalStore(self.zk, root, app.name).read()
                if (done is not None and done.status == "done" and request.to in (None, done.to_partitions)
                        and done.shape == (asdict(request.executor_shape) if request.executor_shape else None)
                        and done.requested_at >= request.requested_at):
                    # Its leader died during it and this one finished it on election (_on_elected).
                    manual.answer(self.zk, root, app.name, request.name, manual.ManualResult(
                        True, json.dumps({"detail": f"completed by resuming migration {done.id}",
                                          "figures": done.marks.get("metrics")}), None, self.identity))
                    continue
                decision_id, _journal, result = run_migration(
                    self.cfg, app, self.zk, self.redis, self.action_log, election.epoch or 0,
                    lambda: election.is_leader, self.identity, request.query or workload(app.pipeline).query,
                    request.to, request.strategy or self.cfg.migration.strategy, f"manual request by {request.by}",
                    executors=request.executors, executor_actuator=self._actuator(app, election),
                    shape=request.executor_shape, restart_app=self._restarter(app))
                if result.status == "done":
                    st.last_action_at = time.time()
                    st.last_action = f"manual: {result.action.summary()}"
                self.metrics.count_action(app.name, "set_parallelism", result.status)
                manual.answer(self.zk, root, app.name, request.name, manual.ManualResult(
                    result.status == "done", json.dumps({"detail": result.detail, "figures": result.figures}),
                    decision_id, self.identity))
                continue
            decision_id, result = manual.carry_out(
                self.action_log, self._actuator(app, election), app, request.to, request.by,
                current=len(snapshot.executors), identity=self.identity, epoch=election.epoch or 0,
                snapshot_id=snapshot_id(snapshot), at=now)
            if result.status == "done":
                st.last_action_at = time.time()
                st.last_action = f"manual: {result.action.summary()}"
            self.metrics.count_action(app.name, "scale_executors", result.status)
            manual.answer(self.zk, root, app.name, request.name,
                          manual.ManualResult(result.status == "done", result.detail, decision_id, self.identity))

    def _evaluate(self, app: AppConfig, st: _AppState, snapshot: Snapshot, force: bool) -> None:
        """Judge executed actions whose evaluation time has come (all pending ones with `force`)."""
        now = time.time()
        for pending in list(st.pending):
            if not force and now < pending.due_at:
                continue
            verdict = judge(pending.expected, snapshot, app, self.cfg.outcomes.fraction)
            blocked_until = None
            if not verdict.met:
                # Dhalion: an action that did not bring the expected outcome is blocked for its diagnosis.
                blocked_until = now + self.cfg.outcomes.blocklist_ttl_s
                self.blocklist.block(BlocklistEntry(
                    BlockedAction(app.name, pending.expected.diagnosis, pending.action.type, blocked_until),
                    now, pending.decision_id, verdict.detail))
            detail = verdict.detail + (" (judged early: a new action follows)" if now < pending.due_at else "")
            self.action_log.append_outcome(OutcomeRecord(
                pending.decision_id, app.name, now, verdict.met, pending.expected.metric, pending.expected.before,
                pending.expected.after, verdict.observed, detail, blocked_until))
            self.metrics.count_action(app.name, pending.action.type, "met" if verdict.met else "not_met")
            log.info("outcome", app=app.name, decision_id=pending.decision_id, action=pending.action.summary(),
                     met=verdict.met, detail=detail, blocked_until=blocked_until)
            st.pending.remove(pending)

    def _publish(self, app: AppConfig, st: _AppState, election: LeaderElection, role: str, result: str,
                 executors: int | None = None, parallelism: dict[str, int] | None = None, detail: str = "") -> None:
        try:
            app_status.publish(self.redis, self.cfg.redis.key_prefix, app.name, app_status.AppStatus(
                daemon=self.identity, role=role, epoch=election.epoch if role == "leader" else None,
                cycle_at=time.time(), result=result, executors=executors, parallelism=parallelism or {},
                last_decision=st.last_decision, last_decision_at=st.last_decision_at, last_action=st.last_action,
                last_action_at=st.last_action_at, detail=detail))
        except redis.RedisError as exc:
            log.warning("status.publish_failed", app=app.name, error=str(exc))


def _history_of(logged: list[LoggedDecision]) -> DecisionHistory:
    decisions: list[PastDecision] = []
    for d in sorted(logged, key=lambda d: d.decision.decided_at):
        decisions.append(PastDecision(d.decision.decided_at, d.decision.plan))
    return DecisionHistory(tuple(decisions))


def _last_time(history: DecisionHistory) -> float:
    return history.last.decided_at if history.last else -math.inf


def _trim(history: DecisionHistory, now: float) -> DecisionHistory:
    if history.decisions and history.decisions[0].decided_at < now - HISTORY_S:
        return type(history)(history.since(now - HISTORY_S))
    return history


def _now() -> datetime:
    return datetime.now(timezone.utc)

