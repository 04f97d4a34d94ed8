"""The control agent: the daemon's hands inside a managed pipeline's driver.

The daemon cannot change a running Spark application from outside: executor counts, graceful
decommissioning, stopping a query at a batch boundary and migrating its state to another partition
count (stop, offline repartition, restart) are driver-side calls. The agent watches
the application's command znodes (docs/internals.md), carries each command out once, in order, and
acks it; it also publishes every query's progress to Redis, since Spark's REST API has none.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import redis
import structlog
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError
from kazoo.recipe.watchers import ChildrenWatch
from py4j.protocol import Py4JError
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery, StreamingQueryListener

from sparkscale.config import AppConfig, Config
from sparkscale.pipeline.submit import checkpoint_root
from sparkscale.pipeline.workloads import workload
from sparkscale.protocol.commands import Ack, Command, CommandFormatError, command_seq
from sparkscale.protocol.keys import partitions_key, paused_key, progress_key
from sparkscale.protocol.streams import stored_partitions
from sparkscale.protocol.znodes import acks_path, agent_epoch_path, agent_path, commands_path
from sparkscale.redisconn import connect

log = structlog.get_logger(__name__)

RECONCILE_INTERVAL_S = 1.0
STOP_QUERY_DEFAULT_TIMEOUT_S = 60.0
STOP_QUERY_POLL_S = 0.1
HISTORY_MAXLEN = 1000
SHUFFLE_PARTITIONS_CONF = "spark.sql.shuffle.partitions"
MAX_PARTITIONS = 4096  # as AppConfig.shuffle_partitions
# Spark's error condition when the checkpoint already has the requested state partitions.
ALREADY_PARTITIONED = "STATE_REPARTITION_INVALID_CHECKPOINT.SHUFFLE_PARTITIONS_ALREADY_MATCH"


class CommandRefused(Exception):
    """A command the agent will not or cannot carry out; the message becomes the ack's detail."""


@dataclass(frozen=True)
class ExecutorView:
    """One executor as the driver sees it. `active` is false once it is being decommissioned."""

    id: str
    host_port: str
    cores: int
    added_at_ms: int | None
    active: bool


# -- JVM side -------------------------------------------------------------------------------------


class SparkExecutors:
    """Executor control through py4j, on the driver's scheduler backend."""

    def __init__(self, spark: SparkSession):
        self._sc = spark.sparkContext
        self._jvm = spark._jvm  # type: ignore[attr-defined]
        self._jsc = self._sc._jsc.sc()  # type: ignore[union-attr]
        self.graceful = self._sc.getConf().get("spark.decommission.enabled", "false").lower() == "true"

    def _as_list(self, scala_seq: Any) -> list[Any]:
        # A Scala Seq is not iterable from py4j; a java.util.List view is (py4j wraps it as JavaList).
        return list(self._jvm.scala.jdk.javaapi.CollectionConverters.asJava(scala_seq))

    def list(self) -> list[ExecutorView]:
        """Registered executors, oldest first by add time (unknown add times count as newest)."""
        backend = self._jsc.schedulerBackend()
        ids = [str(i) for i in self._as_list(backend.getExecutorIds())]
        # The status store (what the REST API serves) knows when each executor was added; it is fed
        # by the listener bus, so a just-registered executor may be missing from it for a moment.
        summaries = {str(s.id()): s for s in self._as_list(self._jsc.statusStore().executorList(True))}
        views = []
        for executor_id in ids:
            summary = summaries.get(executor_id)
            views.append(
                ExecutorView(
                    id=executor_id,
                    host_port=str(summary.hostPort()) if summary is not None else "",
                    cores=int(summary.totalCores()) if summary is not None else 0,
                    added_at_ms=int(summary.addTime().getTime()) if summary is not None else None,
                    active=bool(backend.isExecutorActive(executor_id)),
                )
            )
        return sorted(views, key=_add_order)

    def request_total(self, total: int) -> bool:
        """Set the application's executor target (the standalone master's executor limit)."""
        empty_map = self._jvm.org.apache.spark.api.python.PythonUtils.toScalaMap(self._jvm.java.util.HashMap())
        return bool(self._jsc.requestTotalExecutors(int(total), 0, empty_map))

    def remove(self, executor_ids: list[str]) -> list[str]:
        """Decommission (graceful) or kill the executors; return those Spark accepted.

        The target is left alone (adjustTargetNumExecutors=false): the agent sets it explicitly,
        so there is one place where the count is decided.
        """
        backend = self._jsc.schedulerBackend()
        if not self.graceful:
            seq = self._jvm.org.apache.spark.api.python.PythonUtils.toSeq(list(executor_ids))
            # (ids, adjustTargetNumExecutors, countFailures, force)
            return [str(i) for i in self._as_list(backend.killExecutors(seq, False, False, True))]
        # SparkContext.killExecutors SIGTERMs the executor even with spark.decommission.enabled
        # (its running tasks fail and are retried); decommissionExecutor is the graceful path: the
        # executor takes no new task, finishes its running ones, then exits by itself.
        none = getattr(getattr(self._jvm.scala, "None$"), "MODULE$")
        info = self._jvm.org.apache.spark.scheduler.ExecutorDecommissionInfo("sparkscale: scale in", none)
        return [i for i in executor_ids if backend.decommissionExecutor(i, info, False, False)]


