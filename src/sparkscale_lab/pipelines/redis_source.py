"""Redis Streams as a replayable, pausable, rate-capped Structured Streaming source.

Built on PySpark's Python Data Source API (`pyspark.sql.datasource`). The input of an app is the N
streams `{prefix}{app}:in:{i}`; each micro-batch reads, per stream, the entries in (start, end]
(XRANGE with an exclusive start), one Spark input partition per stream, so a restart from the
checkpoint re-reads exactly the same records.

Where the pieces run (PySpark 4.3): the `DataSource` instance is pickled by the driver JVM and the
stream reader (`initialOffset`, `latestOffset`, `partitions`, `commit`) lives in a long-lived
Python process that the JVM starts for the query, not in the driver's own Python; `read` runs in
executor Python workers. Nothing is shared in memory with the driver's Python: the pause flag comes
from Redis and the bookkeeping goes to Redis.

Offsets are JSON dicts `{"ids": {"0": "<entry id>", ...}, "counts": {"0": <int>, ...}}`: per
partition the last entry id admitted, and how many entries the stream had received up to and
including it (its position). Backlog method: `XINFO STREAM` reports `entries-added`, the number of
entries ever added to the stream; the backlog of a partition is `entries-added` minus the position
in the offset. That is O(1) per stream and exact as long as the streams are not trimmed and no
entry is deleted (docs/internals.md: input streams are never trimmed while a verifier may run).

The bookkeeping hash `{prefix}{app}:source:{query}` (read it with `read_source_status`):

| field | written | meaning |
|---|---|---|
| `committed`, `committed_at` | `commit(end)` | offsets Spark committed to the source (JSON) |
| `processed`, `processed_at` | every `latestOffset` | end of the last finished batch (JSON) |
| `latest`, `latest_at`, `admitted_records` | `latestOffset` that advances | offsets admitted for the next batch |
| `backlog`, `backlog_by_partition`, `backlog_at` | both | entries after `processed` (or `committed`, if further) |
| `paused` | every `latestOffset` | "1" while the pause key held admission back |

Spark 4.3 commits to the source lazily: `commit(end of batch N)` comes only when batch N+1 is
planned, so after the last batch of a burst `committed` trails by one batch until new data comes.
`latestOffset(start)` is called only between batches and `start` is the end of the batch that just
finished, so `processed` is current; "has the query drained?" is `backlog == 0`, not `committed`.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Sequence
from typing import Any

import redis
import structlog
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, ReadMinRows
from pyspark.sql.types import StructType

from sparkscale.protocol.keys import paused_key, source_status_key
from sparkscale.protocol.streams import START_ID, StreamOffsets, backlog_by_partition, stream_heads
from sparkscale.redisconn import to_write
from sparkscale_lab.pipelines.redis_source_options import RedisStreamsOptions, source_schema

log = structlog.get_logger(__name__)

SOURCE_NAME = "redis_streams"
_XRANGE_PAGE = 1000

# Id of the `n`-th entry after an exclusive start, and how many entries there were (at most n).
# Run server side so that only the id crosses the wire, not the payloads of the skipped entries.
_NTH_ID_LUA = """
local r = redis.call('XRANGE', KEYS[1], ARGV[1], '+', 'COUNT', tonumber(ARGV[2]))
if #r == 0 then return {false, 0} end
return {r[#r][1], #r}
"""


# ---------------------------------------------------------------------------------------------
# Offsets and admission (pure)


def split_cap(backlogs: Sequence[int], cap: int, rotate: int = 0) -> list[int]:
    """Share `cap` records over partitions fairly (water-filling), never beyond a backlog.

    Partitions with little waiting take all of it; the rest is split evenly over the others. The
    last indivisible records go round-robin starting at `rotate`, so no partition is always first.
    """
    n = len(backlogs)
    alloc = [0] * n
    remaining = max(cap, 0)
    active = [i for i in range(n) if backlogs[i] > 0]
    while remaining > 0 and active:
        share = remaining // len(active)
        if share == 0:
            order = sorted(active, key=lambda i: (i - rotate) % n)
            for i in order[:remaining]:
                alloc[i] += 1
            break
        for i in active:
            take = min(share, backlogs[i] - alloc[i])
            alloc[i] += take
            remaining -= take
        active = [i for i in active if alloc[i] < backlogs[i]]
    return alloc


def cap_for_limit(limit: ReadLimit, default_cap: int | None) -> tuple[int | None, int]:
    """(max records, min records) to admit for Spark's ReadLimit; None means no upper bound."""
    if isinstance(limit, ReadMaxRows):
        return limit.max_rows, 0
    if isinstance(limit, ReadMinRows):
        return None, limit.min_rows
    if isinstance(limit, ReadAllAvailable):
        # Spark passes this for Trigger.AvailableNow/Once even when we asked for a cap; it must win.
        return None, 0
    return default_cap, 0  # files/bytes limits mean nothing here: fall back to our own cap


# ---------------------------------------------------------------------------------------------
# The data source


class RedisStreamPartition(InputPartition):
    """One input stream's (start, end] range for one micro-batch (pickled to the executor)."""

    def __init__(self, partition: int, key: str, start_id: str, end_id: str):
        super().__init__(partition)
        self.partition = partition
        self.key = key
        self.start_id = start_id
        self.end_id = end_id


class RedisStreamsDataSource(DataSource):
    """`spark.readStream.format("redis_streams")`: see the module docstring."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        return source_schema(RedisStreamsOptions.parse(self.options).fields)

    def streamReader(self, schema: StructType) -> RedisStreamsReader:
        _quiet_unconfigured_logging()
        return RedisStreamsReader(RedisStreamsOptions.parse(self.options))


class RedisStreamsReader(DataSourceStreamReader):
    def __init__(self, opts: RedisStreamsOptions):
        self.opts = opts
        self.keys = [opts.stream_key(i) for i in range(opts.partitions)]
        self._client: redis.Redis | None = None
        self._nth_id: Any = None
        self._paused_seen = False
        self._processed: StreamOffsets | None = None

    # The reader lives in its own Python process for the whole query run: one connection is kept.
    @property
    def client(self) -> redis.Redis:
        if self._client is None:
            self._client = self.opts.client()
            self._nth_id = self._client.register_script(_NTH_ID_LUA)
        return self._client

    @property
    def status_key(self) -> str:
        return source_status_key(self.opts.prefix, self.opts.app, self.opts.query)

    def initialOffset(self) -> dict:
        n = self.opts.partitions
        if self.opts.starting == "latest":
            heads = stream_heads(self.client, self.keys)
            offsets = StreamOffsets(tuple(h.last_id for h in heads), tuple(h.entries_added for h in heads))
        else:
            offsets = StreamOffsets((START_ID,) * n, (0,) * n)
        return offsets.to_json()

    def getDefaultReadLimit(self) -> ReadLimit:
        cap = self.opts.max_records_per_batch
        return ReadMaxRows(cap) if cap is not None else ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        # `start` is the end of the last batch that finished (Spark calls this only between batches).
        begin = StreamOffsets.from_json(start, self.opts.partitions)
        self._processed = begin
        heads = stream_heads(self.client, self.keys)
        backlogs = backlog_by_partition(heads, begin)
        paused = bool(self.client.exists(paused_key(self.opts.prefix, self.opts.app)))
        self._note_pause(paused, sum(backlogs))
        now = repr(time.time())
        status: dict[str, Any] = {"paused": "1" if paused else "0", "processed": json.dumps(begin.to_json()),
                                  "processed_at": now}
        status.update(_backlog_fields(backlogs, now))
        max_records, min_records = cap_for_limit(limit, self.opts.max_records_per_batch)
        if paused or sum(backlogs) == 0 or sum(backlogs) < min_records:
            self.client.hset(self.status_key, mapping=to_write(status))
            return start  # unchanged JSON: Spark plans no batch
        alloc = backlogs if max_records is None else split_cap(backlogs, max_records, rotate=begin.total)
        ids, counts = list(begin.ids), list(begin.counts)
        for i, want in enumerate(alloc):
            if want <= 0:
                continue
            if want >= backlogs[i]:
                ids[i], counts[i] = heads[i].last_id, heads[i].entries_added
            else:
                last_id, got = self._nth_id(keys=[self.keys[i]], args=[f"({begin.ids[i]}", want])
                if got:
                    ids[i], counts[i] = str(last_id), begin.counts[i] + int(got)
        end = StreamOffsets(tuple(ids), tuple(counts))
        if end == begin:  # entries vanished between XINFO and XRANGE (trimmed or deleted)
            self.client.hset(self.status_key, mapping=to_write(status))
            return start
        status.update(latest=json.dumps(end.to_json()), latest_at=repr(time.time()),
                      admitted_records=str(end.total - begin.total))
        self.client.hset(self.status_key, mapping=to_write(status))
        log.debug("source_admitted", query=self.opts.query, records=end.total - begin.total,
                  backlog_records=sum(backlogs))
        return end.to_json()

    def reportLatestOffset(self) -> dict | None:
        heads = stream_heads(self.client, self.keys)
        return StreamOffsets(tuple(h.last_id for h in heads), tuple(h.entries_added for h in heads)).to_json()

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin = StreamOffsets.from_json(start, self.opts.partitions)
        stop = StreamOffsets.from_json(end, self.opts.partitions)
        if begin == stop:
            return []
        # One partition per stream, also for streams with nothing new: the source's parallelism
        # stays N, which is what the monitor and the policies model.
        return [
            RedisStreamPartition(i, self.keys[i], begin.ids[i], stop.ids[i])
            for i in range(self.opts.partitions)
        ]

    def read(self, partition: InputPartition) -> Iterator[tuple]:
        assert isinstance(partition, RedisStreamPartition)
        if partition.start_id == partition.end_id:
            return
        client = self.opts.client()
        fields = self.opts.fields
        try:
            cursor = f"({partition.start_id}"
            while True:
                page = client.xrange(partition.key, min=cursor, max=partition.end_id, count=_XRANGE_PAGE) or []
                for entry_id, entry in page:
                    values = entry or {}
                    ts = values.get("ts")
                    yield (
                        values.get("uid"),
                        int(ts) if ts not in (None, "") else None,
                        partition.partition,
                        entry_id,
                        *(values.get(name) for name in fields),
                    )
                if len(page) < _XRANGE_PAGE:
                    return
                cursor = f"({page[-1][0]!s}"
        finally:
            client.close()

    def commit(self, end: dict) -> None:
        # Spark commits lazily: the end of batch N reaches here when batch N+1 is planned.
        offsets = StreamOffsets.from_json(end, self.opts.partitions)
        now = repr(time.time())
        status = {"committed": json.dumps(offsets.to_json()), "committed_at": now}
        base = offsets
        if self._processed is not None and self._processed.total > offsets.total:
            base = self._processed
        status.update(_backlog_fields(backlog_by_partition(stream_heads(self.client, self.keys), base), now))
        self.client.hset(self.status_key, mapping=to_write(status))

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def _note_pause(self, paused: bool, backlog: int) -> None:
        if paused != self._paused_seen:
            log.info("source_paused" if paused else "source_resumed", app=self.opts.app,
                     query=self.opts.query, backlog_records=backlog)
            self._paused_seen = paused


def _backlog_fields(backlogs: Sequence[int], now: str) -> dict[str, str]:
    return {"backlog": str(sum(backlogs)), "backlog_by_partition": json.dumps(list(backlogs)), "backlog_at": now}


def _quiet_unconfigured_logging() -> None:
    """The reader's process is started by the JVM and nobody configures structlog there; its
    default prints every level to stdout (the JVM's log). Keep that to info and above."""
    if not structlog.is_configured():
        structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.INFO))


def register(spark: Any) -> None:
    """Make `format("redis_streams")` available in this SparkSession."""
    spark.dataSource.register(RedisStreamsDataSource)


def read_stream(spark: Any, opts: RedisStreamsOptions) -> Any:
    """The streaming DataFrame of an app's input streams (registers the source if needed)."""
    register(spark)
    return spark.readStream.format(SOURCE_NAME).options(**opts.as_options()).load()
