"""The virtual source operator from fake progress histories of any source: Redis streams positions,
Kafka offsets, a file source's backlog from its listing, and a source that tells nothing."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from sparkscale.config import AppConfig, PolicyConfig
from sparkscale.model.snapshot import OperatorFigures, Snapshot
from sparkscale.monitors.progress_reports import ProgressReport, parse_progress_time
from sparkscale.monitors.source_figures import (
    InstanceKey,
    WindowBatch,
    estimate_sources,
    partition_positions,
    partition_rows,
)
from sparkscale.policies.base import get_policy
from sparkscale.policies.dhalion import detect
from sparkscale.policies.figures import load_figures
from sparkscale.policies.history import DecisionHistory
from sparkscale.policies.outcomes import keeps_up
from sparkscale.policies.threshold import metrics_of
from sparkscale.protocol.queries import SourceReport

TAKEN_AT = 120.0
WINDOW_S = 30.0


def report(batch: int, at_s: float, rows: int, *sources: SourceReport, rate: float | None = None) -> ProgressReport:
    return ProgressReport(batch_id=batch, run_id="run", num_input_rows=rows, input_rows_per_s=rate,
                          published_at_s=at_s, sources=sources)


def kafka(start: dict | None, end: dict, latest: dict, rows: int) -> SourceReport:
    behind = sum(latest["t"][p] - end["t"][p] for p in end["t"])
    return SourceReport("KafkaV2[Subscribe[t]]", "kafka", num_input_rows=rows, start_offset=start, end_offset=end,
                        latest_offset=latest, backlog_records=behind, backlog_estimate="source_metrics",
                        position_records=sum(latest["t"].values()))


def estimate(reports: list[ProgressReport], used: list[ProgressReport] | None = None):
    used = [r for r in reports if r.num_input_rows] if used is None else used
    return estimate_sources([WindowBatch(r) for r in used], reports, TAKEN_AT, WINDOW_S)


# -- offsets ---------------------------------------------------------------------------------------


def test_partition_positions_of_redis_streams_and_kafka_offsets():
    assert partition_positions({"ids": {"0": "1-1"}, "counts": {"0": 5, "1": 7}}) == {"0": 5, "1": 7}
    assert partition_positions('{"t": {"0": 10, "1": 12}, "u": {"0": 3}}') == {"t/0": 10, "t/1": 12, "u/0": 3}
    assert partition_positions({"logOffset": 4}) is None  # the file source: no partitions
    assert partition_positions(12) is None and partition_positions("None") is None
    assert partition_positions({}) is None


def test_a_file_listings_backlog_counts_from_when_the_agent_listed_not_from_the_triggers_start():
    """Issue 33 (clicks-file): a 2 s batch then an 8 s one, each dated at its trigger's start,
    put the 8 s batch's landed files over 2 s (240/s where 60/s arrived)."""
    def files(rows: int, backlog: int) -> SourceReport:
        return SourceReport("FileStreamSource[/in]", "file", num_input_rows=rows, backlog_records=backlog,
                            backlog_estimate="file_listing")

    def timed(batch: int, trigger_s: float, published_s: float, rows: int, backlog: int) -> ProgressReport:
        start = datetime.fromtimestamp(trigger_s, UTC).isoformat()
        return ProgressReport(batch_id=batch, run_id="run", num_input_rows=rows, timestamp=start,
                              published_at_s=published_s, sources=(files(rows, backlog),))

    short, long = timed(1, 100.0, 102.0, 120, 60), timed(2, 102.0, 110.0, 60, 480)
    assert (short.at_s, short.backlog_at_s) == (pytest.approx(100.0), 102.0)
    est = estimate([short, long])
    assert est.arrival_estimate == "processed_plus_backlog_change"
    assert est.arrival_rate == pytest.approx((60 + 480 - 60) / 8)  # 60/s; over the trigger starts: 240/s
    # A source's offsets are asked at the trigger's start: its backlog is dated there.
    offsets = replace(long, sources=(replace(long.sources[0], backlog_estimate="source_offsets"),))
    assert offsets.backlog_at_s == offsets.at_s == pytest.approx(102.0)


