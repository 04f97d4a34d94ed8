"""Every query's progress, and the app's list of queries, published to Redis as Spark reports them.

Spark's REST API serves no Structured Streaming progress, and the daemon's monitors need it (batch
durations, input and processing rates, state sizes and partitions, each source's backlog): the
agent registers a `StreamingQueryListener` in the driver and writes each progress event under the
query's progress keys (`protocol.keys.progress_key` and its `:history` stream), and each query's
`QueryInfo` (checkpoint, whether it can be migrated) under `protocol.queries.queries_key`. An idle
trigger (Spark's `QueryIdleEvent`) adds an idle sample to the `:history` stream only (idle_samples.py).
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import redis
import structlog
from pyspark.sql import SparkSession
from pyspark.sql.streaming.listener import (
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
    StateOperatorProgress,
    StreamingQueryListener,
    StreamingQueryProgress,
)

from sparkscale.agent.checkpoint import is_temporary, last_committed_batch, state_store_provider
from sparkscale.agent.hooks import QueryHooks
from sparkscale.agent.idle_samples import IdleSampler, LastBatch, idle_fields
from sparkscale.agent.sources import SourceReporter, as_json
from sparkscale.protocol.keys import paused_key, progress_history_key, progress_key
from sparkscale.protocol.queries import RELOAD_FIGURES_RESET_BY, STATE_LOAD_FIELDS, QueryInfo, queries_key
from sparkscale.redisconn import to_write

log = structlog.get_logger(__name__)

HISTORY_MAXLEN = 1000
SESSION_CHECKPOINT_CONF = "spark.sql.streaming.checkpointLocation"
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


class ProgressPublisher(StreamingQueryListener):
    """Publishes each query's progress to `P{app}:progress:{query}` and its `:history` stream, and
    the query's `QueryInfo` to `P{app}:queries`."""

    def __init__(self, client: redis.Redis, key_prefix: str, app: str, spark: SparkSession | None = None,
                 hooks: QueryHooks | None = None):
        super().__init__()
        self._client = client
        self._prefix, self._app = key_prefix, app
        self._spark = spark
        self._hooks = hooks
        self._reporters: dict[str, SourceReporter] = {}
        self._infos: dict[str, QueryInfo] = {}
        self.idle = IdleSampler()
        if hooks is not None:
            hooks.on_record.append(self._on_recorded)

    def _on_recorded(self, name: str) -> None:
        """The hooks saw `name` started (after Spark's start event, whose info said not restartable)."""
        try:
            info = self._infos.get(name)
            if info is not None and not info.restartable:
                self.publish_info(replace(info, restartable=True, updated_at=time.time()))
        except Exception as exc:  # never break the user's start
            log.warning("agent.query_info_failed", error=str(exc))

    # -- query list -------------------------------------------------------------------------------

    def query_info(self, query_id: str, name: str | None, run_id: str, status: str,
                   error: str | None = None) -> QueryInfo:
        label = name or query_id
        checkpoint, temporary, trigger_s = self._from_query(query_id)
        previous = self._infos.get(label)
        if checkpoint is None and previous is not None:
            checkpoint, temporary = previous.checkpoint, previous.temporary_checkpoint
            trigger_s = previous.trigger_interval_s
        info = QueryInfo(
            name=label, id=query_id, run_id=run_id, status=status, checkpoint=checkpoint,
            temporary_checkpoint=temporary,
            restartable=self._hooks is not None and label in self._hooks.started,
            pausable=previous.pausable if previous else False, sources=previous.sources if previous else (),
            state_partitions=previous.state_partitions if previous else None, updated_at=time.time(), error=error,
            trigger_interval_s=trigger_s,
            state_store_provider=_provider(checkpoint) or (previous.state_store_provider if previous else None),
            source_descriptions=previous.source_descriptions if previous else (),
            # A batch committed before (this run or an earlier one, as the checkpoint's commit log says).
            committed=(previous is not None and previous.committed) or _has_commit(checkpoint),
            session_checkpoint=name is None and session_checkpoint(self._session_root(), checkpoint),
        )
        return info

    def _session_root(self) -> str | None:
        if self._spark is None:
            return None
        try:
            root: str | None = self._spark.conf.get(SESSION_CHECKPOINT_CONF, None)
            return root
        except Exception:  # no session conf to read: no session default
            return None

    def publish_info(self, info: QueryInfo) -> None:
        self._infos[info.name] = info
        self._client.hset(queries_key(self._prefix, self._app), info.name, info.to_json())

    def _from_query(self, query_id: str) -> tuple[str | None, bool, float | None]:
        """The query's checkpoint root, whether Spark made it up, and its processing-time trigger."""
        if self._spark is None:
            return None, False, None
        try:
            query = self._spark.streams.get(query_id)
            if query is None:
                return None, False, None
            execution = query._jsq.streamingQuery()
            root = str(execution.resolvedCheckpointRoot())
        except Exception:  # a query gone or another wrapper: unknown, not fatal
            return None, False, None
        trigger_s = None
        try:
            trigger = execution.trigger()
            if "ProcessingTime" in str(trigger.getClass().getSimpleName()):
                trigger_s = int(trigger.intervalMs()) / 1000.0 or None
        except Exception:  # another trigger kind: none to report
            trigger_s = None
        return root, is_temporary(root), trigger_s

    def held(self, name: str) -> bool:
        return self._hooks is not None and name in self._hooks.held

    # -- listener ---------------------------------------------------------------------------------

    def onQueryStarted(self, event: QueryStartedEvent) -> None:
        log.info("agent.query_started", query=event.name, query_id=str(event.id))
        try:
            self.publish_info(self.query_info(str(event.id), event.name, str(event.runId), "active"))
        except Exception as exc:  # a listener that raises is dropped by Spark
            log.warning("agent.query_info_failed", error=str(exc))

    def onQueryProgress(self, event: QueryProgressEvent) -> None:
        try:
            progress = event.progress
            label = progress.name or str(progress.id)
            info = self._infos.get(label) or self.query_info(str(progress.id), progress.name,
                                                            str(progress.runId), "active")
            reporter = self._reporters.get(label)
            if reporter is None or reporter.checkpoint != info.checkpoint:
                reporter = self._reporters[label] = SourceReporter(info.checkpoint)
            reports = reporter.reports(progress)
            fields = progress_fields(progress, [r.to_dict() for r in reports])
            key = progress_key(self._prefix, self._app, label)
            pipe = self._client.pipeline(transaction=False)
            redis_fields = to_write(fields)
            pipe.hset(key, mapping=redis_fields)
            pipe.xadd(f"{key}:history", redis_fields, maxlen=HISTORY_MAXLEN, approximate=True)
            pipe.execute()
            self.idle.published(LastBatch(label, str(progress.id), str(progress.runId), int(progress.batchId),
                                          tuple(reports)))
            pausable = bool(reports) and all(r.kind == "redis_streams" for r in reports)
            partitions = fields.get("state_partitions")
            partitions = partitions if isinstance(partitions, int) else None  # progress_fields: an int or absent
            restartable = self._hooks is not None and label in self._hooks.started
            provider = _provider(info.checkpoint) or info.state_store_provider
            descriptions = tuple(r.description for r in reports)
            # A progress event follows the batch's commit: from now on a stop leaves a checkpoint
            # Spark restarts from (agent.queries refuses a stop before it).
            if (info.pausable, info.sources, info.state_partitions, info.run_id, info.restartable,
                    info.state_store_provider, info.source_descriptions, info.committed) != (
                    pausable, tuple(r.kind for r in reports), partitions, str(progress.runId), restartable,
                    provider, descriptions, True):
                info = replace(info, pausable=pausable, sources=tuple(r.kind for r in reports),
                               state_partitions=partitions, run_id=str(progress.runId), updated_at=time.time(),
                               restartable=restartable, status="active", state_store_provider=provider,
                               source_descriptions=descriptions, committed=True)
                self.publish_info(info)
        except Exception as exc:  # a listener that raises is dropped by Spark
            log.warning("agent.progress_publish_failed", error=str(exc))

    def onQueryIdle(self, event: QueryIdleEvent) -> None:
        try:
            self.publish_idle(str(event.id), str(event.runId), event.timestamp)
        except Exception as exc:  # a listener that raises is dropped by Spark
            log.warning("agent.idle_publish_failed", query_id=str(event.id), error=str(exc))

    def publish_idle(self, query_id: str, run_id: str, timestamp: str | None) -> bool:
        """An idle sample of the query, where one is due (`IdleSampler.due`) and honest: not while
        the app's pause key holds a Redis streams source back (its trigger is idle with input waiting)."""
        last = self.idle.due(query_id, run_id)
        if last is None:
            return False
        if any(s.kind == "redis_streams" for s in last.sources) and self._client.exists(
                paused_key(self._prefix, self._app)):
            log.debug("agent.idle_sample_skipped", query=last.query, reason="sources paused")
            return False
        fields = idle_fields(last, timestamp, time.time())
        self._client.xadd(progress_history_key(self._prefix, self._app, last.query), to_write(fields),
                          maxlen=HISTORY_MAXLEN, approximate=True)
        self.idle.sent(query_id)
        return True

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:
        log.info("agent.query_terminated", query_id=str(event.id), exception=event.exception)
        try:
            label = next((n for n, i in self._infos.items() if i.id == str(event.id)), str(event.id))
            info = self._infos.get(label)
            status = "held" if self.held(label) else "terminated"
            name = info.name if info else None
            updated = self.query_info(str(event.id), name, str(event.runId), status, event.exception)
            if info is not None:
                updated = replace(info, status=status, error=event.exception, updated_at=time.time())
            self.publish_info(updated)
        except Exception as exc:  # a listener that raises is dropped by Spark
            log.warning("agent.query_info_failed", error=str(exc))


