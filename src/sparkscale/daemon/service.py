"""The daemon: the MAPE loop, one APScheduler job per managed application (the composition root).

A cycle for one app (the daemon owns time; each stage below is a module of its own):

1. leadership: try the app's ZooKeeper lock (leader.py); a new leader reloads the app's recent
   decisions from the action log (agents take commands only from the lock's live holder);
2. monitor: `collect_snapshots`, one per query (Spark REST, Redis, psutil); an app not running, or
   with no query yet, is reported, not scaled; an unreachable service: back-off and no action;
3. manual requests (leader): carry out `scale-executors` and `migrate` requests (manual.py); with
   no live query, only `migrate --resume|--abort ID` (a stranded migration's query is stopped);
4. evaluate: judge earlier executed actions whose due time has come (evaluator.py), blocking
   what their policy's semantics say (the blocklist, in Redis) and learning the app's scalability;
   with no action under way, record a done migration's follow-up figures once known (followup.py);
5. plan: `planner.decide_app` over all the app's queries (policy, guards, blocklist, Spark mapping),
   with the app's typed decision history (past decisions, blocklist, last action, migration state);
6. execute (leader, not dry-run): the decision is logged first; its actions are carried out in
   the background (`actuators.base.carry_out`, which logs the results), so a slow actuation never
   blocks the cycle: the next cycles see it in progress (a guard holds any other change), and
   the cycle after it ends takes in its results (`action.done`).

Every cycle logs one `cycle` event: snapshot id, role, each query's figures, the plan's actions,
the mode and what was done. Standbys run 1, 2, 5 and log, but never write commands or the action log.

A slow or failing cycle never piles up: one run per app at a time, missed runs coalesce.
"""

from __future__ import annotations

import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

import redis
import structlog
from apscheduler.jobstores.base import JobLookupError
from apscheduler.schedulers.background import BackgroundScheduler
from kazoo.client import KazooState

from sparkscale.actuators.base import ActuationContext
from sparkscale.actuators.migration import JournalStore
from sparkscale.config import AppConfig, Config, ConfigError, load_config
from sparkscale.daemon import followup, manual
from sparkscale.daemon import status as app_status
from sparkscale.daemon.action_log import (
    ActionLog,
    BlocklistStore,
    DecisionRecord,
    executed,
    past_decisions,
    snapshot_id,
)
from sparkscale.daemon.background import InFlight, TakenIn, start_actions, take_in_results
from sparkscale.daemon.cluster_planner import ClusterPlanner
from sparkscale.daemon.evaluator import OutcomeEvaluator, PendingOutcome, observations_from_log
from sparkscale.daemon.leader import LeaderElection, default_identity, zk_client
from sparkscale.daemon.manual import app_restarter
from sparkscale.daemon.metrics import DaemonMetrics
from sparkscale.daemon.notify import Notifier
from sparkscale.model.journal import Journal
from sparkscale.monitors.collector import AppNotRunningError, NoQueriesYet, collect_snapshots
from sparkscale.monitors.spark_rest import SparkRestError
from sparkscale.apps.submit import with_stored_shape
from sparkscale.policies.capacity import short_warnings, shortfall
from sparkscale.policies.history import DecisionHistory
from sparkscale.policies.outcomes import expectation_for
from sparkscale.policies.planner import decide_app
from sparkscale.protocol.streams import query_partitions
from sparkscale.redisconn import connect
from sparkscale.model.snapshot import Snapshot
from sparkscale.model.snapshot_merge import merge_snapshots

log = structlog.get_logger(__name__)

MAX_BACKOFF_CYCLES = 6  # while a service is unreachable, skip up to 2^6 - 1 intervals between tries
HISTORY_S = 3600.0  # decisions kept in memory (and reloaded from the action log on election)
# Sections whose change needs a restart (connections and identity); a reload keeps the old ones.
RESTART_SECTIONS = ("spark", "cluster", "redis", "zookeeper", "metrics", "daemon", "logging")


@dataclass
class _AppState:
    cycles: int = 0
    failures: int = 0
    skip_until: float = 0.0
    history: DecisionHistory = field(default_factory=DecisionHistory)
    last_action_at: float | None = None
    pending: list[PendingOutcome] = field(default_factory=list)
    elected_epoch: int | None = None
    watching_requests: bool = False
    running_since: float | None = None
    last_decision: str | None = None
    last_decision_at: float | None = None
    last_action: str | None = None
    last_action_direction: int | None = None
    in_flight: InFlight | None = None


