"""Redis sinks that make loss and duplication visible to the verifier.

Two flavours:

- record sink (`format("redis_records")`, a Python `DataSourceStreamWriter`): rows carrying a
  record id column (`uid`). `idempotent` mode keeps each micro-batch under its batch id, replaced
  atomically when the batch is written again; `append` mode appends every row every time, so a
  re-executed batch shows up as duplicates.
- keyed sink (`KeyedBatchWriter`, a `foreachBatch` function): aggregates (`key, value`) in update
  or complete mode; the latest value per key goes to one hash in one MULTI/EXEC per batch, with
  the batch id (idempotent by construction).

Why a stream writer for records: `write()` runs in the executors' tasks, so the sink is an
ordinary, parallel stage of the micro-batch (with task metrics the monitor sees) and rows are never
collected into the driver; `commit(messages, batchId)` runs once per batch on the driver side,
after every task succeeded, and knows the batch id, which is all an idempotent sink needs. Tasks
write to per-attempt staging keys (with a TTL, so failed attempts leave nothing for long); `commit`
folds the batch's staging keys into place in one MULTI/EXEC; `abort` drops them.

Why `foreachBatch` for aggregates: Spark 4.3 refuses Python stream writers in update mode
("<name> does not support Update mode"), and update mode is what stateful pipelines use. The
output of an aggregate's batch is one row per changed key, small enough to collect in the driver.

Redis layout, with `O = {prefix}{app}:out:{query}` (the names are `SinkTarget`'s, in `protocol/sinks.py`):

| key | type | meaning |
|---|---|---|
| `O:b:{batch_id}` | zset uid -> times seen | idempotent records of one batch (replaced as a whole) |
| `O:batches` | zset batch_id -> batch_id | batches committed by the idempotent sink |
| `O:log` | list of uids | append sink: every row every time it was written |
| `O:kv` | hash key -> value | keyed sink: latest value per key (`str(value)`) |
| `O:meta` | hash | `mode`, `last_batch_id`, `last_batch_rows`, `last_batch_at`, `commits`, `rewrites` |
| `O:stage:{token}` | zset | one task attempt's uids until the batch commits (TTL `_STAGE_TTL_S`) |
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

import redis
import structlog
from pyspark.sql.datasource import DataSource, DataSourceStreamWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from sparkscale.protocol.sinks import SinkTarget
from sparkscale.redisconn import to_write

log = structlog.get_logger(__name__)

RECORD_SINK_NAME = "redis_records"
RecordMode = Literal["idempotent", "append"]

_CHUNK_ROWS = 1000
_STAGE_TTL_S = 24 * 3600


# ---------------------------------------------------------------------------------------------
# Options


def _option(options: Any, name: str, default: str) -> str:
    value = options.get(name.lower(), options.get(name))
    return default if value is None or value == "" else str(value)


@dataclass
class StageMessage(WriterCommitMessage):
    """What one task wrote: its staging key (None in append mode) and how many rows."""

    stage_key: str | None
    rows: int


def _stage_keys(messages: list[WriterCommitMessage | None]) -> list[str]:
    return [m.stage_key for m in messages if isinstance(m, StageMessage) and m.stage_key]


def _rows(messages: list[WriterCommitMessage | None]) -> int:
    return sum(m.rows for m in messages if isinstance(m, StageMessage))


# ---------------------------------------------------------------------------------------------
# Record sink


class RedisRecordSink(DataSource):
    """`writeStream.format("redis_records").option("mode", "idempotent"|"append")`."""

    @classmethod
    def name(cls) -> str:
        return RECORD_SINK_NAME

    def streamWriter(self, schema: StructType, overwrite: bool) -> RecordStreamWriter:
        mode = _option(self.options, "mode", "idempotent")
        if mode not in ("idempotent", "append"):
            raise ValueError(f"redis_records: mode must be idempotent or append, got {mode!r}")
        uid_column = _option(self.options, "uidColumn", "uid")
        if uid_column not in schema.fieldNames():
            raise ValueError(f"redis_records: the rows have no {uid_column!r} column ({schema.simpleString()})")
        return RecordStreamWriter(SinkTarget.parse(self.options), mode, uid_column)  # type: ignore[arg-type]


class RecordStreamWriter(DataSourceStreamWriter):
    def __init__(self, target: SinkTarget, mode: RecordMode, uid_column: str):
        self.target = target
        self.mode = mode
        self.uid_column = uid_column

    def write(self, iterator: Iterator[Any]) -> StageMessage:
        client = self.target.client()
        stage = self.target.stage_key() if self.mode == "idempotent" else None
        rows = 0
        try:
            chunk: list[str] = []
            for row in iterator:
                chunk.append(str(row[self.uid_column]))
                if len(chunk) >= _CHUNK_ROWS:
                    self._flush(client, stage, chunk)
                    rows += len(chunk)
                    chunk = []
            if chunk:
                self._flush(client, stage, chunk)
                rows += len(chunk)
        finally:
            client.close()
        return StageMessage(stage, rows)

    def _flush(self, client: redis.Redis, stage: str | None, uids: list[str]) -> None:
        pipe = client.pipeline(transaction=False)
        if stage is None:
            pipe.rpush(self.target.log_key, *uids)
        else:
            for uid in uids:
                pipe.zincrby(stage, 1, uid)
            pipe.expire(stage, _STAGE_TTL_S)
        pipe.execute()

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        t = self.target
        client = t.client()
        try:
            stages = _stage_keys(messages)
            pipe = client.pipeline(transaction=True)
            if self.mode == "idempotent":
                # ZUNIONSTORE replaces the destination: a batch written again replaces, never adds.
                if stages:
                    pipe.zunionstore(t.batch_key(batchId), stages, aggregate="SUM")
                    pipe.delete(*stages)
                else:
                    pipe.delete(t.batch_key(batchId))
                pipe.zadd(t.batches_key, {str(batchId): batchId})
            pipe.hset(t.meta_key, mapping={"mode": self.mode, "last_batch_id": batchId,
                                           "last_batch_rows": _rows(messages), "last_batch_at": repr(time.time())})
            pipe.hincrby(t.meta_key, "commits", 1)
            replies = pipe.execute()
            if self.mode == "idempotent" and replies[-3] == 0:  # ZADD added nothing: seen before
                client.hincrby(t.meta_key, "rewrites", 1)
                log.info("sink_batch_rewritten", query=t.query, batch_id=batchId, rows=_rows(messages))
        finally:
            client.close()

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _drop_stages(self.target, messages, batchId)


# ---------------------------------------------------------------------------------------------
# Keyed sink


class KeyedBatchWriter:
    """`foreachBatch` function: the batch's `key, value` rows into `O:kv` in one MULTI/EXEC.

    Spark 4.3 refuses Python stream writers in update mode ("does not support Update mode"), so
    this flavour runs in the driver through `foreachBatch`. An aggregate's batch output is one row
    per changed key (update) or per key (complete), small enough to collect.
    """

    def __init__(self, target: SinkTarget, key_column: str = "key", value_column: str = "value",
                 replace: bool = False):
        self.target = target
        self.key_column = key_column
        self.value_column = value_column
        self.replace = replace  # complete mode: the batch is the whole result

    def __call__(self, df: Any, batch_id: int) -> None:
        # collect(), not toLocalIterator(): the latter runs one job per partition, one after the
        # other, which serialises the stateful stage and hides the parallelism we scale.
        latest = {
            str(row[self.key_column]): _value_text(row[self.value_column])
            for row in df.select(self.key_column, self.value_column).collect()
        }
        self.write_batch(latest, batch_id)

    def write_batch(self, latest: dict[str, str], batch_id: int) -> None:
        """Writing the same batch again leaves the hash as after its first write."""
        t = self.target
        client = t.client()
        try:
            pipe = client.pipeline(transaction=True)
            if self.replace:
                pipe.delete(t.kv_key)
            if latest:
                pipe.hset(t.kv_key, mapping=to_write(latest))
            pipe.hset(t.meta_key, mapping={"mode": "complete" if self.replace else "update",
                                           "last_batch_id": batch_id, "last_batch_rows": len(latest),
                                           "last_batch_at": repr(time.time())})
            pipe.hincrby(t.meta_key, "commits", 1)
            pipe.execute()
        finally:
            client.close()


def _value_text(value: Any) -> str:
    return "" if value is None else str(value)


def _drop_stages(target: SinkTarget, messages: list[WriterCommitMessage | None], batch_id: int) -> None:
    stages = _stage_keys(messages)
    log.warning("sink_batch_aborted", query=target.query, batch_id=batch_id, staged_tasks=len(stages))
    if stages:
        client = target.client()
        try:
            client.delete(*stages)
        finally:
            client.close()


# ---------------------------------------------------------------------------------------------
# Wiring


def register(spark: Any) -> None:
    """Make `format("redis_records")` available in this SparkSession."""
    spark.dataSource.register(RedisRecordSink)


def record_sink(df: Any, target: SinkTarget, mode: RecordMode, checkpoint: str, uid_column: str = "uid") -> Any:
    """A DataStreamWriter (append output mode) of `df` into the record sink; call `.start()`."""
    register(df.sparkSession)
    return (
        df.writeStream.format(RECORD_SINK_NAME)
        .options(**target.as_options(), mode=mode, uidColumn=uid_column)
        .outputMode("append")
        .queryName(target.query)
        .option("checkpointLocation", checkpoint)
    )


def keyed_sink(df: Any, target: SinkTarget, checkpoint: str, output_mode: Literal["update", "complete"] = "update",
               key_column: str = "key", value_column: str = "value") -> Any:
    """A DataStreamWriter of an aggregate `df` into the keyed sink; call `.start()`."""
    writer = KeyedBatchWriter(target, key_column, value_column, replace=output_mode == "complete")
    return (
        df.writeStream.foreachBatch(writer)
        .outputMode(output_mode)
        .queryName(target.query)
        .option("checkpointLocation", checkpoint)
    )