def _has_commit(checkpoint: str | None) -> bool:
    """The (local) checkpoint's commit log holds a batch."""
    if not checkpoint:
        return False
    path = urlparse(checkpoint)
    return path.scheme in ("", "file") and last_committed_batch(Path(path.path)) is not None


def session_checkpoint(session_root: str | None, checkpoint: str | None) -> bool:
    """Spark put an unnamed query's checkpoint under the session's checkpointLocation in a random
    directory (`<root>/<uuid>`, a new one at every start: StreamingQueryManager.createQuery)."""
    if not session_root or not checkpoint:
        return False
    root, path = urlparse(session_root).path.rstrip("/"), urlparse(checkpoint).path.rstrip("/")
    parent, _, leaf = path.rpartition("/")
    return parent == root and _UUID.fullmatch(leaf) is not None


def _provider(checkpoint: str | None) -> str | None:
    """The state store provider a (local) checkpoint records."""
    if not checkpoint:
        return None
    path = urlparse(checkpoint)
    return state_store_provider(Path(path.path)) if path.scheme in ("", "file") else None


def progress_fields(progress: StreamingQueryProgress,
                    sources: list[dict[str, Any]] | None = None) -> dict[str, str | int | float]:
    """Flat Redis fields from a StreamingQueryProgress; missing figures are left out."""
    state_ops = list(progress.stateOperators or [])
    if sources is None:
        sources = [
            {
                "description": s.description,
                "start_offset": as_json(s.startOffset),
                "end_offset": as_json(s.endOffset),
                "latest_offset": as_json(s.latestOffset),
                "num_input_rows": s.numInputRows,
            }
            for s in progress.sources or []
        ]
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
        "sources": json.dumps(sources),
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
        fields.update(state_load_fields(state_ops))
    return {k: v for k, v in fields.items() if v is not None}


def state_load_fields(state_ops: list[StateOperatorProgress]) -> dict[str, int]:
    """The batch's state reload figures (`STATE_LOAD_FIELDS`), each summed over the stateful
    operators that report it: how much a fault's reload from the checkpoint cost. A metric no
    operator reports (another provider, an older Spark, an operator whose figures Spark wipes:
    `RELOAD_FIGURES_RESET_BY`) is left out, not zero."""
    out: dict[str, int] = {}
    for op in state_ops:
        if getattr(op, "operatorName", None) in RELOAD_FIGURES_RESET_BY:
            continue
        metrics = getattr(op, "customMetrics", None) or {}
        for metric, name in STATE_LOAD_FIELDS.items():
            value = metrics.get(metric)
            if value is not None:
                out[name] = out.get(name, 0) + int(value)
    return out
