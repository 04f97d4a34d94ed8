"""The faults `sparkscale bench chaos` injects: one small function each, in a registry (name -> Fault).

Each `inject(ctx)` damages the running app, its environment or its daemon once and returns the
moment of the fault (epoch seconds: the kill, the stop of a service), from which the recovery is
timed; it says what it did in `ctx.notes`. A fault only injects. The recovery is the system's own:
the master relaunching executors, the supervisor restarting the driver, a standby daemon finishing
the journaled migration, the daemon re-acquiring its lock. The one exception is a restart fault,
which starts its service again at once, as an operator or systemd would. The embedded environment
does not restart a killed worker: the app recovers on the remaining one (`worker_kill`'s note).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import psutil
import structlog

from sparkscale.apps.driver_record import current_driver
from sparkscale.config import Config
from sparkscale.localenv import LocalEnvironment
from sparkscale.monitors.host import executor_processes
from sparkscale.monitors.spark_rest import driver_rest
from sparkscale.processes import stop_trees
from sparkscale_lab.bench.chaos_report import event_time
from sparkscale_lab.bench.daemon_process import DaemonProcess
from sparkscale_lab.pipelines.workloads import workload

log = structlog.get_logger(__name__)

HOLD_TIMEOUT_S = 240.0  # from the migration request until the leader holds at the phase


class FaultError(Exception):
    """The fault could not be injected (nothing to kill, a migration that never started)."""


@dataclass
class FaultContext:
    """What a fault acts on: the app's config and name, its daemons (the leader first) and the run's
    fault settings; `notes` collects what the fault did."""

    cfg: Config
    app: str
    daemons: list[DaemonProcess]
    hold_phase: str = "repartitioned"  # daemon_kill: the CCR phase after whose step the leader is held
    migrate_to: int = 8  # daemon_kill: the migration's state partitions
    notes: list[str] = field(default_factory=list)

    @property
    def leader(self) -> DaemonProcess:
        return self.daemons[0]

    def note(self, text: str) -> None:
        self.notes.append(text)
        log.info("chaos.fault_note", app=self.app, note=text)


@dataclass(frozen=True)
class Fault:
    """A named fault. `holds_migration`: its leading daemon runs with the migration hold (the
    daemon_kill fault); `standby`: a second daemon runs in standby; `settled(ctx, at)`: the daemon's
    side of the story has ended (the watch goes on until it has, or the timeout); `loses_executors`:
    executors die while the driver lives, so their state is reloaded elsewhere (runs each variant)."""

    name: str
    what: str  # how it is injected, one line for results.md
    inject: Callable[[FaultContext], float]
    holds_migration: bool = False
    standby: bool = False
    settled: Callable[[FaultContext, float], bool] | None = None
    loses_executors: bool = False


FAULTS: dict[str, Fault] = {}


def register_fault(fault: Fault) -> Fault:
    FAULTS[fault.name] = fault
    return fault


def get_fault(name: str) -> Fault:
    try:
        return FAULTS[name]
    except KeyError:
        raise KeyError(f"unknown fault {name!r} (expected one of {', '.join(FAULTS)})") from None


# -- processes --------------------------------------------------------------------------------------


def _app_executors(ctx: FaultContext) -> list[psutil.Process]:
    """The app's executor JVMs on this host (its REST API names the app id they carry), by pid."""
    rest = driver_rest(ctx.cfg, ctx.cfg.app(ctx.app), timeout_s=5)
    app_id = rest.application(ctx.app).id
    procs = sorted(executor_processes(app_id), key=lambda p: p.pid)
    if not procs:
        raise FaultError(f"no executor process of {ctx.app} ({app_id}) on this host")
    return procs


def _arg(proc: psutil.Process, flag: str) -> str | None:
    """The value after `flag` on a process's command line (an executor's --executor-id)."""
    try:
        cmdline = proc.cmdline()
    except psutil.Error:
        return None
    return cmdline[cmdline.index(flag) + 1] if flag in cmdline[:-1] else None


