"""The monitor's reading of the agent's idle samples (`idle=1` entries of a query's `:history` stream,
published on Spark's `QueryIdleEvent`): they give a known backlog, dated, and say the query is idle;
they are never batches (batch figures, rates, batch points); a bad one is a named error, skipped."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from structlog.testing import capture_logs

from sparkscale.daemon.status import query_view
from sparkscale.model.snapshot import Snapshot
from sparkscale.monitors.collector import progress_reports
from sparkscale.monitors.migration_metrics import HistoryReader
from sparkscale.monitors.progress_reports import BadIdleSample, ProgressReport
from sparkscale.monitors.snapshot_builder import Batch, SnapshotInputs, build_snapshot
from sparkscale.monitors.spark_rest import RestExecutor, RestStage, RestTask
from tests.unit.fake_redis import fake_redis
from tests.unit.test_migration_metrics import published

T = 1_800_000_000.0
KEY = "sparkscale:wc:progress:counts:history"


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def redis_source(start: int, end: int, latest: int, rows: int) -> dict:
    """A Redis streams source of one stream: offsets count records, backlog = latest - end."""
    return {"description": "redis", "kind": "redis_streams", "num_input_rows": rows,
            "start_offset": {"ids": {}, "counts": {"0": start}}, "end_offset": {"ids": {}, "counts": {"0": end}},
            "latest_offset": {"ids": {}, "counts": {"0": latest}}, "backlog_records": latest - end,
            "backlog_estimate": "source_offsets", "backlog_detail": "latest minus end offsets",
            "position_records": latest}


def batch_entry(batch: int, at: float, rows: int, duration_ms: float, source: dict, rate: float = 100.0) -> dict:
    """A batch's entry as Redis gives it back (every value a string)."""
    return {"query": "counts", "query_id": "qid", "run_id": "r", "batch_id": str(batch), "num_input_rows": str(rows),
            "input_rows_per_s": str(rate), "processed_rows_per_s": "150.0", "batch_duration_ms": str(duration_ms),
            "timestamp": iso(at), "published_at": str(at + duration_ms / 1000), "sources": json.dumps([source])}


def idle_entry(batch: int, at: float, source: dict, **extra: str) -> dict:
    """An idle sample as the agent writes it: the last batch's id, no rows, no duration, caught up."""
    return {"query": "counts", "query_id": "qid", "run_id": "r", "batch_id": str(batch), "idle": "1",
            "num_input_rows": "0", "timestamp": iso(at), "published_at": str(at + 0.01),
            "sources": json.dumps([source]), **extra}


def read(entries: list[dict]) -> list[ProgressReport]:
    """Through the collector's reader (entry ids `1-0`, `2-0`, ... in order)."""
    return progress_reports(KEY, [(f"{n}-0", e) for n, e in enumerate(entries, start=1)])


CAUGHT_UP = redis_source(1200, 1200, 1200, 0)
# Batches 4 and 5 read 1000 then 200 rows; 6 is a no-data batch (a stateful query's, for its
# watermark: jobs, a duration, no rows); then the query is idle and the agent samples it.
BATCHES = [batch_entry(4, T + 35, 1000, 1000, redis_source(0, 1000, 1100, 1000)),
           batch_entry(5, T + 40, 200, 1200, redis_source(1000, 1200, 1200, 200), rate=300.0),
           batch_entry(6, T + 45, 0, 300, redis_source(1200, 1200, 1200, 0), rate=0.0)]
IDLE = [idle_entry(6, T + 50, CAUGHT_UP), idle_entry(6, T + 55, CAUGHT_UP)]


def rest_batch(batch: int, start: float, duration_s: float, rows: int) -> tuple[Batch, list[RestStage]]:
    task = RestTask(task_id=batch, index=0, executor_id="1", status="SUCCESS", run_time_ms=duration_s * 800,
                    input_records=rows, shuffle_read_records=0, fetch_wait_ms=0.0, shuffle_write_records=rows,
                    output_records=0)
    stage = RestStage(stage_id=batch, attempt_id=0, status="COMPLETE", name=f"batch {batch}", num_tasks=1,
                      submitted_at_s=start, completed_at_s=start + duration_s, tasks=(task,))
    return Batch("r", batch, (batch,), (batch,), start, start + duration_s), [stage]


def snapshot(entries: list[dict], taken_at: float = T + 60, window_s: float = 30.0) -> Snapshot:
    jobs = [rest_batch(4, T + 35, 1.0, 1000), rest_batch(5, T + 40, 1.2, 200), rest_batch(6, T + 45, 0.3, 0)]
    executor = RestExecutor(id="1", host="h", cores=2, active=True, active_tasks=0, max_memory_bytes=1 << 30,
                            added_at_s=T)
    return build_snapshot(SnapshotInputs(
        app="wc", query="counts", taken_at=taken_at, window_s=window_s, executors=[executor],
        batches=[b for b, _ in jobs], stages={b.batch_id: stages for b, stages in jobs}, progress=read(entries),
        trigger_interval_s=1.0, host={}, app_figures={}))


