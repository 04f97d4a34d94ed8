"""The agent's idle samples: on Spark's `QueryIdleEvent` the listener adds a sample to the query's
`:history` stream (caught up: end = latest offset, backlog 0, no rows), at most one per query every
few seconds, only after a batch of the same run it published and not while the sources are paused;
it never raises. Events are PySpark's own, built as Spark emits them (no JVM); Redis is fakeredis."""

from __future__ import annotations

import json
import uuid
from typing import Any

import fakeredis
import pytest
from pyspark.sql.streaming.listener import QueryIdleEvent, QueryProgressEvent, StreamingQueryProgress
from structlog.testing import capture_logs

from sparkscale.agent.idle_samples import IdleSampler, LastBatch, idle_source
from sparkscale.agent.progress import ProgressPublisher
from sparkscale.monitors.progress_reports import ProgressReport, parse_progress_time
from sparkscale.protocol.keys import paused_key, progress_history_key, progress_key
from sparkscale.protocol.queries import SourceReport
from tests.unit.fake_redis import fake_redis

PREFIX, APP = "sparkscale:", "wc"
QUERY_ID, RUN_ID = uuid.UUID("6a1f2c3e-0000-4000-8000-000000000001"), uuid.UUID("6a1f2c3e-0000-4000-8000-000000000002")
HISTORY, HASH = progress_history_key(PREFIX, APP, "counts"), progress_key(PREFIX, APP, "counts")


def offsets(count: int) -> str:
    return json.dumps({"ids": {"0": f"{count}-0"}, "counts": {"0": count}})


def progress_event(batch: int, start: int, end: int, latest: int, run_id: uuid.UUID = RUN_ID) -> QueryProgressEvent:
    """A batch of `counts` over one Redis stream: read (start, end], `latest` arrived by its trigger."""
    return QueryProgressEvent(StreamingQueryProgress.fromJson({
        "id": str(QUERY_ID), "runId": str(run_id), "name": "counts", "timestamp": "2030-01-01T00:00:10.000Z",
        "batchId": batch, "batchDuration": 800, "durationMs": {"triggerExecution": 800}, "stateOperators": [],
        "sources": [{"description": "RedisStreams[wc]", "startOffset": offsets(start), "endOffset": offsets(end),
                     "latestOffset": offsets(latest), "numInputRows": end - start, "inputRowsPerSecond": 50.0,
                     "processedRowsPerSecond": 60.0}],
        "sink": {"description": "sink", "numOutputRows": end - start},
        "numInputRows": end - start, "inputRowsPerSecond": 50.0, "processedRowsPerSecond": 60.0,
    }))


def idle_event(at: str = "2030-01-01T00:00:20.000Z", run_id: uuid.UUID = RUN_ID) -> QueryIdleEvent:
    return QueryIdleEvent(id=QUERY_ID, runId=run_id, timestamp=at)


@pytest.fixture
def world():
    """A publisher over fakeredis whose idle sampler runs on a clock the test moves."""
    client, now = fake_redis(), [100.0]
    publisher = ProgressPublisher(client, PREFIX, APP)
    publisher.idle = IdleSampler(every_s=5.0, clock=lambda: now[0])
    return client, publisher, now


def history(client: fakeredis.FakeRedis) -> list[dict[str, str]]:
    return [fields for _id, fields in client.xrange(HISTORY)]


def idle_entries(client: fakeredis.FakeRedis) -> list[dict[str, str]]:
    return [e for e in history(client) if e.get("idle") == "1"]


def test_an_idle_event_publishes_a_caught_up_sample_to_the_history_only(world):
    client, publisher, _ = world
    publisher.onQueryProgress(progress_event(7, 1000, 1200, 1250))  # 50 behind at the batch's trigger
    last_batch = client.hgetall(HASH)
    publisher.onQueryIdle(idle_event())
    (entry,) = idle_entries(client)
    assert client.hgetall(HASH) == last_batch  # the hash stays the last batch's
    assert len(history(client)) == 2
    sample = ProgressReport.from_fields(entry)  # as the monitor reads it
    assert (sample.idle, sample.batch_id, sample.run_id, sample.num_input_rows) == (True, 7, str(RUN_ID), 0)
    assert sample.batch_duration_ms is None and sample.input_rows_per_s is None
    assert sample.at_s == parse_progress_time("2030-01-01T00:00:20.000Z")
    (source,) = sample.sources
    assert (source.backlog_records, source.backlog_estimate, source.kind) == (0, "source_offsets", "redis_streams")
    assert source.start_offset == source.end_offset == source.latest_offset == json.loads(offsets(1200))
    assert source.position_records == 1200 and source.num_input_rows == 0
    batch = ProgressReport.from_fields(history(client)[0])
    assert batch.idle is False and batch.sources[0].backlog_records == 50