def test_rows_of_a_first_batch_without_start_offset():
    # Redis streams read from their start: the end positions are the rows read.
    src = SourceReport("s", "redis_streams", num_input_rows=12, start_offset="None",
                       end_offset={"counts": {"0": 5, "1": 7}})
    assert partition_rows(src) == {"0": 5, "1": 7}
    # Kafka from the latest offsets: the end positions say nothing about the rows: the split is unknown.
    src = SourceReport("k", "kafka", num_input_rows=40, end_offset={"t": {"0": 500, "1": 700}})
    assert partition_rows(src) is None
    est = estimate([report(0, 100, 40, src, rate=4.0)])
    assert dict(est.instances) == {InstanceKey(0, "t/0"): 20, InstanceKey(0, "t/1"): 20}


def test_progress_report_fields_and_time():
    fields = {"batch_id": "3", "run_id": "r", "num_input_rows": "10", "timestamp": "2026-11-22T05:10:48.319Z",
              "published_at": "1795324250.7", "sources": json.dumps([{
                  "description": "d", "kind": "kafka", "backlog_records": None, "position_records": 9,
                  "unknown_field": 1}])}
    r = ProgressReport.from_fields(fields)
    assert r.at_s == pytest.approx(parse_progress_time("2026-11-22T05:10:48.319GMT"))
    assert r.at_s == pytest.approx(1795324248.319)
    (src,) = r.sources
    assert (src.kind, src.backlog_records, src.position_records) == ("kafka", None, 9)
    assert ProgressReport.from_fields({**fields, "timestamp": ""}).at_s == pytest.approx(1795324250.7)


# -- one kind of source each -----------------------------------------------------------------------


def test_redis_streams_positions_give_the_arrival_rate_exactly():
    def redis(start: tuple[int, int], end: tuple[int, int], position: int, backlog: int) -> SourceReport:
        return SourceReport("redis", "redis_streams", num_input_rows=sum(end) - sum(start),
                            start_offset={"ids": {}, "counts": {"0": start[0], "1": start[1]}},
                            end_offset={"ids": {}, "counts": {"0": end[0], "1": end[1]}},
                            backlog_records=backlog, backlog_estimate="source_metrics",
                            backlog_detail=f"{backlog} entries after the last batch", position_records=position)

    reports = [
        report(4, 85.0, 100, redis((0, 0), (50, 50), 150, 50)),  # before the window
        report(5, 95.0, 200, redis((50, 50), (150, 150), 2150, 1850)),
        report(6, 105.0, 300, redis((150, 150), (300, 300), 4150, 3550)),
        report(6, 115.0, 0, redis((300, 300), (300, 300), 6150, 5550)),  # idle sample
    ]
    est = estimate(reports, used=reports[1:3])
    assert est.arrival_estimate == "position"
    assert est.arrival_rate == pytest.approx((6150 - 2150) / 20)
    # The latest report's 5550, brought forward to the snapshot's time: + 200 rec/s x (120 - 115) s.
    assert est.backlog_stated_records == 5550 and est.backlog_age_s == pytest.approx(TAKEN_AT - 115.0)
    assert est.backlog_records == pytest.approx(5550 + est.arrival_rate * (TAKEN_AT - 115.0))
    assert est.backlog_estimate == "source_metrics"
    assert dict(est.instances) == {InstanceKey(0, "0"): 250, InstanceKey(0, "1"): 250}
    ext = est.extension()
    assert ext["backlog_known"] is True and "note" not in ext
    assert ext["sources"] == [{"kind": "redis_streams", "description": "redis", "backlog_records": 5550,
                               "backlog_estimate": "source_metrics", "detail": "5550 entries after the last batch"}]