class Daemon:
    def __init__(self, cfg: Config, max_cycles: int | None = None, config_path: str | None = None,
                 overrides: tuple[str, ...] | list[str] = ()):
        self.cfg = cfg
        self.config_path = config_path
        self.overrides = tuple(overrides)
        self.max_cycles = max_cycles
        self.identity = cfg.daemon.id or default_identity()
        self._stop, self._wake, self._reload_requested = threading.Event(), threading.Event(), threading.Event()
        self._apps_to_wake, self._apps_to_wake_lock = set[str](), threading.Lock()
        self.zk = zk_client(cfg.zookeeper)
        self.redis = connect(cfg.redis)
        self.action_log = ActionLog(self.redis, cfg.redis.key_prefix, cfg.action_log)
        self.blocklist = BlocklistStore(self.redis, cfg.redis.key_prefix)
        self.metrics = DaemonMetrics()
        self.evaluator = OutcomeEvaluator(self.action_log, self.blocklist, self.metrics)
        self.cluster = ClusterPlanner(cfg, on_plan=self.metrics.set_placement, redis_client=self.redis)
        self.notifier = Notifier()
        self._state: dict[str, _AppState] = {}
        self.elections: dict[str, LeaderElection] = {}
        # Actions run here, off the cycle: one at a time per app (the in-progress guard), apps in parallel.
        self.actuation = ThreadPoolExecutor(max_workers=max(2, len(cfg.apps)), thread_name_prefix="sparkscale-act")
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
        self.actuation.shutdown(wait=True)  # an action under way is finished, not abandoned half-done
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
        self.cfg = new
        self.cluster.configure(new)
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
        self.cluster.forget(name)
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
                      8 * self.cfg.migration.phase_timeout_s,  # a migration: its follow-up is the cycle's (followup.py)
                      ) + 3 * self.cfg.loop.interval_s + 60
        now = time.monotonic()
        stuck = [name for name, st in self._state.items()
                 if (st.running_since is not None and now - st.running_since > limit_s)
                 or (st.in_flight is not None and now - st.in_flight.started > limit_s)]
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
        st.running_since, cpu_started = started, time.thread_time()  # CPU: the daemon's own work (`cpu_s`)
        result = "ok"
        try:
            result = self._cycle(app, st, started, cpu_started)
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

    def _cycle(self, app: AppConfig, st: _AppState, started: float, cpu_started: float) -> str:
        # The executor shape a migration gave the app is what its executors have (and DS2 counts with).
        app = with_stored_shape(app, self.redis, self.cfg.redis.key_prefix)
        election = self.elections[app.name]
        leader = election.try_acquire()
        if leader and st.elected_epoch != election.epoch:
            self._on_elected(app, st, election)
        self.metrics.set_leader(app.name, leader)
        role = "leader" if leader else "standby"

        try:
            snapshots = collect_snapshots(self.cfg, app.name)
        except (AppNotRunningError, NoQueriesYet) as exc:
            # An app that disappears, or whose agent lists no query yet (starting), is reported, not scaled.
            result = "absent" if isinstance(exc, AppNotRunningError) else "no_queries"
            log.warning("cycle.app_absent" if result == "absent" else "cycle.no_queries", app=app.name, role=role,
                        reason=str(exc), action="none")
            self._read_journal(app.name)  # a stranded migration's query is stopped: its metric, its requests
            if leader:
                self._serve_manual_requests(app, st, election, None)
            self._publish(app, st, election, role, result, detail=str(exc))
            st.failures = 0
            return result
        st.failures, collected_at = 0, time.monotonic()
        snapshot = merge_snapshots(snapshots)  # the app's: every query's operators, the executors once
        now = snapshot.taken_at
        self.metrics.set_executors(app.name, len(snapshot.executors))
        self.metrics.set_parallelism(app.name, {op.id: op.parallelism for op in snapshot.operators})

        if leader:
            self._serve_manual_requests(app, st, election, snapshot)
            for learned in self.evaluator.judge_due(app, st.pending, snapshot, self.cfg.outcomes):
                st.history = st.history.with_scaling(learned)
        blocklist = self.blocklist.blocklist(now, app.name)
        self.metrics.set_blocked(app.name, len(blocklist.entries))

        # Monitor -> snapshot -> planner (policy -> guards -> blocklist -> Spark mapping) -> plan.
        journal = self._read_journal(app.name)
        if leader and st.in_flight is None:  # a done migration's pending figures (no action writes the journal now)
            journal = followup.finish(self.cfg, self.zk, self.redis, election.epoch, journal)
        partitions = {s.query: query_partitions(self.redis, self.cfg.redis.key_prefix, app.name, s.query,
                                                app.shuffle_partitions) for s in snapshots}
        queries = tuple(app_status.query_view(s, partitions[s.query]) for s in snapshots)
        self.cluster.observe(app, snapshot, snapshots if leader else None)
        history = replace(st.history, blocklist=blocklist, last_action_at=st.last_action_at or 0.0,
                          cores_claimed_elsewhere=self.cluster.claimed_elsewhere(app.name),
                          migration_running=journal is not None and journal.open,
                          last_migration_end=journal.phases.get("done") if journal else None,
                          partitions=partitions, last_action_direction=st.last_action_direction,
                          action_in_progress=st.in_flight.summary if st.in_flight else None)
        guarded = decide_app(snapshots, history, self.cfg, app, now, cluster=self.cluster.plan(now) if leader else None)
        st.history = st.history.with_decision(max(now, st.history.last_decided_at), guarded).trimmed(now - HISTORY_S)
        self.metrics.count_decision(app.name, guarded.policy, bool(guarded.changes))
        short = shortfall(guarded)
        self.metrics.set_cluster_short(app.name, short)
        if short:
            log.warning("cluster.short", app=app.name, short_executors=short, warning=short_warnings(guarded)[0])
        expected = expectation_for(guarded, snapshot, app)
        diagnosis = expected.diagnosis if expected else guarded.observation.diagnosis
        snap_id = snapshot_id(snapshot)

        if not guarded.changes:
            mode = "no_change"
        elif self.cfg.loop.dry_run:
            mode = "dry_run"
        else:
            mode = "acted" if leader else "standby"
        decision_id = None
        if leader:
            record = DecisionRecord(app.name, now, snap_id, self.identity, election.epoch, guarded.policy,
                                    diagnosis, guarded, "acted" if mode == "acted" else mode, expected)
            kept_snapshot = snapshot if guarded.actions else None
            # The decision is written before acting: if Redis refuses it, the RedisError ends the
            # cycle with no action. The actions then run in the background.
            decision_id = self.action_log.append_decision(record, kept_snapshot)
            if mode == "acted":
                st.in_flight = start_actions(self.actuation, self.action_log, self._context(app, election), decision_id,
                                             guarded.changes, expected, guarded.policy, snapshot.query,
                                             on_done=lambda: self._wake_app(app.name))
            if mode == "dry_run":
                st.last_action_at = now  # dry runs keep the cooldown, to show what the daemon would do
                for action in guarded.changes:
                    self.metrics.count_action(app.name, action.type, "dry_run")
        if guarded.actions or mode != "no_change":
            st.last_decision = f"{mode}: " + ("; ".join(a.summary() for a in guarded.actions) or "nothing")
            st.last_decision_at = now
        elif st.last_decision is None:
            st.last_decision, st.last_decision_at = "no_change", now
        scale = next((a for a in guarded.actions if a.type == "scale_executors"), None)
        log.info(
            "cycle", app=app.name, role=role, epoch=election.epoch, snapshot_id=snap_id, policy=guarded.policy,
            diagnosis=diagnosis, executors=len(snapshot.executors), mode=mode, decision_id=decision_id,
            target_executors=scale.to if scale is not None else None,
            queries=[q.to_dict() for q in queries],
            actions=[a.summary() for a in guarded.actions],
            reasons=[a.reason for a in guarded.actions],
            explanation=list(guarded.explanation), observation=guarded.observation.to_dict(),
            duration_s=round(time.monotonic() - started, 4), collect_s=round(collected_at - started, 4),
            cpu_s=round(time.thread_time() - cpu_started, 4),  # the rest of duration_s: waiting on Spark, Redis, ZK
        )
        cluster = self.cluster.plan(now) if leader else None
        warnings = short_warnings(guarded) + tuple(
            f"placement {cluster.policy}: {w.message}" for w in (cluster.warnings if cluster else ()))
        self._publish(app, st, election, role, "ok", executors=len(snapshot.executors),
                      parallelism={op.id: op.parallelism for op in snapshot.operators}, queries=queries,
                      warnings=warnings)
        return "ok"

    # -- stages -----------------------------------------------------------------------------------

    def _remember(self, app: str, st: _AppState, taken: TakenIn) -> None:
        """What an ended background action leaves: the cooldown's reference, its outcome to judge, and
        the stall to measure (EDRP's downtime)."""
        if taken.done is not None:
            started_at = time.time() - (time.monotonic() - taken.flight.started)  # the flight's start, wall clock
            self.cluster.downtime.action_done(app, taken.done, started_at, taken.finished_at)
            st.last_action_at, st.last_action, st.last_action_direction = (
                taken.finished_at, taken.summary, taken.direction)
            pending = taken.pending_outcome(self.cfg.outcomes.evaluation_windows * self.cfg.loop.window_s)
            st.pending += [pending] if pending is not None else []

    def _on_elected(self, app: AppConfig, st: _AppState, election: LeaderElection) -> None:
        """A new leader picks up where the last one left off: decisions, cooldown, pending judgements."""
        assert election.epoch is not None
        now = time.time()
        logged = self.action_log.read(app.name, since=now - HISTORY_S)
        st.history = DecisionHistory(past_decisions(logged), scalability=observations_from_log(logged, app))
        acted = executed(logged)
        st.last_action_at = acted[-1].done_at if acted else None
        windows_s = self.cfg.outcomes.evaluation_windows * self.cfg.loop.window_s
        st.pending = [
            PendingOutcome(d.id, d.decision.expected, d.decision.plan.changes[0], (d.done_at or now) + windows_s,
                           d.decision.policy, d.decision.plan.observation.query)
            for d in acted if d.outcome is None and d.decision.expected is not None and d.decision.plan.changes
        ]
        # No fencing command needed: the agent checks each command against the live lock holder.
        journal = JournalStore(self.zk, self.cfg.zookeeper.root, app.name).read()
        if journal is not None and journal.active and not self.cfg.loop.dry_run:
            # A leader died during a migration: finish it (or roll it back) before anything else.
            decision_id, result = manual.run_migration(
                self.action_log, self._context(app, election, strategy=journal.strategy, resume=True),
                journal.query, journal.to_partitions,
                f"resume migration {journal.id} left at {journal.next} by epoch {journal.epoch}",
                from_partitions=journal.from_partitions)
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

    def _context(self, app: AppConfig, election: LeaderElection, **request: Any) -> ActuationContext:
        """What the actuators get to act on `app` at this daemon's epoch (`request`: per-request fields)."""
        return ActuationContext(self.cfg, app, self.zk, self.redis, election.epoch or 0, lambda: election.is_leader,
                                self.identity, app_restarter(self.cfg, app.name, self.config_path, self.overrides),
                                **request)

    def _serve_manual_requests(self, app: AppConfig, st: _AppState, election: LeaderElection,
                               snapshot: Snapshot | None) -> None:
        """Take in the background action that ended, if any; then, with none under way, carry out the
        operator's requests (manual.py; without a snapshot only those on a journaled migration)."""
        taken = take_in_results(st.in_flight, self.metrics, app.name)
        if taken is not None:
            st.in_flight = None
            self._remember(app.name, st, taken)
        if st.in_flight is not None:
            return
        for result in manual.serve_requests(self.zk, self.cfg.zookeeper.root, app.name, self.action_log,
                                            lambda **request: self._context(app, election, **request), self.identity,
                                            self.cfg.loop.dry_run, snapshot):
            if result.status == "done":
                st.last_action_at = time.time()
                st.last_action = f"manual: {result.action.summary()}"
            self.metrics.count_action(app.name, result.action.type, result.status)

    def _read_journal(self, app_name: str) -> Journal | None:
        """The app's migration journal (None: none, or ZooKeeper not connected); sets its attention metric."""
        if not self.zk.connected:
            return None
        journal = JournalStore(self.zk, self.cfg.zookeeper.root, app_name).read()
        self.metrics.set_migrations_needing_attention(app_name, int(journal is not None and journal.needs_attention))
        return journal

    def _publish(self, app: AppConfig, st: _AppState, election: LeaderElection, role: str, result: str,
                 executors: int | None = None, parallelism: dict[str, int] | None = None, detail: str = "",
                 queries: tuple[app_status.QueryView, ...] = (), warnings: tuple[str, ...] = ()) -> None:
        try:
            app_status.publish(self.redis, self.cfg.redis.key_prefix, app.name, app_status.AppStatus(
                daemon=self.identity, role=role, epoch=election.epoch if role == "leader" else None,
                cycle_at=time.time(), result=result, executors=executors, parallelism=parallelism or {},
                last_decision=st.last_decision, last_decision_at=st.last_decision_at, last_action=st.last_action,
                last_action_at=st.last_action_at, detail=detail, queries=queries, warnings=warnings))
        except redis.RedisError as exc:
            log.warning("status.publish_failed", app=app.name, error=str(exc))


def _now() -> datetime:
    return datetime.now(timezone.utc)
