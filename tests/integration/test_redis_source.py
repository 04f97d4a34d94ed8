"""The Redis Streams source and the Redis sinks, end to end, on a real Redis and a local Spark.

One SparkSession for the module (local[2], RocksDB state as a managed app's driver has it: apps/submit.py); each test
uses its own app name, so Redis keys never collide, and its own checkpoints under tmp_path.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from sparkscale.protocol.sinks import SinkTarget
from sparkscale.protocol.streams import live_backlog, read_source_status
from sparkscale_lab.pipelines import redis_source, sinks
from sparkscale_lab.pipelines.redis_source import split_cap
from sparkscale_lab.pipelines.redis_source_options import RedisStreamsOptions
from sparkscale_lab.pipelines.verify import (
    compare_keyed,
    compare_records,
    read_input_records,
    read_keyed_sink,
    read_record_sink,
)
from tests.conftest import RedisServer, wait_until

pytestmark = pytest.mark.integration

PREFIX = "sparkscale:"
TRIGGER = "0.5 seconds"  # not the default "as fast as possible": spare the shared 2 cores
BATCH_TIMEOUT_S = 90  # generous: other engineers run Spark on this machine at the same time


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    # The reader and the executors run Python processes started by the JVM; they must use the
    # interpreter that has sparkscale installed, not whatever `python3` is on PATH.
    old = os.environ.get("PYSPARK_PYTHON")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master("local[2]")
        .appName("test_redis_source")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.streaming.stateStore.providerClass",
                "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    redis_source.register(session)
    sinks.register(session)
    try:
        yield session
    finally:
        for query in session.streams.active:
            query.stop()
        session.stop()
        if old is None:
            os.environ.pop("PYSPARK_PYTHON", None)
        else:
            os.environ["PYSPARK_PYTHON"] = old


# ---------------------------------------------------------------------------------------------
# Helpers


def produce(client: redis.Redis, app: str, partitions: int, per_partition: int, run: str) -> list[str]:
    """Write `per_partition` records to each input stream; return their uids."""
    uids: list[str] = []
    pipe = client.pipeline(transaction=False)
    for p in range(partitions):
        for seq in range(per_partition):
            uid = f"{run}-{p}-{seq}"
            pipe.xadd(f"{PREFIX}{app}:in:{p}", {"uid": uid, "ts": 1_700_000_000_000 + seq, "line": f"w{seq % 3} x"})
            uids.append(uid)
    pipe.execute()
    return uids


def source_options(server: RedisServer, app: str, partitions: int, cap: int | None,
                   query: str = "q") -> RedisStreamsOptions:
    return RedisStreamsOptions(app=app, query=query, partitions=partitions, fields=("line",),
                               host=server.host, port=server.port, prefix=PREFIX, max_records_per_batch=cap)


def start_records(spark: SparkSession, server: RedisServer, app: str, mode: str, checkpoint: Path,
                  partitions: int, cap: int | None, query: str = "q") -> Any:
    df = redis_source.read_stream(spark, source_options(server, app, partitions, cap, query))
    target = SinkTarget(app=app, query=query, host=server.host, port=server.port, prefix=PREFIX)
    return (sinks.record_sink(df, target, mode, str(checkpoint))  # type: ignore[arg-type]
            .trigger(processingTime=TRIGGER).start())


def target(server: RedisServer, app: str, query: str = "q") -> SinkTarget:
    return SinkTarget(app=app, query=query, host=server.host, port=server.port, prefix=PREFIX)


def arrived_all(client: redis.Redis, tgt: SinkTarget, mode: str, uids: list[str], query: Any):
    """Condition for wait_until: every uid arrived (re-raises a failed query's error at once)."""

    def check() -> bool:
        if query.exception() is not None:
            raise AssertionError(f"query failed: {query.exception()}")
        arrived = read_record_sink(client, tgt, mode)  # type: ignore[arg-type]
        return set(uids) <= set(arrived)

    return check


def rows_per_batch(query: Any) -> dict[int, int]:
    """numInputRows of every batch that ran (recentProgress also lists idle triggers)."""
    return {p["batchId"]: p["numInputRows"] for p in query.recentProgress if p["numInputRows"] > 0}


# ---------------------------------------------------------------------------------------------
# Tests


def test_split_cap_is_fair_and_bounded():
    assert split_cap([100, 100, 100], 30) == [10, 10, 10]
    assert split_cap([2, 100, 100], 30) == [2, 14, 14]  # the short one takes all it has
    assert split_cap([0, 5, 0], 30) == [0, 5, 0]
    assert sum(split_cap([7, 7, 7], 10)) == 10
    assert split_cap([7, 7, 7], 10, rotate=1) == [3, 4, 3]  # the odd record goes round


def test_three_streams_arrive_exactly_once_within_the_cap(spark, redis_server, tmp_path):
    client, app, cap = redis_server.client(), "once3", 25
    uids = produce(client, app, partitions=3, per_partition=30, run="r1")
    query = start_records(spark, redis_server, app, "idempotent", tmp_path / "ck", partitions=3, cap=cap)
    try:
        wait_until(arrived_all(client, target(redis_server, app), "idempotent", uids, query),
                   BATCH_TIMEOUT_S, "all 90 records at the sink")
        wait_until(lambda: sum(rows_per_batch(query).values()) == len(uids), 30, "progress of every batch")
        batches = rows_per_batch(query)
        # The source records its backlog when it plans a trigger: the figure after the last batch
        # appears on the next trigger, so wait for it while the query still runs.
        wait_until(lambda: read_source_status(client, PREFIX, app, "q").backlog == 0, 30,
                   "the source to record the empty backlog")
    finally:
        query.stop()

    result = compare_records(uids, read_record_sink(client, target(redis_server, app), "idempotent"))
    assert result.ok, result.summary()
    assert max(batches.values()) == cap, batches  # the cap bit: 90 records were waiting at the start
    assert all(rows <= cap for rows in batches.values()), batches
    assert len(batches) == 4  # 25 + 25 + 25 + 15
    status = read_source_status(client, PREFIX, app, "q")
    assert status.backlog == 0 and status.backlog_by_partition == [0, 0, 0]
    assert status.latest is not None and status.latest["counts"] == {"0": 30, "1": 30, "2": 30}
    assert status.processed == status.latest  # the query went idle after its last batch
    # Spark commits to the source one batch late; the committed offsets never run ahead.
    assert status.committed is not None and sum(status.committed["counts"].values()) <= len(uids)
    produce(client, app, partitions=3, per_partition=2, run="r2")
    assert live_backlog(client, PREFIX, app, "q", 3) == [2, 2, 2]


def test_pause_admits_nothing_and_backlog_counts_unread_entries(spark, redis_server, tmp_path):
    client, app, cap = redis_server.client(), "pause", 10
    tgt = target(redis_server, app)
    # 8 batches' worth: the pause must land while most of the input is still unread.
    uids = produce(client, app, partitions=2, per_partition=40, run="r1")
    query = start_records(spark, redis_server, app, "idempotent", tmp_path / "ck", partitions=2, cap=cap)
    try:
        wait_until(lambda: sum(read_record_sink(client, tgt, "idempotent").values()) >= cap,
                   BATCH_TIMEOUT_S, "the first batch at the sink")
        client.set(f"{PREFIX}{app}:paused", "1")
        # The source writes paused=1 from a latestOffset call that admitted nothing; every batch
        # admitted before it has finished by then (latestOffset runs only between batches).
        wait_until(lambda: read_source_status(client, PREFIX, app, "q").paused, 30, "the source to see the pause")
        seen = rows_per_batch(query)
        arrived_at_pause = sum(read_record_sink(client, tgt, "idempotent").values())
        assert 0 < arrived_at_pause < len(uids), "pause came too late to test anything"

        more = produce(client, app, partitions=2, per_partition=5, run="r2")  # arrive while paused
        backlog_times: set[float] = set()

        def polled_three_more_times() -> bool:
            status = read_source_status(client, PREFIX, app, "q")
            if status.backlog == len(uids) + len(more) - arrived_at_pause:
                backlog_times.add(status.backlog_at or 0.0)
            return len(backlog_times) >= 3

        wait_until(polled_three_more_times, 30, "three paused triggers that measured the new backlog")
        status = read_source_status(client, PREFIX, app, "q")
        assert status.paused
        assert status.backlog == len(uids) + len(more) - arrived_at_pause
        assert sum(status.backlog_by_partition) == status.backlog
        assert sum(read_record_sink(client, tgt, "idempotent").values()) == arrived_at_pause
        assert rows_per_batch(query) == seen  # no batch with rows ran while paused

        client.delete(f"{PREFIX}{app}:paused")
        wait_until(arrived_all(client, tgt, "idempotent", uids + more, query), BATCH_TIMEOUT_S,
                   "the rest after resuming")
        resumed = {b: n for b, n in rows_per_batch(query).items() if b not in seen}
    finally:
        query.stop()
    assert resumed and all(n <= cap for n in resumed.values()), resumed
    result = compare_records(uids + more, read_record_sink(client, tgt, "idempotent"))
    assert result.ok, result.summary()


def test_restart_from_checkpoint_loses_and_duplicates_nothing(spark, redis_server, tmp_path):
    client, app, cap = redis_server.client(), "restart", 10
    tgt = target(redis_server, app)
    uids = produce(client, app, partitions=2, per_partition=50, run="r1")  # 10 batches: stop well before
    first = start_records(spark, redis_server, app, "idempotent", tmp_path / "ck", partitions=2, cap=cap)
    try:
        wait_until(lambda: len(rows_per_batch(first)) >= 2, BATCH_TIMEOUT_S, "two batches before the stop")
    finally:
        first.stop()  # possibly in the middle of a batch: that one is redone after the restart
    before = read_record_sink(client, tgt, "idempotent")
    assert 0 < sum(before.values()) < len(uids)
    more = produce(client, app, partitions=2, per_partition=5, run="r2")

    second = start_records(spark, redis_server, app, "idempotent", tmp_path / "ck", partitions=2, cap=cap)
    try:
        wait_until(arrived_all(client, tgt, "idempotent", uids + more, second), BATCH_TIMEOUT_S,
                   "every record after the restart")
        resumed_batches = rows_per_batch(second)
    finally:
        second.stop()
    assert min(resumed_batches) >= max(rows_per_batch(first))  # the batch ids carried on
    result = compare_records(uids + more, read_record_sink(client, tgt, "idempotent"))
    assert result.ok, result.summary()
    expected = {r.uid for r in read_input_records(client, PREFIX, app)}
    assert expected == set(uids + more)


def _forget_last_commit(checkpoint: Path) -> int:
    """Delete the commit-log entry of the last batch: on restart Spark runs that batch again, as
    after a crash between the sink's write and the commit log."""
    commits = checkpoint / "commits"
    last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    (commits / str(last)).unlink()
    (commits / f".{last}.crc").unlink(missing_ok=True)
    return last


def test_rewritten_batch_duplicates_in_append_sink_only(spark, redis_server, tmp_path):
    client, app, cap = redis_server.client(), "rewrite", 10
    uids = produce(client, app, partitions=2, per_partition=10, run="r1")
    modes = {"idem": "idempotent", "app": "append"}

    def start_both() -> dict[str, Any]:
        return {q: start_records(spark, redis_server, app, mode, tmp_path / q, partitions=2, cap=cap, query=q)
                for q, mode in modes.items()}

    queries = start_both()
    try:
        for q, mode in modes.items():
            wait_until(arrived_all(client, target(redis_server, app, q), mode, uids, queries[q]),
                       BATCH_TIMEOUT_S, f"all records at the {mode} sink")
            # Progress is posted after the checkpoint's commit log entry; the sink's own commit
            # comes before it, so waiting on the sink alone could stop the query in between.
            wait_until(lambda q=q: 1 in rows_per_batch(queries[q]), 30, f"{q}: batch 1 in the commit log")
    finally:
        for query in queries.values():
            query.stop()
    for q, mode in modes.items():
        assert compare_records(uids, read_record_sink(client, target(redis_server, app, q), mode)).ok
        assert _forget_last_commit(tmp_path / q) == 1

    queries = start_both()
    try:
        for q in modes:
            wait_until(lambda q=q: client.hget(target(redis_server, app, q).meta_key, "commits") == "3",
                       BATCH_TIMEOUT_S, f"{q}: batch 1 written a second time")
    finally:
        for query in queries.values():
            query.stop()

    idempotent = compare_records(uids, read_record_sink(client, target(redis_server, app, "idem"), "idempotent"))
    append = compare_records(uids, read_record_sink(client, target(redis_server, app, "app"), "append"))
    assert idempotent.ok, idempotent.summary()
    assert client.hget(target(redis_server, app, "idem").meta_key, "rewrites") == "1"
    assert append.lost == 0
    assert append.duplicated == cap, append.summary()  # batch 1 held `cap` records, all again


def test_keyed_sink_counts_words_exactly_across_a_rewritten_batch(spark, redis_server, tmp_path):
    client, app = redis_server.client(), "keyed"
    produce(client, app, partitions=2, per_partition=15, run="r1")
    tgt = target(redis_server, app, "counts")
    expected: dict[str, int] = {}
    for record in read_input_records(client, PREFIX, app):
        for word in record.fields["line"].split(" "):
            expected[word] = expected.get(word, 0) + 1

    def start() -> Any:
        df = redis_source.read_stream(spark, source_options(redis_server, app, 2, cap=10, query="counts"))
        words = (df.select(F.explode(F.split("line", " ")).alias("key"))
                 .groupBy("key").count().withColumnRenamed("count", "value"))
        return sinks.keyed_sink(words, tgt, str(tmp_path / "ck"), "update").trigger(processingTime=TRIGGER).start()

    def settled(query: Any, commits: str) -> bool:
        if query.exception() is not None:
            raise AssertionError(f"query failed: {query.exception()}")
        return client.hget(tgt.meta_key, "commits") == commits

    query = start()
    try:
        wait_until(lambda: settled(query, "3"), BATCH_TIMEOUT_S, "three keyed batches (30 records, cap 10)")
        wait_until(lambda: 2 in rows_per_batch(query), 30, "batch 2 in the commit log")
    finally:
        query.stop()
    assert compare_keyed(expected, read_keyed_sink(client, tgt)).ok
    assert _forget_last_commit(tmp_path / "ck") == 2

    query = start()
    try:
        wait_until(lambda: settled(query, "4"), BATCH_TIMEOUT_S, "batch 2 written again")
    finally:
        query.stop()
    result = compare_keyed(expected, read_keyed_sink(client, tgt))
    assert result.ok, result.summary()
    assert client.hget(tgt.meta_key, "last_batch_id") == "2"