def test_kafka_offsets_give_partitions_positions_and_backlog():
    b1 = kafka({"t": {"0": 1000, "1": 2000}}, {"t": {"0": 1100, "1": 2050}}, {"t": {"0": 1200, "1": 2100}}, 150)
    b2 = kafka({"t": {"0": 1100, "1": 2050}}, {"t": {"0": 1250, "1": 2110}}, {"t": {"0": 1300, "1": 2150}}, 210)
    idle = kafka({"t": {"0": 1250, "1": 2110}}, {"t": {"0": 1250, "1": 2110}}, {"t": {"0": 1340, "1": 2180}}, 0)
    est = estimate([report(1, 100.0, 150, b1), report(2, 110.0, 210, b2), report(2, 118.0, 0, idle)])
    assert dict(est.instances) == {InstanceKey(0, "t/0"): 100 + 150, InstanceKey(0, "t/1"): 50 + 60}
    assert est.arrival_estimate == "position"
    assert est.arrival_rate == pytest.approx((3520 - 3300) / 18)
    stated = (1340 - 1250) + (2180 - 2110)  # latest minus end offsets, asked at 118 s
    assert est.backlog_stated_records == stated
    assert est.backlog_records == pytest.approx(stated + est.arrival_rate * (TAKEN_AT - 118.0), abs=0.05)  # a tenth
    assert est.backlog_estimate == "source_metrics"


def test_file_source_backlog_from_listing_gives_processed_plus_backlog_change():
    def files(rows: int, start: int, end: int, backlog: int) -> SourceReport:
        return SourceReport("FileStreamSource[/in]", "file", num_input_rows=rows, start_offset={"logOffset": start},
                            end_offset={"logOffset": end}, backlog_records=backlog, backlog_files=backlog // 100,
                            backlog_estimate="file_listing", backlog_detail=f"{backlog // 100} files x 100 rows")

    reports = [report(1, 100.0, 200, files(200, 0, 2, 400), rate=10.0),
               report(2, 105.0, 100, files(100, 2, 3, 500), rate=10.0),
               report(3, 115.0, 300, files(300, 3, 6, 300), rate=10.0)]
    est = estimate(reports)
    assert est.instances == ((InstanceKey(0), 600),)  # no partitions: one instance for the source
    # 100 + 300 rows taken in after the first report, backlog 400 -> 300, over 15 s.
    assert est.arrival_estimate == "processed_plus_backlog_change"
    assert est.arrival_rate == pytest.approx((400 + 300 - 400) / 15)
    # The listing's 300 (dated as the agent published it, 115 s), + 20 rec/s x 5 s since.
    assert est.backlog_records == pytest.approx(300 + 20.0 * (TAKEN_AT - 115.0))
    assert est.backlog_estimate == "file_listing" and est.extension()["backlog_stated_records"] == 300
    assert est.extension()["sources"][0]["detail"] == "3 files x 100 rows"
    # With positions counted in files (for the migration metrics), the rate is still one of records.
    counted = [report(r.batch_id, r.at_s, r.num_input_rows, replace(r.sources[0], position_records=10 + i,
                                                                   position_unit="files"), rate=10.0)
               for i, r in enumerate(reports)]
    again = estimate(counted)
    assert (again.arrival_estimate, again.arrival_rate) == (est.arrival_estimate, est.arrival_rate)


def test_a_source_that_tells_nothing_leaves_the_backlog_unknown():
    rate = SourceReport("RateStreamV2[rowsPerSecond=50]", "rate", num_input_rows=50, start_offset=10, end_offset=11)
    est = estimate([report(1, 100.0, 40, rate, rate=40.0), report(2, 110.0, 60, rate, rate=60.0)])
    assert est.backlog_records is None and not est.backlog_known and est.backlog_estimate == "unknown"
    assert est.arrival_estimate == "input_rate" and est.arrival_rate == pytest.approx(50.0)
    assert est.instances == ((InstanceKey(0), 100),)
    ext = est.extension()
    assert ext["backlog_known"] is False and ext["backlog_estimate"] == "unknown"
    assert ext["note"].startswith("backlog unknown: rate report no backlog")
    assert ext["sources"][0]["backlog_estimate"] == "unknown"


def test_no_report_at_all():
    est = estimate_sources([], [], TAKEN_AT, WINDOW_S)
    assert est.instances == ((InstanceKey(0), 0),)
    assert (est.arrival_rate, est.arrival_estimate, est.backlog_records) == (0.0, "input_rate", None)