def _service(cfg: Config, name: str) -> psutil.Process:
    """A service of the embedded environment, as `cluster up` recorded it (pid and start time)."""
    for status in LocalEnvironment(cfg).status():
        if status.name == name and status.running and status.pid is not None:
            return psutil.Process(status.pid)
    raise FaultError(f"{name} is not running")


def _ancestors(proc: psutil.Process) -> set[int]:
    try:
        return {p.pid for p in proc.parents()}
    except psutil.Error:
        return set()


def _kill_all(procs: list[psutil.Process]) -> None:
    for p in procs:
        with contextlib.suppress(psutil.Error):  # already gone with its parent
            p.kill()
    psutil.wait_procs(procs, timeout=10)


# -- the faults -------------------------------------------------------------------------------------


def executor_kill(ctx: FaultContext) -> float:
    procs = _app_executors(ctx)
    victim = procs[0]
    executor_id = _arg(victim, "--executor-id")
    at = time.time()
    _kill_all([victim])
    ctx.note(f"SIGKILL of executor {executor_id} (pid {victim.pid}); {len(procs) - 1} other executor(s) kept "
             "running; the driver asks the master for a replacement")
    return at


def worker_kill(ctx: FaultContext) -> float:
    executors = _app_executors(ctx)
    hosting = []
    for status in LocalEnvironment(ctx.cfg).status():
        if status.name.startswith("spark-worker") and status.running and status.pid is not None:
            mine = [e for e in executors if status.pid in _ancestors(e)]
            hosting.append((len(mine), status.name, psutil.Process(status.pid)))
    if not hosting or max(hosting, key=lambda h: h[0])[0] == 0:
        raise FaultError(f"no worker of this environment runs an executor of {ctx.app}")
    count, name, worker = max(hosting, key=lambda h: h[0])
    try:
        family = [worker, *worker.children(recursive=True)]
    except psutil.Error:
        family = [worker]
    at = time.time()
    _kill_all(family)
    ctx.note(f"SIGKILL of {name} (pid {worker.pid}) with its {len(family) - 1} child process(es), {count} of "
             f"them executor(s) of the app; the embedded environment does not restart a worker, so the app "
             "recovers on the remaining worker(s), where the master launches the replacements")
    return at


def driver_kill(ctx: FaultContext) -> float:
    driver = current_driver(ctx.cfg, ctx.app)
    if driver is None:
        raise FaultError(f"{ctx.app} has no running driver")
    at = time.time()
    os.kill(driver.pid, signal.SIGKILL)
    ctx.note(f"SIGKILL of the driver (pid {driver.pid}); its supervisor restarts it from the checkpoints after "
             f"drivers.restart_delay_s ({ctx.cfg.drivers.restart_delay_s:g} s)")
    return at


def daemon_kill(ctx: FaultContext) -> float:
    """A CCR migration requested from the leader, which holds right after its `hold_phase` step (the
    step done, not yet journaled: SPARKSCALE_MIGRATION_HOLD), then SIGKILL; the standby takes over."""
    from sparkscale import zkconn
    from sparkscale.config.identities import OPERATOR
    from sparkscale.daemon import manual
    from sparkscale.model.manual_request import RequestType
    from sparkscale.store.zk_requests import ZkRequests

    leader = ctx.leader
    query = workload(ctx.cfg.app(ctx.app).pipeline).query
    zk = zkconn.client_as(ctx.cfg, OPERATOR)
    zk.start(timeout=15)
    try:
        manual.submit_request(ZkRequests(zk, ctx.cfg.zookeeper.root), ctx.app, ctx.migrate_to, "bench chaos",
                              HOLD_TIMEOUT_S, type=RequestType.MIGRATE, query=query, strategy="ccr")
    finally:
        zk.stop()
        zk.close()
    requested = time.time()
    deadline = time.monotonic() + HOLD_TIMEOUT_S
    while not leader.events("migration.fault_hold"):
        if leader.proc.poll() is not None or time.monotonic() > deadline:
            raise FaultError(f"the leader's migration did not reach {ctx.hold_phase} "
                             f"(daemon {'exited' if leader.proc.poll() is not None else 'still running'})")
        time.sleep(0.2)  # polling the leader's log for the hold
    at = time.time()
    leader.proc.kill()
    leader.proc.wait()
    ctx.note(f"CCR migration of {query} to {ctx.migrate_to} state partitions requested from the leader "
             f"{leader.name}; it was held right after its `{ctx.hold_phase}` step (before the journal recorded "
             f"it) {at - requested:.1f} s after the request and SIGKILLed; standby {ctx.daemons[1].name} takes over "
             "when the killed daemon's ZooKeeper session ends")
    return at