def _add_order(view: ExecutorView) -> tuple[float, int]:
    numeric_id = int(view.id) if view.id.isdigit() else -1
    return (float("inf") if view.added_at_ms is None else float(view.added_at_ms), numeric_id)


# -- progress to Redis ----------------------------------------------------------------------------


class ProgressPublisher(StreamingQueryListener):
    """Publishes each query progress event to `P{app}:progress:{query}` and its `:history` stream."""

    def __init__(self, client: redis.Redis, key_prefix: str, app: str):
        super().__init__()
        self._client = client
        self._prefix, self._app = key_prefix, app

    def onQueryStarted(self, event: Any) -> None:
        log.info("agent.query_started", query=event.name, query_id=str(event.id))

    def onQueryProgress(self, event: Any) -> None:
        try:
            fields = progress_fields(event.progress)
            key = progress_key(self._prefix, self._app, str(fields["query"]))
            pipe = self._client.pipeline(transaction=False)
            pipe.hset(key, mapping=fields)
            pipe.xadd(f"{key}:history", fields, maxlen=HISTORY_MAXLEN, approximate=True)
            pipe.execute()
        except Exception as exc:  # noqa: BLE001 - a listener that raises is dropped by Spark
            log.warning("agent.progress_publish_failed", error=str(exc))

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        log.info("agent.query_terminated", query_id=str(event.id), exception=event.exception)


def progress_fields(progress: Any) -> dict[str, str | int | float]:
    """Flat Redis fields from a StreamingQueryProgress; missing figures are left out."""
    state_ops = list(progress.stateOperators or [])
    fields: dict[str, Any] = {
        "query": progress.name or str(progress.id),
        "query_id": str(progress.id),
        "run_id": str(progress.runId),
        "batch_id": progress.batchId,
        "num_input_rows": progress.numInputRows,
        "input_rows_per_s": progress.inputRowsPerSecond,
        "processed_rows_per_s": progress.processedRowsPerSecond,
        "batch_duration_ms": (progress.durationMs or {}).get("triggerExecution"),
        "timestamp": progress.timestamp,
        "published_at": time.time(),
        "sources": json.dumps(
            [
                {
                    "description": s.description,
                    "start_offset": _offset(s.startOffset),
                    "end_offset": _offset(s.endOffset),
                    "latest_offset": _offset(s.latestOffset),
                    "num_input_rows": s.numInputRows,
                }
                for s in progress.sources or []
            ]
        ),
    }
    if state_ops:
        fields["state_rows_total"] = sum(int(op.numRowsTotal) for op in state_ops)
        fields["state_partitions"] = max(int(op.numShufflePartitions) for op in state_ops)
        fields["state_operators"] = json.dumps(
            [
                {
                    "operator": op.operatorName,
                    "rows_total": op.numRowsTotal,
                    "rows_updated": op.numRowsUpdated,
                    "memory_used_bytes": op.memoryUsedBytes,
                    "partitions": op.numShufflePartitions,
                    "state_store_instances": op.numStateStoreInstances,
                }
                for op in state_ops
            ]
        )
    return {k: v for k, v in fields.items() if v is not None}


