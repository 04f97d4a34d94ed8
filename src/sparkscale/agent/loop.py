"""The agent's command loop: following the app's command znodes, fencing, acks, executor target.

The daemon cannot change a running Spark application from outside, so it writes commands to ZooKeeper
(`protocol.commands`) and this loop, in the driver, carries each one out once, in sequence order, on
one worker thread, and acks it. A command runs only if it has not expired and comes from the live
holder of the app's leader lock (`admission.py`, read when the command is handled); the highest
verified epoch is kept in ZooKeeper, so older ones stay refused after an agent restart. The same
thread prunes old acks (`protocol.commands.prune_channel`) and keeps the executor count at the last
target, because standalone mode has no scale-in of its own. What the commands do to queries is
`queries.py`'s; to the executor target, `executor_target.py`'s; to executors, `executors.py`'s.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable

import redis
import structlog
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError
from kazoo.recipe.watchers import ChildrenWatch
from py4j.protocol import Py4JError
from pydantic import JsonValue
from pyspark.sql import SparkSession

from sparkscale import zkconn
from sparkscale.agent.admission import CommandGate
from sparkscale.agent.args import CommandRefused
from sparkscale.agent.executor_target import ExecutorTarget
from sparkscale.agent.executors import SparkExecutors
from sparkscale.agent.hooks import HOOKS, QueryHooks
from sparkscale.agent.progress import ProgressPublisher
from sparkscale.agent.queries import STOP_QUERY_DEFAULT_TIMEOUT_S, QueryControl
from sparkscale.config import AppConfig, Config
from sparkscale.config.identities import Role, identity_for
from sparkscale.config.secrets import role_credentials
from sparkscale.protocol.commands import Ack, Command, CommandFormatError, command_seq, prune_channel, trusted_ack
from sparkscale.protocol.keys import driver_key
from sparkscale.protocol.znodes import acks_path, agent_path, commands_path
from sparkscale.redisconn import connect

log = structlog.get_logger(__name__)

RECONCILE_INTERVAL_S = 1.0
PRUNE_INTERVAL_S = 30.0  # how often old acks and answered commands are pruned (protocol.commands)

Handler = Callable[[Command], JsonValue]  # the ack's detail


class ControlAgent:
    """Runs in a pipeline's driver: executes the daemon's commands and publishes query progress.

    Commands run on one worker thread, one at a time, in sequence order; the same thread keeps the
    executor count at the last target, because standalone mode has no scale-in of its own.

    For stateful migrations (stop, repartition the state, restart) `hooks` (agent.hooks, installed
    before the user's code ran) knows how each query was started; `held` names the queries stopped
    for a migration, which the user's waits and the driver wait through.
    """

    def __init__(
        self,
        spark: SparkSession,
        cfg: Config,
        app: AppConfig,
        initial_executors: int | None = None,
        zk_client: KazooClient | None = None,
        redis_client: redis.Redis | None = None,
        hooks: QueryHooks | None = None,
    ):
        self.spark = spark
        self.hooks = hooks or HOOKS
        self.cfg = cfg
        self.app = app
        self.initial_executors = initial_executors
        root = cfg.zookeeper.root
        self._commands = commands_path(root, app.name)
        self._acks = acks_path(root, app.name)
        self._agent = agent_path(root, app.name)
        self._own_zk = zk_client is None
        # With security.identity_dir, as the app's agent identity (config/identities.py; None: as before).
        self.identity = role_credentials(cfg, identity_for(Role.AGENT, app.name))
        self.zk = zk_client or zkconn.client(cfg.zookeeper, identity=self.identity)
        self.gate = CommandGate(self.zk, root, app.name)
        self.redis = redis_client or connect(cfg.redis, identity=self.identity)
        self.executors = SparkExecutors(spark)
        self.last_seq = -1
        self._pruned_at = 0.0
        self.target = ExecutorTarget(self.executors, app, self.redis, cfg.redis.key_prefix)
        self.queries = QueryControl(spark, cfg, app, self.redis, self.hooks)
        self._listener: ProgressPublisher | None = None
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._reregister = threading.Event()
        self._thread: threading.Thread | None = None
        self._handlers: dict[str, Handler] = {
            "set_executors": self.target.set_executors,
            "decommission": self.target.decommission,
            "pause_sources": self.queries.pause_sources,
            "resume_sources": self.queries.resume_sources,
            "stop_query": self.queries.stop_query,
            "abort_query": self.queries.abort_query,
            "repartition": self.queries.repartition,
            "start_query": self.queries.start_query,
            "report": self._report,
        }

    # -- what the driver sees of the queries ------------------------------------------------------

    @property
    def held(self) -> set[str]:
        return self.hooks.held

    @property
    def target_executors(self) -> int | None:
        """The executor target the agent holds (None: none set)."""
        return self.target.total

    @property
    def highest_epoch(self) -> int:
        """The highest leader epoch verified against the live lock (kept in ZooKeeper)."""
        return self.gate.highest_epoch

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> None:
        """Connect, register, set the initial executor target, then start following commands."""
        if self._own_zk:
            self.zk.start(timeout=self.cfg.zookeeper.session_timeout_s)
        if self.identity is not None:
            # What the agent creates (acks, its znodes): its own, readable by the daemon and the operator.
            zkconn.adopt_agent_acl(self.zk, self.cfg.zookeeper.root, self.app.name, self.identity)
        self.zk.ensure_path(self._commands)
        self.zk.ensure_path(self._acks)
        self.gate.load()
        self._register()
        self.zk.add_listener(self._on_zk_state)
        self._listener = ProgressPublisher(self.redis, self.cfg.redis.key_prefix, self.app.name,
                                           spark=self.spark, hooks=self.hooks)
        self.spark.streams.addListener(self._listener)
        if self.initial_executors is not None:
            # The agent owns the target: Spark's allocation manager (on for a managed app's start
            # only) must not move it. Without that manager, standalone mode launches as many
            # executors as spark.cores.max allows at first; the target set here caps the master's
            # launches and the worker thread trims the rest.
            if self.executors.stop_allocation_manager():
                log.info("agent.allocation_manager_stopped", app=self.app.name)
            self.target.set(self.initial_executors)
            self.executors.request_total(self.initial_executors)
        else:
            self.target.set(None)
        self._thread = threading.Thread(target=self._run, name=f"sparkscale-agent-{self.app.name}", daemon=True)
        self._thread.start()
        ChildrenWatch(self.zk, self._commands, self._on_commands)
        log.info(
            "agent.started", app=self.app.name, app_id=self.spark.sparkContext.applicationId,
            epoch=self.highest_epoch, initial_executors=self.initial_executors,
        )

    def stop(self) -> None:
        """Stop following commands and unregister; the pipeline's queries keep running. Idempotent."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=STOP_QUERY_DEFAULT_TIMEOUT_S)
        if self._listener is not None:
            if self._listener._on_recorded in self.hooks.on_record:
                self.hooks.on_record.remove(self._listener._on_recorded)
            try:
                self.spark.streams.removeListener(self._listener)
            except Py4JError as exc:  # the session may already be stopped
                log.warning("agent.remove_listener_failed", error=str(exc))
            self._listener = None
        self.zk.remove_listener(self._on_zk_state)
        with contextlib.suppress(NoNodeError, KazooException):
            self.zk.delete(self._agent)
        try:
            # Only our own registration: a driver submitted after us may already have replaced it.
            key = driver_key(self.cfg.redis.key_prefix, self.app.name)
            raw = self.redis.get(key)
            if raw and json.loads(raw).get("app_id") == self.spark.sparkContext.applicationId:
                self.redis.delete(key)
        except (redis.RedisError, ValueError, Py4JError):
            pass
        if self._own_zk:
            self.zk.stop()
            self.zk.close()
        log.info("agent.stopped", app=self.app.name, last_seq=self.last_seq)

    # -- ZooKeeper plumbing -----------------------------------------------------------------------

    def _register(self) -> None:
        """Create the ephemeral agent znode; wait out one left by a dead session of an earlier agent."""
        sc = self.spark.sparkContext
        data = json.dumps(
            {
                "app": self.app.name,
                "app_id": sc.applicationId,
                "driver_host": sc.getConf().get("spark.driver.host", ""),
                "ui_url": sc.uiWebUrl,  # the driver's REST API: the daemon reads it from here
                "pid": os.getpid(),
                "started_at": time.time(),
            }
        ).encode()
        # Also in Redis, where the monitor already reads every cycle (no ZooKeeper round per cycle).
        self.redis.set(driver_key(self.cfg.redis.key_prefix, self.app.name), data)
        deadline = time.monotonic() + self.cfg.zookeeper.session_timeout_s * 2
        while True:
            try:
                self.zk.create(self._agent, data, ephemeral=True, makepath=True)
                return
            except NodeExistsError:
                stat = self.zk.exists(self._agent)
                if stat is not None and stat.ephemeralOwner == self.zk.client_id[0]:
                    self.zk.set(self._agent, data)
                    return
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"another control agent holds {self._agent}; is the pipeline {self.app.name!r} running twice?"
                    ) from None
                time.sleep(0.5)

    def _on_zk_state(self, state: str) -> None:
        # Called on kazoo's event thread, where no ZooKeeper call may block: hand over to the worker.
        if state == KazooState.LOST:
            log.warning("agent.zk_session_lost", app=self.app.name)
            self._reregister.set()
        self._wake.set()

    def _on_commands(self, _children: list[str]) -> bool:
        self._wake.set()
        return not self._stopping.is_set()  # False ends the watch

    # -- worker -----------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._wake.wait(RECONCILE_INTERVAL_S)
            self._wake.clear()
            if self._stopping.is_set():
                break
            try:
                if self._reregister.is_set() and self.zk.connected:
                    self._register()
                    self._reregister.clear()
                self._process_pending()
                if time.monotonic() - self._pruned_at > PRUNE_INTERVAL_S:
                    self._pruned_at = time.monotonic()
                    prune_channel(self.zk, self.cfg.zookeeper.root, self.app.name, self.last_seq)
            except KazooException as exc:
                # Connection loss: the same commands are looked at again on the next wake-up.
                log.warning("agent.zk_error", app=self.app.name, error=repr(exc))
            except Exception:  # keep following commands whatever one of them did
                log.exception("agent.worker_error", app=self.app.name)
            try:
                self.target.reconcile()
            except Exception as exc:  # the worker must outlive a failed JVM call
                log.warning("agent.reconcile_failed", app=self.app.name, error=_first_line(exc))

    def _process_pending(self) -> None:
        names = []
        for name in self.zk.get_children(self._commands):
            try:
                names.append((command_seq(name), name))
            except CommandFormatError:
                log.warning("agent.foreign_znode", app=self.app.name, znode=name)
        for seq, name in sorted(names):
            if seq <= self.last_seq or self._stopping.is_set():
                continue
            ack = f"{self._acks}/{name}"
            if self.zk.exists(ack) is not None:
                if trusted_ack(self.zk, self.app.name, ack):
                    # Acked by an earlier agent (before a restart): never run a command twice.
                    self.last_seq = seq
                    continue
                self.zk.delete(ack)  # pre-created by someone else: it must not make us skip the command
            try:
                data, stat = self.zk.get(f"{self._commands}/{name}")
            except NoNodeError:
                continue  # withdrawn by the daemon before we got to it
            self._write_ack(name, self._execute(name, data, stat.ephemeralOwner))
            self.last_seq = seq

    def _execute(self, name: str, data: bytes, sender: int) -> Ack:
        """Run one command written by ZooKeeper session `sender`, or say why not."""
        try:
            command = Command.from_znode(name, data)
        except CommandFormatError as exc:
            log.warning("agent.command_refused", app=self.app.name, command=name, reason=str(exc))
            return Ack(ok=False, detail=f"malformed command: {exc}", done_at=time.time())
        log.info(
            "agent.command_received", app=self.app.name, command=name, type=command.type,
            args=command.args, epoch=command.epoch,
        )
        expired = self.gate.expired(command, time.time())
        if expired is not None:
            # Its sender gave up on it long ago (e.g. sent while this agent was down): never run it late.
            log.warning("agent.command_expired", app=self.app.name, command=name, type=command.type,
                        issued_at=command.issued_at, expires_at=command.deadline, reason=expired)
            return Ack(ok=False, detail=expired, done_at=time.time())
        fenced = self.gate.fenced(command, sender)
        if fenced is not None:
            log.warning("agent.command_refused", app=self.app.name, command=name, reason=fenced,
                        epoch=command.epoch, highest_epoch=self.highest_epoch)
            return Ack(ok=False, detail=fenced, done_at=time.time())
        handler = self._handlers.get(command.type)
        if handler is None:
            reason = f"unknown command type {command.type!r} (known: {', '.join(sorted(self._handlers))})"
            log.warning("agent.command_refused", app=self.app.name, command=name, reason=reason)
            return Ack(ok=False, detail=reason, done_at=time.time())
        started = time.monotonic()
        try:
            detail = handler(command)
        except CommandRefused as exc:
            log.warning("agent.command_refused", app=self.app.name, command=name, reason=str(exc))
            return Ack(ok=False, detail=str(exc), done_at=time.time())
        except Exception as exc:  # py4j/JVM/Redis failures all become a failed ack
            log.exception("agent.command_failed", app=self.app.name, command=name, type=command.type)
            return Ack(ok=False, detail=f"{type(exc).__name__}: {_first_line(exc)}", done_at=time.time())
        log.info(
            "agent.command_executed", app=self.app.name, command=name, type=command.type,
            duration_s=round(time.monotonic() - started, 3), detail=detail,
        )
        return Ack(ok=True, detail=detail, done_at=time.time())

    def _write_ack(self, name: str, ack: Ack) -> None:
        try:
            self.zk.create(f"{self._acks}/{name}", ack.to_json(), makepath=True)
        except NodeExistsError:
            log.warning("agent.ack_exists", app=self.app.name, command=name)
            return
        log.info("agent.command_acked", app=self.app.name, command=name, ok=ack.ok)

    def _report(self, _command: Command) -> dict[str, JsonValue]:
        return self.queries.report(self.executors, self.target.total, self.highest_epoch)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""
