"""The load generator against a real redis-server: totals, uniqueness, balance, rate tracking."""

from __future__ import annotations

import json
import threading
import uuid
from collections import Counter

import pytest

from sparkscale.config import Config, load_config
from sparkscale.protocol.keys import input_stream_key
from sparkscale.protocol.keys import loadgen_runs_key as runs_key
from sparkscale_lab.pipelines.loadgen import SecondReport, run_loadgen
from sparkscale_lab.pipelines.records import TAXI_FIELDS
from tests.conftest import wait_until

pytestmark = pytest.mark.integration


@pytest.fixture
def cfg(redis_server) -> Config:
    # A fresh key prefix per test: the session's Redis is shared with other tests.
    prefix = f"test-loadgen-{uuid.uuid4().hex[:8]}:"
    return load_config(None, [f"redis.port={redis_server.port}", f"redis.key_prefix='{prefix}'"])


def _run_entries(cfg: Config, client, app: str, run_id: str) -> list[list[dict[str, str]]]:
    """This run's entries, per partition."""
    partitions = []
    for i in range(cfg.app(app).source_partitions):
        entries = client.xrange(input_stream_key(cfg.redis.key_prefix, app, i))
        partitions.append([fields for _, fields in entries if fields["uid"].rsplit("-", 1)[0] == run_id])
    return partitions


def test_constant_rate_total_uniqueness_and_balance(cfg, redis_server):
    client = redis_server.client()
    summary = run_loadgen(cfg, "wordcount", "constant:2000@3s", seed=1)

    assert summary.stopped_by == "profile_end"
    assert summary.records_sent == pytest.approx(6000, rel=0.05)
    assert summary.target_records == 6000
    assert 2.9 < summary.duration_s < 3.5
    partitions = _run_entries(cfg, client, "wordcount", summary.run_id)
    entries = [fields for part in partitions for fields in part]
    assert len(entries) == summary.records_sent
    uids = [fields["uid"] for fields in entries]
    assert len(set(uids)) == len(uids)
    assert {int(uid.rsplit("-", 1)[1]) for uid in uids} == set(range(summary.records_sent))
    sizes = [len(part) for part in partitions]
    assert max(sizes) - min(sizes) <= 1
    assert sizes == summary.records_per_partition()
    for fields in entries:
        assert set(fields) == {"uid", "ts", "line"}
        assert summary.started_at_ms <= int(fields["ts"]) <= summary.ended_at_ms

    record = json.loads(client.hget(runs_key(cfg.redis.key_prefix, "wordcount"), summary.run_id))
    assert record["status"] == "finished"
    assert record["records_sent"] == summary.records_sent
    assert record["records_per_partition"] == sizes
    assert record["uid_format"] == "<run_id>-<seq>"


def test_steps_reports_follow_the_steps(cfg, redis_server):
    seen: list[SecondReport] = []
    summary = run_loadgen(cfg, "wordcount", "steps:1000@1s,3000@1s,500@1s", seed=2, on_second=seen.append)

    assert seen == summary.reports
    assert [r.second for r in seen] == [1, 2, 3]
    assert [r.target_rate_per_s for r in seen] == [1000, 3000, 500]
    for report in seen:
        assert report.achieved_rate_per_s == pytest.approx(report.target_rate_per_s, rel=0.1)
    assert seen[-1].sent_total == summary.records_sent == pytest.approx(4500, rel=0.05)


def test_two_runs_share_streams_with_distinct_run_ids(cfg, redis_server):
    client = redis_server.client()
    first = run_loadgen(cfg, "wordcount", "constant:500@0.5s")
    second = run_loadgen(cfg, "wordcount", "constant:500@0.5s")
    assert first.run_id != second.run_id
    runs = client.hgetall(runs_key(cfg.redis.key_prefix, "wordcount"))
    assert {first.run_id, second.run_id} <= set(runs)
    for summary in (first, second):
        entries = [f for part in _run_entries(cfg, client, "wordcount", summary.run_id) for f in part]
        assert len(entries) == summary.records_sent == 250


def test_stop_event_ends_an_unbounded_run(cfg, redis_server):
    stop = threading.Event()
    reports: list[SecondReport] = []
    result: list = []
    thread = threading.Thread(
        target=lambda: result.append(run_loadgen(cfg, "wordcount", "1000", stop=stop, on_second=reports.append))
    )
    thread.start()
    try:
        wait_until(lambda: reports, 10, "the first per-second report")
    finally:
        stop.set()
        thread.join(timeout=10)
    assert not thread.is_alive()
    summary = result[0]
    assert summary.stopped_by == "stop_event"
    assert summary.records_sent >= 1000
    assert summary.records_sent == summary.reports[-1].sent_total
    record = json.loads(redis_server.client().hget(runs_key(cfg.redis.key_prefix, "wordcount"), summary.run_id))
    assert record["status"] == "finished" and record["stopped_by"] == "stop_event"


def test_max_duration_cuts_the_profile_short(cfg, redis_server):
    summary = run_loadgen(cfg, "wordcount", "constant:1000@1m", max_duration_s=0.5)
    assert summary.stopped_by == "max_duration"
    assert summary.records_sent == summary.target_records == 500
    assert len(summary.reports) == 1 and summary.reports[0].interval_s == 0.5


@pytest.mark.parametrize(("pipeline", "fields"), [("dag", {"value", "key"}), ("taxi_top_routes", None)])
def test_other_workloads_write_their_fields(redis_server, pipeline, fields):
    prefix = f"test-loadgen-{uuid.uuid4().hex[:8]}:"
    cfg = load_config(
        None, [f"redis.port={redis_server.port}", f"redis.key_prefix='{prefix}'", f"apps.0.pipeline={pipeline}"]
    )
    summary = run_loadgen(cfg, "wordcount", "constant:400@0.5s")
    entries = [f for part in _run_entries(cfg, redis_server.client(), "wordcount", summary.run_id) for f in part]
    assert len(entries) == 200
    expected = fields if fields is not None else set(TAXI_FIELDS)
    assert all(set(f) == expected | {"uid", "ts"} for f in entries)
    assert len(Counter(f["uid"] for f in entries)) == 200


def test_bad_profile_and_unknown_app_fail_before_writing(cfg, redis_server):
    with pytest.raises(ValueError, match="bad load profile"):
        run_loadgen(cfg, "wordcount", "constant:fast")
    with pytest.raises(KeyError, match="nope"):
        run_loadgen(cfg, "nope", "1000@1s")
    assert not redis_server.client().exists(runs_key(cfg.redis.key_prefix, "wordcount"))
