"""The daemon process: leadership, signals, SIGHUP reload, systemd's notify and watchdog, the
APScheduler jobs and the ZooKeeper connection; and the composition root of the control loop, which
builds the loop's collaborators from the config once and hands them to the `Autoscaler`
(control/autoscaler.py, where a cycle is described).

One APScheduler job per managed app runs its cycles: a slow or failing cycle never piles up, one run
per app at a time, missed runs coalesce. An app is woken early (an action ended, a request arrived)
through the main thread. SIGHUP re-reads the config file; the sections that hold connections and
identity (`RESTART_SECTIONS`) need a restart.
"""

from __future__ import annotations

import contextlib
import faulthandler
import functools
import signal
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import redis
import structlog
from apscheduler.jobstores.base import JobLookupError
from apscheduler.schedulers.background import BackgroundScheduler
from kazoo.client import KazooClient, KazooState

from sparkscale.config import AppConfig, Config, ConfigError, load_config
from sparkscale.config.identities import DAEMON
from sparkscale.control.autoscaler import Autoscaler
from sparkscale.control.clock import SystemClock
from sparkscale.control.sink import FanOut
from sparkscale.daemon.background import BackgroundExecutor
from sparkscale.daemon.cluster_planner import ClusterPlanner
from sparkscale.daemon.decision_writer import OrderedActionLog
from sparkscale.daemon.evaluator import OutcomeEvaluator
from sparkscale.daemon.feeds import LogFeed, MetricsFeed, OutcomeFeed, StatusFeed
from sparkscale.daemon.leader import LeaderElection, default_identity, zk_client
from sparkscale.daemon.metrics import DaemonMetrics
from sparkscale.daemon.notify import Notifier
from sparkscale.daemon.wiring import ActuationContexts, RequestDesk, loop_stores
from sparkscale.monitors.cluster_view import prime_cluster_view
from sparkscale.monitors.collector import collect_riding
from sparkscale.monitors.host_sampler import HOST
from sparkscale.monitors.stage_prefetch import PREFETCH
from sparkscale.policies.planner import decide_app
from sparkscale.redisconn import connect_as
from sparkscale.store.bad_records import escaped
from sparkscale.store.live import live_store

log = structlog.get_logger(__name__)

MAIN_LOOP_TICK_S = 1.0  # the main thread wakes at least this often (signals are handled there)
STOP_STACKS_AFTER_S = 30.0  # a stop still running this long writes every thread's stack to stderr
NO_STDERR_FD = (AttributeError, ValueError, OSError, RuntimeError)  # faulthandler without a stderr descriptor
# Sections whose change needs a restart (connections and identity); a reload keeps the old ones.
RESTART_SECTIONS = ("spark", "cluster", "redis", "zookeeper", "metrics", "daemon", "logging")


class DaemonStartError(Exception):
    """The daemon cannot start in this environment (e.g. its metrics port is taken): exit, say why."""