def _offset(value: Any) -> Any:
    """Source offsets arrive as JSON text; store them as JSON values, not strings of JSON."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


# -- migrated partition counts --------------------------------------------------------------------




# -- the agent ------------------------------------------------------------------------------------


Handler = Callable[[Command], Any]
QueryStarter = Callable[[int], list[StreamingQuery]]


class ControlAgent:
    """Runs in a pipeline's driver: executes the daemon's commands and publishes query progress.

    Commands run on one worker thread, one at a time, in sequence order; the same thread keeps the
    executor count at the last target, because standalone mode has no scale-in of its own.

    For stateful migrations (stop, repartition the state, restart) the driver registers
    `query_starter` (builds the app's queries with n shuffle partitions); `held` names the queries
    stopped for a migration, which keep the driver alive while none of its queries runs.
    """

    def __init__(
        self,
        spark: SparkSession,
        cfg: Config,
        app: AppConfig,
        initial_executors: int | None = None,
        zk_client: KazooClient | None = None,
        redis_client: redis.Redis | None = None,
    ):
        self.spark = spark
        self.cfg = cfg
        self.app = app
        self.initial_executors = initial_executors
        root = cfg.zookeeper.root
        self._commands = commands_path(root, app.name)
        self._acks = acks_path(root, app.name)
        self._agent = agent_path(root, app.name)
        self._epoch_path = agent_epoch_path(root, app.name)
        self._pause_key = paused_key(cfg.redis.key_prefix, app.name)
        self._own_zk = zk_client is None
        self.zk = zk_client or KazooClient(hosts=cfg.zookeeper.hosts, timeout=cfg.zookeeper.session_timeout_s)
        self.redis = redis_client or connect(cfg.redis)
        self.executors = SparkExecutors(spark)
        self.highest_epoch = 0
        self.last_seq = -1
        self.target_executors: int | None = None
        self.checkpoint_root: Path = checkpoint_root(cfg, app)
        self.query_starter: QueryStarter | None = None
        self.held: set[str] = set()
        self._listener: ProgressPublisher | None = None
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._reregister = threading.Event()
        self._thread: threading.Thread | None = None
        self._handlers: dict[str, Handler] = {
            "set_executors": self._set_executors,
            "decommission": self._decommission,
            "pause_sources": self._pause_sources,
            "resume_sources": self._resume_sources,
            "stop_query": self._stop_query,
            "abort_query": self._abort_query,
            "repartition": self._repartition,
            "start_query": self._start_query,
            "report": self._report,
        }

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> None:
        """Connect, register, set the initial executor target, then start following commands."""
        if self._own_zk:
            self.zk.start(timeout=self.cfg.zookeeper.session_timeout_s)
        self.zk.ensure_path(self._commands)
        self.zk.ensure_path(self._acks)
        self.highest_epoch = self._load_epoch()
        self._register()
        self.zk.add_listener(self._on_zk_state)
        self._listener = ProgressPublisher(self.redis, self.cfg.redis.key_prefix, self.app.name)
        self.spark.streams.addListener(self._listener)
        if self.initial_executors is not None:
            # Standalone mode launches as many executors as spark.cores.max allows at first;
            # the target set here caps the master's launches and the worker thread trims the rest.
            self.target_executors = self.initial_executors
            self.executors.request_total(self.initial_executors)
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
            try:
                self.spark.streams.removeListener(self._listener)
            except Py4JError as exc:  # the session may already be stopped
                log.warning("agent.remove_listener_failed", error=str(exc))
            self._listener = None
        self.zk.remove_listener(self._on_zk_state)
        try:
            self.zk.delete(self._agent)
        except (NoNodeError, KazooException):
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
                "ui_url": sc.uiWebUrl,
                "pid": os.getpid(),
                "started_at": time.time(),
            }
        ).encode()
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

    def _load_epoch(self) -> int:
        try:
            data, _stat = self.zk.get(self._epoch_path)
            return int(data.decode() or 0)
        except NoNodeError:
            return 0

    def _store_epoch(self, epoch: int) -> None:
        try:
            self.zk.set(self._epoch_path, str(epoch).encode())
        except NoNodeError:
            self.zk.create(self._epoch_path, str(epoch).encode(), makepath=True)
        self.highest_epoch = epoch

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
            except KazooException as exc:
                # Connection loss: the same commands are looked at again on the next wake-up.
                log.warning("agent.zk_error", app=self.app.name, error=repr(exc))
            except Exception:  # noqa: BLE001 - keep following commands whatever one of them did
                log.exception("agent.worker_error", app=self.app.name)
            try:
                self._reconcile_executors()
            except Exception as exc:  # noqa: BLE001 - the worker must outlive a failed JVM call
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
            if self.zk.exists(f"{self._acks}/{name}") is not None:
                # Acked by an earlier agent (before a restart): never run a command twice.
                self.last_seq = seq
                continue
            try:
                data, _stat = self.zk.get(f"{self._commands}/{name}")
            except NoNodeError:
                continue  # withdrawn by the daemon before we got to it
            self._write_ack(name, self._execute(name, data))
            self.last_seq = seq

    def _execute(self, name: str, data: bytes) -> Ack:
        try:
            command = Command.from_znode(name, data)
        except CommandFormatError as exc:
            log.warning("agent.command_refused", app=self.app.name, command=name, reason=str(exc))
            return Ack(ok=False, detail=f"malformed command: {exc}", done_at=time.time())
        log.info(
            "agent.command_received", app=self.app.name, command=name, type=command.type,
            args=command.args, epoch=command.epoch,
        )
        if command.epoch < self.highest_epoch:
            reason = f"stale epoch {command.epoch} < {self.highest_epoch}"
            log.warning("agent.command_refused", app=self.app.name, command=name, reason=reason)
            return Ack(ok=False, detail=reason, done_at=time.time())
        handler = self._handlers.get(command.type)
        if handler is None:
            reason = f"unknown command type {command.type!r} (known: {', '.join(sorted(self._handlers))})"
            log.warning("agent.command_refused", app=self.app.name, command=name, reason=reason)
            return Ack(ok=False, detail=reason, done_at=time.time())
        if command.epoch > self.highest_epoch:
            # A new leader: from now on its predecessors are fenced off, also after our restart.
            self._store_epoch(command.epoch)
        started = time.monotonic()
        try:
            detail = handler(command)
        except CommandRefused as exc:
            log.warning("agent.command_refused", app=self.app.name, command=name, reason=str(exc))
            return Ack(ok=False, detail=str(exc), done_at=time.time())
        except Exception as exc:  # noqa: BLE001 - py4j/JVM/Redis failures all become a failed ack
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

    # -- executors --------------------------------------------------------------------------------

    def _reconcile_executors(self) -> None:
        """Trim executors beyond the target: the master only stops launching, it never removes."""
        if self.target_executors is None:
            return
        active = [e for e in self.executors.list() if e.active]
        surplus = len(active) - self.target_executors
        if surplus > 0:
            victims = [e.id for e in active[-surplus:]]
            removed = self.executors.remove(victims)
            log.info("agent.executors_trimmed", app=self.app.name, target=self.target_executors, removed=removed)

    def _set_executors(self, command: Command) -> dict[str, Any]:
        total = _int_arg(command.args, "total")
        if not self.app.min_executors <= total <= self.app.max_executors:
            raise CommandRefused(
                f"total {total} is outside [min_executors, max_executors] = "
                f"[{self.app.min_executors}, {self.app.max_executors}]"
            )
        self.target_executors = total
        if not self.executors.request_total(total):
            raise CommandRefused(f"Spark did not accept the executor target {total}")
        active = [e for e in self.executors.list() if e.active]
        removed = self.executors.remove([e.id for e in active[total:][::-1]]) if len(active) > total else []
        return {"target": total, "active_before": len(active), "removed": removed, "graceful": self.executors.graceful}

    def _decommission(self, command: Command) -> dict[str, Any]:
        active = [e for e in self.executors.list() if e.active]
        active_ids = [e.id for e in active]
        if "executor_ids" in command.args:
            ids = command.args["executor_ids"]
            if not isinstance(ids, list) or not ids:
                raise CommandRefused("executor_ids must be a non-empty list")
            ids = [str(i) for i in ids]
            unknown = [i for i in ids if i not in active_ids]
            if unknown:
                raise CommandRefused(f"no active executors with ids {unknown} (active: {active_ids})")
        elif "count" in command.args:
            count = _int_arg(command.args, "count")
            if count < 1:
                raise CommandRefused(f"count must be at least 1 (got {count})")
            # The most recently added go first: they hold the least cached state and shuffle output.
            ids = active_ids[::-1][:count]
        else:
            raise CommandRefused("decommission needs 'executor_ids' or 'count'")
        remaining = len(active) - len(ids)
        if remaining < self.app.min_executors:
            raise CommandRefused(
                f"decommissioning {len(ids)} of {len(active)} would leave {remaining}, "
                f"below min_executors {self.app.min_executors}"
            )
        # Lower the target first, or the master would launch a replacement when the executor exits.
        self.target_executors = remaining
        self.executors.request_total(remaining)
        removed = self.executors.remove(ids)
        if not removed:
            raise CommandRefused(f"Spark decommissioned none of {ids}")
        return {"removed": removed, "target": remaining, "graceful": self.executors.graceful}

    # -- sources and queries ----------------------------------------------------------------------

    def _paused(self) -> bool:
        return bool(self.redis.exists(self._pause_key))

    def _pause_sources(self, _command: Command) -> dict[str, Any]:
        was_paused = self._paused()
        self.redis.set(self._pause_key, str(time.time()))
        return {"paused": True, "was_paused": was_paused}

    def _resume_sources(self, _command: Command) -> dict[str, Any]:
        removed = self.redis.delete(self._pause_key)
        return {"paused": False, "was_paused": bool(removed)}

    def _find_query(self, name: str) -> StreamingQuery | None:
        for query in self.spark.streams.active:
            if query.name == name or str(query.id) == name:
                return query
        return None

    def _query_arg(self, command: Command) -> str:
        name = command.args.get("query")
        if not isinstance(name, str) or not name:
            raise CommandRefused(f"{command.type} needs 'query' (a query name or id)")
        return name

    def _not_active(self, name: str) -> CommandRefused:
        active = [q.name or str(q.id) for q in self.spark.streams.active]
        return CommandRefused(f"no active query {name!r} (active: {active}, held: {sorted(self.held)})")

    def _query_to_stop(self, name: str) -> StreamingQuery | None:
        """The active query `name`; None when it is already stopped and held (a stop re-sent after a
        daemon crash is answered, not refused); refused when it is neither."""
        query = self._find_query(name)
        if query is None and name not in self.held:
            raise self._not_active(name)
        return query

    def _stop_query(self, command: Command) -> dict[str, Any]:
        """Stop a query between two batches: sources paused, no batch running, nothing admitted.

        With `hold` the query is stopped for a migration: the driver keeps running without it, and
        a re-sent stop of the held query (after a daemon crash) is answered, not refused.
        """
        name = self._query_arg(command)
        timeout_s = _float_arg(command.args, "timeout_s", STOP_QUERY_DEFAULT_TIMEOUT_S)
        hold = _bool_arg(command.args, "hold", False)
        query = self._query_to_stop(name)
        if query is None:
            return {"query": name, "stopped": False, "already_stopped": True}
        notes = []
        if not self._paused():
            # Without the pause a source keeps admitting new offsets and the boundary never comes.
            self.redis.set(self._pause_key, str(time.time()))
            notes.append("sources were not paused: paused them first")
        held_as = query.name or name
        was_held = held_as in self.held
        if hold:
            self.held.add(held_as)  # before the stop: the driver must never see "nothing runs, nothing held"
        started = time.monotonic()
        try:
            while True:
                status = query.status
                if not query.isActive:
                    raise CommandRefused(f"query {name!r} terminated by itself: {query.exception()}")
                if not status["isTriggerActive"] and not status["isDataAvailable"]:
                    break
                if time.monotonic() - started > timeout_s:
                    raise CommandRefused(
                        f"query {name!r} did not reach a batch boundary within {timeout_s:g} s "
                        f"(status: {status['message']!r}); it is still running, sources stay paused"
                    )
                time.sleep(STOP_QUERY_POLL_S)
        except CommandRefused:
            if hold and not was_held:
                self.held.discard(held_as)
            raise
        last = query.lastProgress
        query.stop()
        return {
            "query": name,
            "stopped": True,
            "held": held_as in self.held,
            "last_batch_id": last["batchId"] if last else None,
            "waited_s": round(time.monotonic() - started, 3),
            "notes": notes,
        }

    def _abort_query(self, command: Command) -> dict[str, Any]:
        """Stop a query at once, mid-batch if need be (DSM): the running batch is abandoned and its
        input is read again after the restart. Sources are left as they are."""
        name = self._query_arg(command)
        hold = _bool_arg(command.args, "hold", True)
        query = self._query_to_stop(name)
        if query is None:
            return {"query": name, "stopped": False, "already_stopped": True}
        batch_was_running = bool(query.status["isTriggerActive"])
        last = query.lastProgress
        held_as = query.name or name
        if hold:
            self.held.add(held_as)
        started = time.monotonic()
        query.stop()
        return {
            "query": name,
            "stopped": True,
            "held": held_as in self.held,
            "last_batch_id": last["batchId"] if last else None,
            "batch_was_running": batch_was_running,
            "stop_s": round(time.monotonic() - started, 3),
        }

    def _repartition(self, command: Command) -> dict[str, Any]:
        """Rewrite a stopped query's checkpointed state into `partitions` state partitions (Spark's
        offline state repartition: a new batch that reads no input, picked up by the next start)."""
        name = self._query_arg(command)
        partitions = _int_arg(command.args, "partitions")
        if not 1 <= partitions <= MAX_PARTITIONS:
            raise CommandRefused(f"'partitions' must be in [1, {MAX_PARTITIONS}] (got {partitions})")
        enforce = _bool_arg(command.args, "enforce_exactly_once_sink", True)
        if self._find_query(name) is not None:
            raise CommandRefused(f"query {name!r} is active: stop it (stop_query or abort_query) before repartition")
        checkpoint = self.checkpoint_root / name
        if not (checkpoint / "offsets").is_dir():
            raise CommandRefused(f"no checkpoint of query {name!r} at {checkpoint}")
        key = partitions_key(self.cfg.redis.key_prefix, self.app.name, name)
        pending = _uncommitted_at(checkpoint, partitions)
        if pending:
            # Spark would write empty commits for the abandoned batches before noticing that the
            # count already matches: their input is then never read again and their state versions
            # are missing, so the restarted query fails (checked on 4.3.0). Without the call the
            # restart simply runs the abandoned batch again.
            self.redis.set(key, str(partitions))
            return {"query": name, "repartitioned": False, "already": partitions, "uncommitted_batches": pending}
        started = time.monotonic()
        try:
            self.spark._streamingCheckpointManager.repartition(str(checkpoint), partitions, enforce)
        except Exception as exc:  # noqa: BLE001 - only "already that many" is an answer; the rest propagate
            if not _is_already_partitioned(exc):
                raise
            self.redis.set(key, str(partitions))
            return {"query": name, "repartitioned": False, "already": partitions}
        duration_s = round(time.monotonic() - started, 3)
        self.redis.set(key, str(partitions))
        return {"query": name, "repartitioned": True, "partitions": partitions, "duration_s": duration_s}

    def _start_query(self, command: Command) -> dict[str, Any]:
        """(Re)start the app's query with `partitions` shuffle partitions; it picks up its checkpoint."""
        name = self._query_arg(command)
        if "partitions" in command.args:
            partitions = _int_arg(command.args, "partitions")
            if not 1 <= partitions <= MAX_PARTITIONS:
                raise CommandRefused(f"'partitions' must be in [1, {MAX_PARTITIONS}] (got {partitions})")
        else:
            # The last migration's count: the checkpoint has it, and the workload must agree.
            stored = stored_partitions(self.redis, self.cfg.redis.key_prefix, self.app.name, name)
            partitions = stored or self._session_partitions()
        if self._find_query(name) is not None:
            return {"query": name, "started": False, "already_running": True}
        if self.query_starter is None:
            raise CommandRefused("this agent has no query starter (it does not run in a sparkscale driver)")
        own = workload(self.app.pipeline).query
        if name != own:
            raise CommandRefused(f"{name!r} is not this app's query ({own!r}, pipeline {self.app.pipeline})")
        # Read by the planner for a query's first batch only (afterwards the checkpoint's count wins),
        # but also what the workload's explicit repartitions and the report use.
        self.spark.conf.set(SHUFFLE_PARTITIONS_CONF, str(partitions))
        started = self.query_starter(partitions)
        query = next((q for q in started if q.name == name), None)
        if query is None:
            raise CommandRefused(f"the starter started {[q.name for q in started]}, not {name!r}")
        self.held.discard(name)
        return {
            "query": name,
            "started": True,
            "id": str(query.id),
            "run_id": str(query.runId),
            "partitions": partitions,
            "paused": self._paused(),
        }

    def _session_partitions(self) -> int:
        return int(self.spark.conf.get(SHUFFLE_PARTITIONS_CONF) or self.app.shuffle_partitions)

    def _report(self, _command: Command) -> dict[str, Any]:
        queries = []
        for query in self.spark.streams.active:
            last = query.lastProgress
            queries.append(
                {
                    "id": str(query.id),
                    "name": query.name,
                    "status": query.status,
                    "partitions": _state_partitions(last) or self._session_partitions(),
                    "last_progress": None if not last else {
                        "batch_id": last["batchId"],
                        "num_input_rows": last["numInputRows"],
                        "input_rows_per_s": last.get("inputRowsPerSecond"),
                        "processed_rows_per_s": last.get("processedRowsPerSecond"),
                        "batch_duration_ms": (last.get("durationMs") or {}).get("triggerExecution"),
                        "timestamp": last["timestamp"],
                    },
                }
            )
        return {
            "app_id": self.spark.sparkContext.applicationId,
            "queries": queries,
            "executors": [asdict(e) for e in self.executors.list()],
            "target_executors": self.target_executors,
            "paused": self._paused(),
            "held": sorted(self.held),
            "epoch": self.highest_epoch,
        }