def test_idle_samples_are_rate_limited_per_query_and_a_batch_resets_the_limit(world):
    client, publisher, now = world
    publisher.onQueryProgress(progress_event(7, 1000, 1200, 1200))
    for t in (100.0, 101.0, 102.0, 104.9):  # Spark may post one every trigger
        now[0] = t
        publisher.onQueryIdle(idle_event())
    assert len(idle_entries(client)) == 1
    now[0] = 105.0
    publisher.onQueryIdle(idle_event())
    assert len(idle_entries(client)) == 2
    now[0] = 106.0
    publisher.onQueryProgress(progress_event(8, 1200, 1300, 1300))  # input came: the next idle is news
    publisher.onQueryIdle(idle_event())
    assert len(idle_entries(client)) == 3 and idle_entries(client)[-1]["batch_id"] == "8"


def test_no_sample_without_a_batch_of_the_same_run_or_while_the_sources_are_paused(world):
    client, publisher, _ = world
    publisher.onQueryIdle(idle_event())  # nothing published of this query: its sources are unknown
    assert idle_entries(client) == []
    publisher.onQueryProgress(progress_event(7, 1000, 1200, 1200))
    publisher.onQueryIdle(idle_event(run_id=uuid.uuid4()))  # a restarted run: its positions are not known
    assert idle_entries(client) == []
    client.set(paused_key(PREFIX, APP), "1")  # the source admits nothing: idle with input waiting
    publisher.onQueryIdle(idle_event())
    assert idle_entries(client) == []
    client.delete(paused_key(PREFIX, APP))
    publisher.onQueryIdle(idle_event())
    assert len(idle_entries(client)) == 1


def test_a_failing_redis_is_logged_never_raised(world):
    client, publisher, _ = world
    publisher.onQueryProgress(progress_event(7, 1000, 1200, 1200))

    def down(*args: Any, **kwargs: Any) -> None:
        raise ConnectionError("redis is down")

    client.xadd = down
    with capture_logs() as events:
        publisher.onQueryIdle(idle_event())  # Spark drops a listener that raises
    assert [e["event"] for e in events] == ["agent.idle_publish_failed"]
    del client.xadd
    publisher.onQueryIdle(idle_event())  # not counted as sent: the next event samples
    assert len(idle_entries(client)) == 1


def test_each_kind_of_source_at_an_idle_trigger():
    kafka = SourceReport("KafkaV2[Subscribe[t]]", "kafka", num_input_rows=60, start_offset={"t": {"0": 1190}},
                         end_offset={"t": {"0": 1250}}, latest_offset={"t": {"0": 1340}}, backlog_records=90,
                         backlog_estimate="source_offsets", position_records=1340,
                         metrics={"avgOffsetsBehindLatest": "90.0"})
    k = idle_source(kafka, 3)
    assert (k.start_offset, k.latest_offset, k.backlog_records, k.position_records) == (
        {"t": {"0": 1250}}, {"t": {"0": 1250}}, 0, 1250)
    assert k.metrics == {} and k.num_input_rows == 0 and "idle trigger after batch 3" in k.backlog_detail
    # A file source whose rows per file were not seen yet: its listing still counts files.
    files = SourceReport("FileStreamSource[/in]", "file", num_input_rows=0, end_offset={"logOffset": 4},
                         backlog_files=2, backlog_estimate="unknown", position_records=12, position_unit="files")
    f = idle_source(files, 4)
    assert (f.backlog_records, f.backlog_files, f.backlog_estimate, f.position_records, f.latest_offset) == (
        0, 0, "file_listing", 10, None)
    # A source that reports no backlog says nothing more when idle.
    socket = SourceReport("TextSocketV2[localhost:9999]", "socket", num_input_rows=5, backlog_estimate="unknown",
                          backlog_detail="socket source reports no backlog")
    s = idle_source(socket, 1)
    assert (s.backlog_records, s.backlog_estimate, s.backlog_detail) == (
        None, "unknown", "socket source reports no backlog")


def test_a_query_whose_last_batch_has_no_sources_gets_no_sample():
    sampler = IdleSampler(clock=lambda: 0.0)
    sampler.published(LastBatch("q", "id", "run", 1, ()))
    assert sampler.due("id", "run") is None
    sampler.published(LastBatch("q", "id", "run", 2, (SourceReport("d", "other"),)))
    assert sampler.due("id", "run") is not None