def test_a_window_of_idle_samples_only_has_a_known_zero_backlog_and_no_batch():
    # 60 s after the input stopped: the window (T+90, T+120] holds idle samples only.
    entries = [idle_entry(0, T + t, CAUGHT_UP) for t in (95, 100, 105, 110, 115)]
    snap = snapshot(entries, taken_at=T + 120)
    source = snap.operator("source")
    assert source.backlog == 0  # known: not None ("backlog unknown")
    ext = snap.extensions["source"]
    assert ext["backlog_known"] is True and ext["backlog_estimate"] == "source_offsets"
    assert ext["idle"] is True and ext["idle_since_s"] == pytest.approx(T + 95)
    assert source.arrival_rate == 0 and ext["arrival_estimate"] == "position"  # positions 1200 -> 1200
    # No batch: none counted, no batch id taken from the samples (batch 0 would say the run began).
    assert snap.extensions["monitor"]["batches"] == []
    assert snap.extensions["progress"] == {"batches": 0, "num_input_rows": 0, "input_rows_per_s": None,
                                           "processed_rows_per_s": None}
    assert snap.batch_duration_s is None
    assert Snapshot.from_json(snap.to_json()) == snap  # a record the daemon keeps
    view = query_view(snap, 2)
    assert (view.backlog_records, view.idle) == (0, True)
    assert view.summary() == "counts: 0 rec/s (position), backlog 0 (source_offsets), idle, 2 partitions"


def test_a_mixed_window_has_the_batch_figures_it_has_without_its_idle_samples():
    plain, mixed = snapshot(BATCHES), snapshot(BATCHES + IDLE)
    for key in ("monitor", "progress"):
        assert mixed.extensions[key] == plain.extensions[key]
    assert plain.extensions["monitor"]["batches"] == [4, 5, 6]
    assert plain.extensions["progress"]["batches"] == 3 and plain.extensions["progress"]["latest_batch_id"] == 6
    # The no-data batch 6 keeps its own report (300 ms), not the later sample of the same id.
    assert mixed.batch_duration_s == plain.batch_duration_s == pytest.approx(1.0)
    assert mixed.operators[1:] == plain.operators[1:]
    assert mixed.operator("source").instances == plain.operator("source").instances
    # The samples date the backlog and the positions: caught up, and no input since batch 5's trigger.
    assert mixed.operator("source").backlog == 0
    assert mixed.extensions["source"]["idle"] is True and plain.extensions["source"]["idle"] is False
    assert mixed.extensions["source"]["idle_since_s"] == pytest.approx(T + 50)
    assert "idle_since_s" not in plain.extensions["source"]
    # Positions 1100 at T+35 -> 1200 at T+55 (the last sample): 100 over 20 s, not over 10 s.
    assert mixed.operator("source").arrival_rate == pytest.approx(100 / 20)
    # A batch after the samples: no longer idle.
    later = batch_entry(7, T + 57, 50, 500, redis_source(1200, 1250, 1250, 50))
    assert snapshot([*BATCHES, *IDLE, later]).extensions["source"]["idle"] is False


def test_idle_samples_are_not_averaged_as_input_rates():
    # A source that tells neither positions nor backlog: the rate is the batches' mean input rate.
    other = {"description": "custom", "kind": "other", "backlog_estimate": "unknown",
             "backlog_detail": "other source reports no backlog"}
    batches = [batch_entry(4, T + 35, 100, 1000, other, rate=100.0),
               batch_entry(5, T + 40, 300, 1000, other, rate=300.0)]
    idle = [idle_entry(5, T + t, other, input_rows_per_s="0.0") for t in (45, 50, 55)]
    snap = snapshot(batches + idle)
    assert snap.operator("source").arrival_rate == pytest.approx(200.0)  # (100 + 300) / 2, not / 5
    assert snap.operator("source").backlog is None  # an idle trigger does not make it knowable
    only_idle = snapshot(idle, taken_at=T + 70)
    assert only_idle.operator("source").arrival_rate == 0
    assert only_idle.extensions["source"]["arrival_detail"].startswith("idle: 3 idle samples")


def test_the_migration_metrics_read_no_batch_point_from_an_idle_sample():
    points = HistoryReader(fake_redis(streams={KEY: published(BATCHES + IDLE)}), KEY, since_s=0.0).read()
    assert [p.committed_at_s for p in points] == pytest.approx([T + 36, T + 41.2, T + 45.3])
    assert [p.rows for p in points] == [1000, 200, 0]


@pytest.mark.parametrize(("change", "field"), [
    ({"idle": "yes"}, "idle"),
    ({"num_input_rows": "5"}, "num_input_rows"),
    ({"batch_duration_ms": "300"}, "batch_duration_ms"),
    ({"timestamp": "soon", "published_at": ""}, "timestamp"),
    ({"sources": ""}, "sources"),
    ({"sources": "[{"}, "sources"),
    ({"sources": json.dumps([{"kind": "redis_streams", "backlog_records": "many"}])}, "sources"),
    ({"batch_id": "six"}, "fields"),
])
def test_a_bad_idle_sample_is_a_named_error_and_skipped(change, field):
    bad = {**idle_entry(6, T + 50, CAUGHT_UP), **change}
    with pytest.raises(BadIdleSample) as raised:
        ProgressReport.from_fields(bad)
    assert raised.value.field == field
    with capture_logs() as events:
        reports = read([*BATCHES, bad, IDLE[1]])
    assert [(r.batch_id, r.idle) for r in reports] == [(4, False), (5, False), (6, False), (6, True)]
    (event,) = [e for e in events if e["event"] == "monitor.bad_progress_entry"]
    assert event["problem"] == "BadIdleSample" and event["entry"] == "4-0"
    assert event["error"].startswith(f"idle sample: {field}")


def test_an_entry_without_the_mark_is_a_batch_as_before():
    (report,) = read([BATCHES[0]])
    assert report.idle is False and report.batch_duration_ms == 1000
    assert ProgressReport.from_fields({**BATCHES[0], "idle": "0"}).idle is False
