"""The app's streaming queries and sources, as the agent's commands steer them.

Pausing the sources, stopping a query at a batch boundary or at once (abort), rewriting a stopped
query's state partitions and starting it again with N shuffle partitions are the driver-side steps
of a stateful migration; `held` names the queries stopped for one, which keep the driver alive while
none of its queries runs. `report` is the driver's whole view, for the daemon and the operator.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import redis
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from sparkscale.agent.args import CommandRefused, bool_arg, float_arg, int_arg
from sparkscale.agent.checkpoint import _state_partitions, repartition_state
from sparkscale.agent.executors import SparkExecutors
from sparkscale.config import AppConfig, Config
from sparkscale.pipeline.workloads import workload
from sparkscale.protocol.commands import Command
from sparkscale.protocol.keys import partitions_key, paused_key
from sparkscale.protocol.streams import stored_partitions

STOP_QUERY_DEFAULT_TIMEOUT_S = 60.0
STOP_QUERY_POLL_S = 0.1
SHUFFLE_PARTITIONS_CONF = "spark.sql.shuffle.partitions"
MAX_PARTITIONS = 4096  # as AppConfig.shuffle_partitions

QueryStarter = Callable[[int], list[StreamingQuery]]


class QueryControl:
    """The command handlers for the app's sources and queries (run on the agent's worker thread).

    The driver registers `starter` (builds the app's queries with n shuffle partitions) for
    `start_query`; without one, queries can be stopped but not started again.
    """

    def __init__(self, spark: SparkSession, cfg: Config, app: AppConfig, redis_client: redis.Redis,
                 checkpoint_root: Path):
        self.spark = spark
        self.cfg = cfg
        self.app = app
        self.redis = redis_client
        self.checkpoint_root = checkpoint_root
        self.pause_key = paused_key(cfg.redis.key_prefix, app.name)
        self.starter: QueryStarter | None = None
        self.held: set[str] = set()

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

    def stop_query(self, command: Command) -> dict[str, Any]:
        """Stop a query between two batches: sources paused, no batch running, nothing admitted.

        With `hold` the query is stopped for a migration: the driver keeps running without it, and
        a re-sent stop of the held query (after a daemon crash) is answered, not refused.
        """
        name = self._query_arg(command)
        timeout_s = float_arg(command.args, "timeout_s", STOP_QUERY_DEFAULT_TIMEOUT_S)
        hold = bool_arg(command.args, "hold", False)
        query = self._query_to_stop(name)
        if query is None:
            return {"query": name, "stopped": False, "already_stopped": True}
        notes = []
        if not self.paused():
            # Without the pause a source keeps admitting new offsets and the boundary never comes.
            self.redis.set(self.pause_key, str(time.time()))
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
        checkpoint = self.checkpoint_root / name
        if not (checkpoint / "offsets").is_dir():
            raise CommandRefused(f"no checkpoint of query {name!r} at {checkpoint}")
        outcome = repartition_state(self.spark, checkpoint, partitions, enforce)
        # Also when it already had them: start_query and the driver's restart read the count here.
        self.redis.set(partitions_key(self.cfg.redis.key_prefix, self.app.name, name), str(partitions))
        return {"query": name, **outcome}

    def start_query(self, command: Command) -> dict[str, Any]:
        """(Re)start the app's query with `partitions` shuffle partitions; it picks up its checkpoint."""
        name = self._query_arg(command)
        if "partitions" in command.args:
            partitions = int_arg(command.args, "partitions")
            if not 1 <= partitions <= MAX_PARTITIONS:
                raise CommandRefused(f"'partitions' must be in [1, {MAX_PARTITIONS}] (got {partitions})")
        else:
            # The last migration's count: the checkpoint has it, and the workload must agree.
            stored = stored_partitions(self.redis, self.cfg.redis.key_prefix, self.app.name, name)
            partitions = stored or self.session_partitions()
        if self.find_query(name) is not None:
            return {"query": name, "started": False, "already_running": True}
        if self.starter is None:
            raise CommandRefused("this agent has no query starter (it does not run in a sparkscale driver)")
        own = workload(self.app.pipeline).query
        if name != own:
            raise CommandRefused(f"{name!r} is not this app's query ({own!r}, pipeline {self.app.pipeline})")
        # Read by the planner for a query's first batch only (afterwards the checkpoint's count wins),
        # but also what the workload's explicit repartitions and the report use.
        self.spark.conf.set(SHUFFLE_PARTITIONS_CONF, str(partitions))
        started = self.starter(partitions)
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
            "paused": self.paused(),
        }

    def session_partitions(self) -> int:
        return int(self.spark.conf.get(SHUFFLE_PARTITIONS_CONF) or self.app.shuffle_partitions)

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