def _restart_service(ctx: FaultContext, name: str, why: str) -> float:
    proc = _service(ctx.cfg, name)
    at = time.time()
    stop_trees([proc])  # SIGTERM: Redis writes its append-only file, ZooKeeper its log, before exiting
    stopped_s = time.time() - at
    LocalEnvironment(ctx.cfg).up(only=(name,))
    ctx.note(f"{name} stopped (SIGTERM, pid {proc.pid}, {stopped_s:.1f} s) and started again (`cluster up`), "
             f"answering {time.time() - at:.1f} s after the stop began; {why}")
    return at


def redis_restart(ctx: FaultContext) -> float:
    return _restart_service(ctx, "redis", "appendonly yes, appendfsync everysec: what was written survives")


def zookeeper_restart(ctx: FaultContext) -> float:
    return _restart_service(ctx, "zookeeper", "its data dir keeps the znodes (leader lock, journal, commands)")


def zookeeper_expiry(ctx: FaultContext) -> float:
    """SIGSTOP the leading daemon for longer than its session timeout, then SIGCONT: the server
    expires the session (no heartbeats), as it would for a daemon paused by a long GC or a VM stall."""
    leader = ctx.leader
    timeout_s = ctx.cfg.zookeeper.session_timeout_s
    stop_s = 2 * timeout_s + 4
    at = time.time()
    os.kill(leader.proc.pid, signal.SIGSTOP)
    try:
        time.sleep(stop_s)  # the fault itself: longer than the session timeout
    finally:
        os.kill(leader.proc.pid, signal.SIGCONT)
    ctx.note(f"SIGSTOP of the leading daemon {leader.name} for {stop_s:g} s (zookeeper.session_timeout_s "
             f"{timeout_s:g}), then SIGCONT: its ZooKeeper session expired on the server")
    return at


def _logged_after(daemons: list[DaemonProcess], events: tuple[str, ...], at: float) -> bool:
    for daemon in daemons:
        for name in events:
            if any((t := event_time(e)) is not None and t > at for e in daemon.events(name)):
                return True
    return False


def _lead_again(ctx: FaultContext, at: float) -> bool:
    """The leader (the only daemon) has taken the lock again after the fault."""
    return _logged_after([ctx.leader], ("leader.acquired",), at)


def _migration_finished(ctx: FaultContext, at: float) -> bool:
    """The standby has resumed the journaled migration and ended it (done or rolled back)."""
    return _logged_after(ctx.daemons[1:], ("migration.resumed",), at)


for _fault in (
    Fault("executor_kill", "SIGKILL of one executor JVM of the app", executor_kill, loses_executors=True),
    Fault("worker_kill", "SIGKILL of the standalone worker running the app's executors, with them", worker_kill,
          loses_executors=True),
    Fault("driver_kill", "SIGKILL of the driver; its supervisor restarts it from the checkpoints", driver_kill),
    Fault("daemon_kill", "SIGKILL of the leading daemon mid-migration (CCR); a standby daemon takes over",
          daemon_kill, holds_migration=True, standby=True, settled=_migration_finished),
    Fault("redis_restart", "Redis stopped (SIGTERM) and started again", redis_restart),
    Fault("zookeeper_restart", "ZooKeeper stopped (SIGTERM) and started again", zookeeper_restart),
    Fault("zookeeper_expiry", "the leading daemon's ZooKeeper session expired (SIGSTOP past the timeout, SIGCONT)",
          zookeeper_expiry, settled=_lead_again),
):
    register_fault(_fault)
del _fault

FAULT_NAMES: tuple[str, ...] = tuple(FAULTS)