class Daemon:
    """`zk` and `redis_client`: clients to use instead of the ones the config describes (tests)."""

    def __init__(self, cfg: Config, max_cycles: int | None = None, config_path: str | None = None,
                 overrides: tuple[str, ...] | list[str] = (), zk: KazooClient | None = None,
                 redis_client: redis.Redis | None = None) -> None:
        self.cfg = cfg
        self.config_path = config_path
        self.overrides = tuple(overrides)
        self.max_cycles = max_cycles
        self.identity = cfg.daemon.id or default_identity()
        self._stop, self._wake, self._reload_requested = threading.Event(), threading.Event(), threading.Event()
        self._apps_to_wake, self._apps_to_wake_lock = set[str](), threading.Lock()
        self.zk = zk if zk is not None else zk_client(cfg)
        self.redis = redis_client if redis_client is not None else connect_as(cfg, DAEMON)
        self.metrics = DaemonMetrics()
        self.notifier = Notifier()
        self.elections: dict[str, LeaderElection] = {}
        # Actions run here, off the cycle: one at a time per app (the in-progress guard), apps in parallel.
        self.actuation = ThreadPoolExecutor(max_workers=max(2, len(cfg.apps)), thread_name_prefix="sparkscale-act")
        self.scheduler = BackgroundScheduler(
            # A slow cycle never piles up: one run per app at a time, missed runs coalesce into one.
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None},
        )
        self.cluster = ClusterPlanner(cfg, on_plan=self.metrics.set_placement, redis_client=self.redis)
        self.autoscaler = self._wire()

    def _wire(self) -> Autoscaler:
        """The control loop's collaborators, each built once from the config and its clients."""
        cfg, prefix, root = self.cfg, self.cfg.redis.key_prefix, self.cfg.zookeeper.root
        store = live_store(self.redis, prefix, self.zk, root, cfg.action_log)
        # Every write to the action log in the order the daemon made it; a decision that starts
        # nothing written off its cycle, a failed write counted apart from the cycles, which ended
        # before it (decision_writer.py).
        action_log = OrderedActionLog(store.actions, on_failed=self.metrics.count_decision_write_failure)
        self.action_log = action_log
        blocklist = store.blocklist
        # One sink: the action log first (an outcome Redis refuses is neither counted nor logged).
        sink = FanOut((OutcomeFeed(action_log), MetricsFeed(self.metrics), LogFeed(),
                       StatusFeed(self.redis, prefix, self.identity)))
        clock = SystemClock()
        contexts = ActuationContexts(self.zk, self.redis, self.identity, self.config_path, self.overrides)
        stores = loop_stores(store, self.identity, self.zk, self.redis, prefix, action_log)
        executor = BackgroundExecutor(self.actuation, action_log, contexts, sink, clock)
        requests = RequestDesk(store.requests, store.journals, action_log, contexts, self.identity)
        # The collector reads Redis with the daemon's client: one connection pool, none opened per cycle.
        collector = functools.partial(collect_riding, client=self.redis)
        return Autoscaler(cfg, self.identity, collector=collector, planner=decide_app, cluster=self.cluster,
                          judge=OutcomeEvaluator(blocklist, sink), executor=executor, requests=requests, stores=stores,
                          elections=self.elections, clock=clock, sink=sink, wake=self._wake_app,
                          on_failed=lambda app: self.metrics.count_cycle(app, "failed"))

    # -- lifecycle --------------------------------------------------------------------------------

    def run(self) -> int:
        """Run until SIGTERM/SIGINT (or `max_cycles` cycles per app); SIGHUP reloads the config."""
        metrics_port = None
        if self.cfg.metrics.enabled:  # first: a port taken by another process ends the start, nothing begun
            try:
                metrics_port = self.metrics.serve(self.cfg.metrics.host, self.cfg.metrics.port)
            except OSError as exc:
                log.error("daemon.metrics_unavailable", host=self.cfg.metrics.host, port=self.cfg.metrics.port,
                          error=str(exc), remedy="set metrics.port (or metrics.enabled: false), or stop the "
                          "process listening there")
                raise DaemonStartError(f"cannot serve metrics on {self.cfg.metrics.host}:{self.cfg.metrics.port}: "
                                       f"{exc.strerror or exc}; set metrics.port or stop the process listening "
                                       "there") from None
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda signum, _frame: self.stop(f"signal {signal.Signals(signum).name}"))
        signal.signal(signal.SIGHUP, lambda _signum, _frame: self.request_reload())
        with contextlib.suppress(*NO_STDERR_FD):  # `kill -USR1` writes every thread's stack to stderr
            faulthandler.register(signal.SIGUSR1, all_threads=True)
        self.zk.add_listener(self._on_zk_state)
        self.zk.start_async()  # connects (and reconnects) in the background; until then: standby
        HOST.start()  # the host's figures are read off the cycles (monitors/host_sampler.py)
        self.action_log.start()  # decisions that start nothing are written off the cycles (decision_writer.py)
        PREFETCH.start()  # finished stages fetched off the cycles (monitors/stage_prefetch.py)
        prime_cluster_view(self.cfg)  # the first cycles go on without waiting on it (monitors/cluster_view.py)
        log.info("daemon.start", identity=self.identity, apps=[a.name for a in self.cfg.apps],
                 interval_s=self.cfg.loop.interval_s, policy=self.cfg.policy.name, dry_run=self.cfg.loop.dry_run,
                 master=self.cfg.spark.master_web_url, zookeeper=self.cfg.zookeeper.hosts,
                 metrics=f"http://{self.cfg.metrics.host}:{metrics_port}/metrics" if metrics_port else None)
        for app, offset_s in zip(self.cfg.apps, staggered_offsets_s(len(self.cfg.apps), self.cfg.loop.interval_s),
                                 strict=True):
            self._add_app(app, offset_s)
        if self.notifier.watchdog_interval_s:
            self.scheduler.add_job(self._watchdog, "interval", seconds=self.notifier.watchdog_interval_s,
                                   id="watchdog", next_run_time=_now())
        self.scheduler.start()
        self.notifier.ready(f"managing {len(self.cfg.apps)} apps")
        while not self._stop.is_set():
            # Never an unbounded wait: the kernel may hand SIGTERM to another thread, and Python runs
            # the handler only when the main thread next runs (a daemon once slept through its stop).
            if not self._wake.wait(MAIN_LOOP_TICK_S):
                continue
            self._wake.clear()
            if self._reload_requested.is_set():
                self._reload_requested.clear()
                self.reload()
            self._run_woken_apps()
        self.notifier.stopping()
        with contextlib.suppress(*NO_STDERR_FD):  # a slow stop names what it waits on
            faulthandler.dump_traceback_later(STOP_STACKS_AFTER_S)
        self.scheduler.shutdown(wait=True)
        self.actuation.shutdown(wait=True)  # an action under way is finished, not abandoned half-done
        self.action_log.close()  # the decisions still waiting are written (a bounded wait)
        for election in self.elections.values():
            election.release()
        self.zk.stop()
        self.zk.close()
        HOST.stop()
        PREFETCH.stop()
        self.metrics.close()
        faulthandler.cancel_dump_traceback_later()  # nothing to cancel when none was set
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
        """Re-read the config file; keep every app's state. An invalid file, or anything else that
        fails while reloading, changes nothing: the running config stays and the reason is logged."""
        self.notifier.reloading()
        try:
            new = load_config(self.config_path, self.overrides)
            kept = {name for name in RESTART_SECTIONS if getattr(new, name) != getattr(self.cfg, name)}
        except ConfigError as exc:
            self._reload_refused(str(exc))
            return
        except Exception as exc:  # an unreadable file, a bug: the daemon keeps running as it was
            self._reload_refused(repr(exc))
            return
        if kept:
            log.warning("config.reload_needs_restart", sections=sorted(kept), keeping="the running values")
            new = new.model_copy(update={name: getattr(self.cfg, name) for name in kept})
        old = self.cfg
        try:
            self._apply(new)
        except Exception as exc:  # back to the running config (an app added or removed meanwhile stays so)
            self.cfg = old
            self.cluster.configure(old)
            self.autoscaler.configure(old)
            self._reload_refused(repr(exc))
            return
        self.notifier.ready(f"managing {len(new.apps)} apps")

    def _reload_refused(self, reason: str) -> None:
        log.error("config.reload_refused", path=self.config_path, error=escaped(reason, 1000),
                  keeping="the running config")
        self.notifier.ready("config reload refused")

    def _apply(self, new: Config) -> None:
        """Run with the reloaded config `new`: apps added and removed, intervals changed."""
        old_apps = {a.name for a in self.cfg.apps}
        new_apps = {a.name for a in new.apps}
        interval_changed = new.loop.interval_s != self.cfg.loop.interval_s
        self.cfg = new
        self.cluster.configure(new)
        self.autoscaler.configure(new)
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

    def _add_app(self, app: AppConfig, offset_s: float = 0.0) -> None:
        """Manage `app`: its first cycle `offset_s` from now (staggered_offsets_s), then every interval."""
        self.autoscaler.add_app(app.name)
        self.elections[app.name] = LeaderElection(self.zk, self.cfg.zookeeper.root, app.name, self.identity)
        self.scheduler.add_job(self.cycle, "interval", args=[app.name], seconds=self.cfg.loop.interval_s,
                               id=f"cycle:{app.name}", next_run_time=_now() + timedelta(seconds=offset_s))

    def _remove_app(self, name: str) -> None:
        self.scheduler.remove_job(f"cycle:{name}")
        election = self.elections.pop(name, None)
        if election is not None:
            election.release()
        self.autoscaler.remove_app(name)
        self.metrics.forget_app(name)

    def _on_zk_state(self, state: str) -> None:
        if state == KazooState.LOST:
            self.autoscaler.session_lost()
        log.info("zookeeper.state", state=str(state))

    def _watchdog(self) -> None:
        """Ping systemd's watchdog only while no cycle is stuck (a hung loop gets restarted)."""
        limit_s = max(2 * self.cfg.actuator.ack_timeout_s + self.cfg.actuator.confirm_timeout_s,
                      8 * self.cfg.migration.phase_timeout_s,  # a migration: its follow-up is the cycle's (followup.py)
                      ) + 3 * self.cfg.loop.interval_s + 60
        stuck = self.autoscaler.stuck(limit_s)
        if stuck:
            log.error("daemon.stuck", apps=stuck, limit_s=limit_s, watchdog="not pinged")
            return
        self.notifier.watchdog()

    def cycle(self, app_name: str) -> None:
        """The app's scheduled job: one cycle; then, with `max_cycles`, stop once every app ran them."""
        if self.autoscaler.cycle(app_name) is None:  # not managed, or backing off: no cycle ran
            return
        if self.max_cycles is not None and self.autoscaler.cycled(self.max_cycles):
            self.stop(f"{self.max_cycles} cycles done")

    def _wake_app(self, app_name: str) -> None:
        """Ask for the app's cycle to run now. Called on cycle and kazoo threads, so it only hands the
        app to the main thread: APScheduler's shutdown holds its job-store lock while it waits for the
        running cycles, and a `modify_job` from one of them would wait on that lock for ever. That
        cycle reads the driver itself: a round the stage prefetcher kept may predate what woke it."""
        PREFETCH.outdate_rounds(app_name)
        with self._apps_to_wake_lock:
            self._apps_to_wake.add(app_name)
        self._wake.set()

    def _run_woken_apps(self) -> None:
        """On the main thread: bring the woken apps' next cycle forward to now."""
        with self._apps_to_wake_lock:
            woken, self._apps_to_wake = self._apps_to_wake, set()
        for app_name in sorted(woken):
            with contextlib.suppress(JobLookupError):  # the app was removed meanwhile: nothing to wake
                self.scheduler.modify_job(f"cycle:{app_name}", next_run_time=_now())


def _now() -> datetime:
    return datetime.now(UTC)


def staggered_offsets_s(apps: int, interval_s: float) -> list[float]:
    """Each app's first cycle, seconds from the start: spread evenly over one interval, so that the
    apps' cycles (and their reads of the drivers) take turns instead of all starting at once. With 10
    apps on 2 cores, cycles started together wait on each other's drivers and threads (issue 33,
    docs/results/daemon_cycle.md)."""
    return [i * interval_s / apps for i in range(apps)] if apps > 0 else []