def test_two_sources_one_without_backlog():
    b1 = kafka({"t": {"0": 0}}, {"t": {"0": 10}}, {"t": {"0": 15}}, 10)
    other = SourceReport("memory", "other", num_input_rows=5)
    est = estimate([report(1, 100.0, 15, b1, other, rate=3.0), report(2, 110.0, 15, b1, other, rate=5.0)])
    assert [k for k, _rows in est.instances] == [InstanceKey(0, "t/0"), InstanceKey(1)]
    assert dict(est.instances)[InstanceKey(1)] == 10
    assert est.backlog_records is None and est.arrival_estimate == "input_rate"
    assert [s["kind"] for s in est.extension()["sources"]] == ["kafka", "other"]


# -- unknown backlog through the snapshot and the policies ------------------------------------------


def unknown_backlog_snapshot() -> Snapshot:
    return Snapshot(
        app="a", query="q", taken_at=TAKEN_AT, window_s=WINDOW_S, executors=(), trigger_interval_s=1.0,
        batch_duration_s=0.5,
        operators=(OperatorFigures("source", 1, (), source=True, arrival_rate=10.0, backlog=None),
                   OperatorFigures("stage0", 1, ())),
        edges=(("source", "stage0"),))


def test_snapshot_keeps_an_unknown_backlog_through_json():
    snap = unknown_backlog_snapshot()
    data = snap.to_dict()
    assert data["operators"][0]["backlog_known"] is False and "backlog" not in data["operators"][0]
    back = Snapshot.from_json(snap.to_json())
    assert back == snap and back.operators[0].backlog is None
    # A missing backlog still means 0, as it always has.
    del data["operators"][0]["backlog_known"]
    assert Snapshot.from_dict(data).operators[0].backlog == 0


def test_policies_cope_with_an_unknown_backlog():
    snap = unknown_backlog_snapshot()
    app = AppConfig(name="a")
    plan = get_policy("ds2").decide(snap, DecisionHistory.empty(), PolicyConfig(), app)
    assert any("backlog unknown" in line for line in plan.explanation)
    assert metrics_of(snap, app)["backlog"] is None
    figures = load_figures(snap, app)
    assert not figures.backlog_known and detect(snap, DecisionHistory.empty(),
                                                PolicyConfig().section("dhalion"), app).backpressure is None
    dhalion = get_policy("dhalion").decide(snap, DecisionHistory.empty(), PolicyConfig(), app)
    assert dhalion.observation.figure("backlog") is None
    assert any("backlog unknown" in line for line in dhalion.explanation)
    assert keeps_up(snap, app, backlog_before=0.0)  # batches fit their trigger


def test_a_backlog_asked_at_the_triggers_start_is_brought_forward_to_the_snapshots_time():
    # A source with no rate limit: each batch takes all there is when its trigger starts, so its
    # offsets state no backlog at any report while the query falls behind (dag-linear, issue 33).
    # 60 rec/s arrive; batches started at 100 s and 110 s (10 s batches, back to back).
    b1 = kafka({"t": {"0": 0}}, {"t": {"0": 600}}, {"t": {"0": 600}}, 600)
    b2 = kafka({"t": {"0": 600}}, {"t": {"0": 1200}}, {"t": {"0": 1200}}, 600)
    reports = [report(1, 100.0, 600, b1), report(2, 110.0, 600, b2)]
    est = estimate(reports)
    assert est.arrival_rate == pytest.approx(60.0)  # positions 600 -> 1200 over 10 s
    assert est.backlog_stated_records == 0
    # What arrived since the latest trigger's start waits: 60 rec/s x (120 - 110) s.
    assert est.backlog_records == pytest.approx(600.0) and est.backlog_age_s == pytest.approx(10.0)
    assert est.extension()["backlog_age_s"] == pytest.approx(10.0)
    # An idle sample found no new data at its time: its backlog is not brought forward.
    idle = replace(report(2, 118.0, 0, kafka({"t": {"0": 1200}}, {"t": {"0": 1200}}, {"t": {"0": 1200}}, 0)),
                   idle=True)
    caught_up = estimate([*reports, idle])
    assert caught_up.backlog_records == 0 and caught_up.backlog_age_s == 0
    assert "backlog_age_s" not in caught_up.extension()
