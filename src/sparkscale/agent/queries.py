"""The app's streaming queries and sources, as the agent's commands steer them.

Pausing the sources, stopping a query at a batch boundary or at once (abort), rewriting a stopped
query's state partitions and starting it again with N shuffle partitions are the driver-side steps
of a stateful migration; `held` names the queries stopped for one, which keep the driver alive while
none of its queries runs. `report` is the driver's whole view, for the daemon and the operator.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import redis
import structlog
from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from sparkscale.agent.args import CommandRefused, bool_arg, float_arg, int_arg
from sparkscale.agent.checkpoint import (
    InterruptedOutput,
    _state_partitions,
    fill_file_sink_log,
    last_committed_batch,
    pending_batches,
    repair_first_batch,
    repartition_state,
    uncommitted_at,
    uncommitted_batches,
)
from sparkscale.agent.executors import SparkExecutors
from sparkscale.agent.hooks import QueryHooks
from sparkscale.agent.sources import source_kind
from sparkscale.config import AppConfig, Config
from sparkscale.protocol.commands import Command
from sparkscale.protocol.keys import partitions_key, paused_key
from sparkscale.protocol.streams import stored_partitions
from sparkscale.store.redis_queries import read_queries

log = structlog.get_logger(__name__)

STOP_QUERY_DEFAULT_TIMEOUT_S = 60.0
IDLE_TRIGGER_WAIT_S = 10.0  # how long a query whose sources cannot pause is watched for an idle trigger
STOP_QUERY_POLL_S = 0.1
SHUFFLE_PARTITIONS_CONF = "spark.sql.shuffle.partitions"
MAX_PARTITIONS = 4096  # as AppConfig.shuffle_partitions

class QueryControl:
    """The command handlers for the app's sources and queries (run on the agent's worker thread).

    `hooks` knows how each query was started (the user's writer), so `start_query` starts it again
    exactly so; a query started before the agent was installed can be stopped but not restarted.
    """

    def __init__(self, spark: SparkSession, cfg: Config, app: AppConfig, redis_client: redis.Redis,
                 hooks: QueryHooks):
        self.spark = spark
        self.cfg = cfg
        self.app = app
        self.redis = redis_client
        self.hooks = hooks
        self.pause_key = paused_key(cfg.redis.key_prefix, app.name)
        self.checkpoints: dict[str, str] = {}  # query -> checkpoint root, seen while it ran
        self.sinks: dict[str, str] = {}  # query -> its sink's description, seen while it ran

    @property
    def held(self) -> set[str]:
        return self.hooks.held

    # -- sources ----------------------------------------------------------------------------------

    def paused(self) -> bool:
        return bool(self.redis.exists(self.pause_key))

    def pause_sources(self, _command: Command) -> dict[str, Any]:
        was_paused = self.paused()
        self.redis.set(self.pause_key, str(time.time()))
        return {"paused": True, "was_paused": was_paused}

    def resume_sources(self, _command: Command) -> dict[str, Any]:
        removed = self.redis.delete(self.pause_key)
        return {"paused": False, "was_paused": bool(removed)}

    # -- finding queries --------------------------------------------------------------------------

    def find_query(self, name: str) -> StreamingQuery | None:
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
        query = self.find_query(name)
        if query is None and name not in self.held:
            raise self._not_active(name)
        return query

    # -- commands ---------------------------------------------------------------------------------

    def checkpoint_of(self, name: str, query: StreamingQuery | None = None) -> Path | None:
        """The query's own checkpoint root (the user's checkpointLocation or the session default)."""
        if query is not None:
            last = query.lastProgress
            if last and last.get("sink"):
                self.sinks[name] = str(last["sink"].get("description", ""))
            with contextlib.suppress(Exception):  # another wrapper (Spark Connect): fall back to what was published
                self.checkpoints[name] = str(query._jsq.streamingQuery().resolvedCheckpointRoot())
        if name not in self.checkpoints:
            info = read_queries(self.redis, self.cfg.redis.key_prefix, self.app.name).get(name)
            if info is not None and info.checkpoint:
                self.checkpoints[name] = info.checkpoint
        root = self.checkpoints.get(name)
        return None if root is None else Path(urlparse(root).path)

    def pausable(self, query: StreamingQuery) -> bool:
        """Every source of the query honours the app's pause key (the Redis streams source)."""
        last: dict[str, Any] = query.lastProgress or {}
        sources = last.get("sources") or []
        return bool(sources) and all(
            source_kind(str(src.get("description", "")), src.get("endOffset")) == "redis_streams" for src in sources)

    def stop_query(self, command: Command) -> dict[str, Any]:
        """Stop a query between two batches.

        A pausable query (its sources honour the pause key) is paused first and stopped once no batch
        runs and nothing is admitted. Any other query is stopped as soon as its trigger is idle (no
        batch running: between two processing-time triggers); if none comes within `idle_wait_s` it
        is stopped anyway, and the answer says the stop landed inside a batch (`inside_batch`), which
        the repartition sets aside and the restart recomputes (DSM). With `hold` the query is stopped
        for a migration: the driver and the user's waits keep going without it, and a re-sent stop
        is answered, not refused.
        """
        name = self._query_arg(command)
        timeout_s = float_arg(command.args, "timeout_s", STOP_QUERY_DEFAULT_TIMEOUT_S)
        idle_wait_s = float_arg(command.args, "idle_wait_s", IDLE_TRIGGER_WAIT_S)
        hold = bool_arg(command.args, "hold", False)
        query = self._query_to_stop(name)
        if query is None:
            return {"query": name, "stopped": False, "already_stopped": True}
        held_as = query.name or name
        checkpoint = self.checkpoint_of(held_as, query)
        self._refuse_before_first_commit(name, checkpoint)
        pausable = self.pausable(query)
        notes = []
        if pausable and not self.paused():
            # Without the pause a source keeps admitting new offsets and the boundary never comes.
            self.redis.set(self.pause_key, str(time.time()))
            notes.append("sources were not paused: paused them first")
        was_held = held_as in self.held
        if hold:
            self.hooks.hold(held_as)  # before the stop: the driver must never see "nothing runs, nothing held"
        started = time.monotonic()
        at_boundary = True
        try:
            while True:
                status = query.status
                if not query.isActive:
                    raise CommandRefused(f"query {name!r} terminated by itself: {query.exception()}")
                if not status["isTriggerActive"] and (not pausable or not status["isDataAvailable"]):
                    break
                waited_s = time.monotonic() - started
                if pausable and waited_s > timeout_s:
                    raise CommandRefused(
                        f"query {name!r} did not reach a batch boundary within {timeout_s:g} s "
                        f"(status: {status['message']!r}); it is still running, sources stay paused")
                if not pausable and waited_s > min(idle_wait_s, timeout_s):
                    # A query that falls behind starts its next batch as the last one ends: no idle
                    # trigger comes. Stopped in its batch, which the restart recomputes (DSM).
                    at_boundary = False
                    notes.append(f"no idle trigger within {min(idle_wait_s, timeout_s):g} s: stopped inside a batch")
                    break
                time.sleep(STOP_QUERY_POLL_S)
        except CommandRefused:
            if hold and not was_held:
                self.hooks.release(held_as)
            raise
        last = query.lastProgress
        query.stop()
        pending = uncommitted_batches(checkpoint) if checkpoint is not None else 0
        if pending:
            # A trigger started between the look and the stop: its offsets are logged, its commit is not.
            notes.append(f"the stop landed inside a batch ({pending} uncommitted): it is recomputed on restart (DSM)")
        return {
            "query": name,
            "stopped": True,
            "held": held_as in self.held,
            "last_batch_id": last["batchId"] if last else None,
            "waited_s": round(time.monotonic() - started, 3),
            "pausable": pausable,
            "inside_batch": bool(pending) or not at_boundary,
            "checkpoint": None if checkpoint is None else str(checkpoint),
            "notes": notes,
        }

    @staticmethod
    def _refuse_before_first_commit(name: str, checkpoint: Path | None) -> None:
        """No stop for a migration before the query's first commit: Spark refuses to repartition such
        a checkpoint, and to start it again once batch 0's tasks wrote state (checkpoint.repair_first_batch)."""
        if checkpoint is not None and checkpoint.is_dir() and last_committed_batch(checkpoint) is None:
            raise CommandRefused(f"query {name!r} has no committed batch yet (its first batch is still running): "
                                 "not stopped; ask again once its first batch is done")

    def abort_query(self, command: Command) -> dict[str, Any]:
        """Stop a query at once, mid-batch if need be (DSM): the running batch is abandoned and its
        input is read again after the restart. Sources are left as they are."""
        name = self._query_arg(command)
        hold = bool_arg(command.args, "hold", True)
        query = self._query_to_stop(name)
        if query is None:
            return {"query": name, "stopped": False, "already_stopped": True}
        batch_was_running = bool(query.status["isTriggerActive"])
        last = query.lastProgress
        held_as = query.name or name
        self._refuse_before_first_commit(name, self.checkpoint_of(held_as, query))
        if hold:
            self.hooks.hold(held_as)
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

    def repartition(self, command: Command) -> dict[str, Any]:
        """Rewrite a stopped query's checkpointed state into `partitions` state partitions (Spark's
        offline state repartition: a new batch that reads no input, picked up by the next start)."""
        name = self._query_arg(command)
        partitions = int_arg(command.args, "partitions")
        if not 1 <= partitions <= MAX_PARTITIONS:
            raise CommandRefused(f"'partitions' must be in [1, {MAX_PARTITIONS}] (got {partitions})")
        enforce = bool_arg(command.args, "enforce_exactly_once_sink", True)
        if self.find_query(name) is not None:
            raise CommandRefused(f"query {name!r} is active: stop it (stop_query or abort_query) before repartition")
        checkpoint = self.checkpoint_of(name)
        if checkpoint is None or not (checkpoint / "offsets").is_dir():
            raise CommandRefused(f"no checkpoint of query {name!r} (looked at {checkpoint})")
        timeout_s = float_arg(command.args, "timeout_s", STOP_QUERY_DEFAULT_TIMEOUT_S)
        finished = self.finish_interrupted(name, checkpoint, partitions, timeout_s)
        try:
            outcome = repartition_state(self.spark, checkpoint, partitions, enforce, self.sinks.get(name))
        except InterruptedOutput as exc:
            raise CommandRefused(f"query {name!r}: {exc}; start it on its current partitions to finish it") from None
        if finished:
            outcome["finished_batches"] = finished
        if outcome.get("repartitioned"):
            interval = int(self.spark.conf.get("spark.sql.streaming.fileSink.log.compactInterval", "10") or "10")
            filled = fill_file_sink_log(checkpoint, self.sinks.get(name), interval)
            if filled:
                outcome["file_sink_log_filled"] = filled
        # Also when it already had them: the planner and the report read the count here.
        self.redis.set(partitions_key(self.cfg.redis.key_prefix, self.app.name, name), str(partitions))
        return {"query": name, **outcome}

    def finish_interrupted(self, name: str, checkpoint: Path, partitions: int, timeout_s: float) -> list[int]:
        """Complete the batches a stop left planned and uncommitted before their state is
        repartitioned; their ids (empty: none, or they will simply run again on these partitions).

        A sink may have written such a batch already (foreachBatch, a DataSource writer's commit, a
        file sink's log all come before Spark's commit): after a repartition Spark would plan that
        input again under another batch id, and a sink idempotent by batch id would take it twice.
        So the query runs once more on its old partitions with Spark's one-batch trigger, which
        finishes exactly the planned batch (same id, same offsets) and ends."""
        pending = pending_batches(checkpoint)
        if not pending or uncommitted_at(checkpoint, partitions):
            return []
        started = self.hooks.started.get(name)
        if started is None:
            raise CommandRefused(f"query {name!r} stopped inside batch {pending[0]}, and the agent did not see it "
                                 "started: it cannot run that batch to its end before the repartition")
        try:
            run = started.restart(one_batch=True)
        except Exception as exc:  # a refused start is the command's answer
            raise CommandRefused(f"query {name!r}: could not run its interrupted batch {pending[0]}: {exc}") from None
        log.info("agent.finishing_batch", query=name, batches=pending)
        ended = run._jsq.awaitTermination(int(timeout_s * 1000))  # the Java wait: the hooks' would wait on the hold
        if not ended:
            run._jsq.stop()
            raise CommandRefused(f"query {name!r}: its interrupted batch {pending[0]} did not finish within "
                                 f"{timeout_s:g} s")
        failure = run._jsq.exception()  # a Scala Option
        still = pending_batches(checkpoint)
        if failure.isDefined() or still:
            why = failure.get().getMessage() if failure.isDefined() else f"batches {still} still uncommitted"
            raise CommandRefused(f"query {name!r}: its interrupted batch {pending[0]} did not finish ({why})")
        return pending

    def start_query(self, command: Command) -> dict[str, Any]:
        """Start a stopped query again exactly as the user's code started it (the same writer): it
        resumes from its checkpoint, keeps its id and runs on the checkpoint's state partitions."""
        name = self._query_arg(command)
        if "partitions" in command.args:
            partitions = int_arg(command.args, "partitions")
            if not 1 <= partitions <= MAX_PARTITIONS:
                raise CommandRefused(f"'partitions' must be in [1, {MAX_PARTITIONS}] (got {partitions})")
        else:
            # What the restarted run takes from its checkpoint: the last migration's count, if any.
            stored = stored_partitions(self.redis, self.cfg.redis.key_prefix, self.app.name, name)
            partitions = stored or self.session_partitions()
        if self.find_query(name) is not None:
            self.hooks.release(name)
            return {"query": name, "started": False, "already_running": True}
        if name not in self.hooks.started:
            raise CommandRefused(
                f"query {name!r} cannot be restarted: the agent did not see it started "
                f"(seen: {sorted(self.hooks.started)}); was it started before the agent was attached?")
        checkpoint = self.checkpoint_of(name)
        repaired = repair_first_batch(checkpoint) if checkpoint is not None and checkpoint.is_dir() else None
        if repaired:
            log.warning("agent.checkpoint_repaired", query=name, checkpoint=str(checkpoint), what=repaired)
        query = self.hooks.restart(name)
        return {
            "query": name,
            "started": True,
            "id": str(query.id),
            "run_id": str(query.runId),
            "partitions": partitions,
            "paused": self.paused(),
            **({"repaired": repaired} if repaired else {}),
        }

    def session_partitions(self) -> int:
        configured = self.spark.conf.get(SHUFFLE_PARTITIONS_CONF)
        if configured:
            return int(configured)
        assert self.app.shuffle_partitions is not None, "set by AppConfig's validation"
        return self.app.shuffle_partitions

    def report(self, executors: SparkExecutors, target_executors: int | None, epoch: int) -> dict[str, Any]:
        """The `report` command's answer: active queries, executors, target, pause, held queries, epoch."""
        queries = []
        for query in self.spark.streams.active:
            last = query.lastProgress
            queries.append(
                {
                    "id": str(query.id),
                    "name": query.name,
                    "status": query.status,
                    "partitions": _state_partitions(last) or self.session_partitions(),
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
            "executors": [asdict(e) for e in executors.list()],
            "target_executors": target_executors,
            "paused": self.paused(),
            "held": sorted(self.held),
            "epoch": epoch,
        }