def _state_partitions(progress: dict[str, Any] | None) -> int | None:
    """State partitions of a query's first stateful operator, from a progress dict (None if stateless)."""
    operators = (progress or {}).get("stateOperators") or []
    if not operators or operators[0].get("numShufflePartitions") is None:
        return None
    return int(operators[0]["numShufflePartitions"])


def _is_already_partitioned(exc: BaseException) -> bool:
    """Spark's "already has the requested number of partitions". PySpark 4.3 does not convert this
    error: it arrives as a Py4JJavaError around a SparkThrowable, whose condition we read."""
    condition = None
    java_exception = getattr(exc, "java_exception", None)
    try:
        if java_exception is not None:
            condition = str(java_exception.getCondition())
    except Py4JError:
        pass
    return condition == ALREADY_PARTITIONED or ALREADY_PARTITIONED in str(exc)


def _log_batches(checkpoint: Path, log_dir: str) -> list[int]:
    directory = checkpoint / log_dir
    return sorted(int(f.name) for f in directory.iterdir() if f.name.isdigit()) if directory.is_dir() else []


def _batch_partitions(checkpoint: Path, batch_id: int) -> int | None:
    """The shuffle partitions a batch was planned with, from its offset log entry (line 2: metadata JSON)."""
    try:
        lines = (checkpoint / "offsets" / str(batch_id)).read_text().splitlines()
        return int(json.loads(lines[1])["conf"]["spark.sql.shuffle.partitions"])
    except (OSError, IndexError, KeyError, TypeError, ValueError):
        return None


def _uncommitted_at(checkpoint: Path, partitions: int) -> int:
    """Batches planned but not committed (an aborted run) when both the last committed batch and the
    last planned one already have `partitions`; 0 otherwise (then Spark's own checks apply)."""
    offsets, commits = _log_batches(checkpoint, "offsets"), _log_batches(checkpoint, "commits")
    if not offsets or not commits or offsets[-1] <= commits[-1]:
        return 0
    if any(_batch_partitions(checkpoint, batch) != partitions for batch in (commits[-1], offsets[-1])):
        return 0
    return offsets[-1] - commits[-1]


# -- argument checks ------------------------------------------------------------------------------


def _int_arg(args: dict[str, Any], key: str) -> int:
    value = args.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise CommandRefused(f"'{key}' must be an integer (got {value!r})")
    return value


def _bool_arg(args: dict[str, Any], key: str, default: bool) -> bool:
    value = args.get(key, default)
    if not isinstance(value, bool):
        raise CommandRefused(f"'{key}' must be true or false (got {value!r})")
    return value


def _float_arg(args: dict[str, Any], key: str, default: float) -> float:
    value = args.get(key, default)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
        raise CommandRefused(f"'{key}' must be a positive number (got {value!r})")
    return float(value)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""
