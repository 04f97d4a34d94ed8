"""Every query's progress, published to Redis as Spark reports it.

Spark's REST API serves no Structured Streaming progress, and the daemon's monitors need it (batch
durations, input and processing rates, state sizes and partitions): the agent registers a
`StreamingQueryListener` in the driver and writes each progress event under the query's progress
keys (`protocol.keys.progress_key` and its `:history` stream).
"""

from __future__ import annotations

import json
import time
from typing import Any

import redis
import structlog
from pyspark.sql.streaming import StreamingQueryListener

from sparkscale.protocol.keys import progress_key

log = structlog.get_logger(__name__)

HISTORY_MAXLEN = 1000


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
