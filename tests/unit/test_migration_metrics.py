"""The migration metrics that follow the query (Shukla & Simmhan §4): restore, catch-up, recovery and
rate stabilisation from a sequence of batches, each dated from the request (no servers)."""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

import pytest

from sparkscale.config import Config
from sparkscale.model.journal import Journal
from sparkscale.monitors.batch_points import BatchPoint, record_total
from sparkscale.monitors.migration_metrics import (
    HistoryReader,
    MigrationTimeline,
    arrived_at,
    first_output,
    follow_up,
    measure_after,
    stabilisation,
    timeline_of,
)
from sparkscale.monitors.progress_reports import ProgressReport
from sparkscale.protocol.keys import progress_history_key
from tests.unit.fake_redis import fake_redis

REQUEST = 100.3
RESUME = 109.9  # CCR: restarted at 109.8, resumed at 109.9


def timeline(**over) -> MigrationTimeline:
    base = {"requested_at_s": REQUEST, "new_run_id": "new", "old_run_id": "old", "new_run_since_s": 101.0,
            "released_at_s": RESUME, "input_at_request": 10030, "input_at_release": 10990}
    return MigrationTimeline(**{**base, **over})


def ccr_run(last_t: int = 190, positions: bool = True, backlog: bool = True) -> list[BatchPoint]:
    """Input 100 records/s from t=0 (position 100 t). The old run, short of cores, processed 90 per
    1 s batch (batch t: started at t, committed at t + 0.5) until t=100; paused at 100.4, stopped; the
    new run, capped at 200 per batch, runs from t=110 and works the backlog off by t=128."""
    points, processed = [], 0
    for t in range(0, 101):
        processed = 90 * t
        points.append((t, "old", 90 if t else 0, processed))
    for t in range(110, last_t + 1):
        rows = min(200, 100 * t - processed)
        processed += rows
        points.append((t, "new", rows, processed))
    return [BatchPoint(committed_at_s=t + 0.5, started_at_s=float(t), run_id=run, rows=rows,
                       processed_position=p if positions else None,
                       arrived_position=100 * t if positions else None,
                       backlog_records=100 * t - p if backlog else None, source_kinds=("redis_streams",))
            for t, run, rows, p in points]


def test_the_figures_follow_the_real_timeline_and_do_not_collapse_to_one_value():
    result = follow_up(timeline(), ccr_run(), tolerance=0.2, window_s=60)
    # First output: the new run's first batch (110.5).
    assert result.restore_s == pytest.approx(110.5 - REQUEST)
    # Arrived before the request: 10030; 9000 + 200 k >= 10030 at the 6th batch (t=115, out at 115.5).
    assert result.catch_up_s == pytest.approx(115.5 - REQUEST)
    # Arrived until the resume: 10990; reached at the 10th batch (t=119).
    assert result.recovery_s == pytest.approx(119.5 - REQUEST)
    # Output 200/s until 128.5, then 100/s = input: the 10 s rate is within 20 % from the window that
    # starts at 126.5, and stays so for 60 s.
    assert result.stabilization_s == pytest.approx(126.5 - REQUEST)
    assert result.stabilization_basis == "arrivals"
    assert result.complete and not result.not_measured
    assert result.restore_s < result.catch_up_s < result.recovery_s < result.stabilization_s


def test_stabilisation_needs_the_whole_window_and_the_follow_up_is_incomplete_until_then():
    short = follow_up(timeline(), ccr_run(last_t=150), tolerance=0.2, window_s=60)
    assert short.catch_up_s is not None and short.recovery_s is not None
    assert short.stabilization_s is None and not short.complete
    # A 20 s window is reached with the same batches, at the same start.
    assert follow_up(timeline(), ccr_run(last_t=150), 0.2, 20).stabilization_s == pytest.approx(126.5 - REQUEST)


def test_a_script_apps_positions_are_interpolated_from_its_sources_reports():
    """No app-wide input position in the journal: the sources' latest offsets give the same figures."""
    points = ccr_run()
    assert arrived_at(points, REQUEST) == 10030 and arrived_at(points, RESUME) == 10990
    assert arrived_at(points, 500.0) is None  # after the last report: not known yet
    result = follow_up(timeline(input_at_request=None, input_at_release=None), points, 0.2, 60)
    assert result.catch_up_s == pytest.approx(115.5 - REQUEST)
    assert result.recovery_s == pytest.approx(119.5 - REQUEST)


def test_sources_without_positions_give_no_catch_up_and_rate_stability_from_backlog_or_the_old_rate():
    with_backlog = follow_up(timeline(input_at_request=None, input_at_release=None),
                             ccr_run(positions=False), 0.2, 60)
    assert with_backlog.catch_up_s is None and with_backlog.recovery_s is None
    assert "no record positions" in with_backlog.not_measured["catch_up_s"]
    assert with_backlog.stabilization_basis == "backlog"
    # Output plus the backlog's change is the arrival rate again: the same window.
    assert with_backlog.stabilization_s == pytest.approx(126.5 - REQUEST)
    assert with_backlog.complete
    # Neither: the old run's output rate (90/s) is the expectation; 100/s is within 20 % of it, and
    # the 10 s rate is at most 108/s from the window that starts at 128.5 (whole batches: 127.7).
    blind = follow_up(timeline(input_at_request=None, input_at_release=None),
                      ccr_run(positions=False, backlog=False), 0.2, 60)
    assert blind.stabilization_basis == "pre_migration_output"
    assert blind.stabilization_s == pytest.approx(128.5 - REQUEST)
    assert follow_up(timeline(), ccr_run(positions=False, backlog=False), 0.05, 60).stabilization_s is None


def test_a_source_read_twice_in_one_query_stabilises_on_its_positions_not_its_doubled_rows():
    """Spark counts a source scanned twice (dag-star's two spokes read one source) twice in
    `numInputRows`: the output rate is the processed positions' rate, which its rows are not."""
    doubled = [replace(p, rows=2 * p.rows) for p in ccr_run()]
    assert follow_up(timeline(), doubled, 0.2, 60).stabilization_s == pytest.approx(126.5 - REQUEST)
    # Without positions the rows are all there is: twice the arrivals never stabilises.
    blind = [replace(p, processed_position=None) for p in doubled]
    assert stabilisation(blind, timeline(), 110.5, 0.2, 60).at_s is None


def test_the_first_outputs_burst_is_in_the_window_that_starts_with_it():
    """DCR-like: the old run kept up (100/s, 1 s batches) until t=100; the new run's first batch, at
    108.5, takes the 800 records that waited, then 100/s again. §4 (6) and Fig. 9: stabilisation
    is after restore, the first window that does not count the burst, not the first output itself."""
    old = [BatchPoint(t + 0.5, float(t), "old", 100, 100 * t, 100 * t, 0) for t in range(0, 101)]
    new = [BatchPoint(t + 0.5, float(t), "new", 100 * t - 10000 if t == 108 else 100, 100 * t, 100 * t, 0)
           for t in range(108, 200)]
    result = follow_up(timeline(), old + new, 0.2, 60)
    assert result.restore_s == pytest.approx(108.5 - REQUEST)
    assert result.stabilization_s == pytest.approx(109.5 - REQUEST)  # the next window on the 1 s grid


def test_output_below_the_input_rate_never_stabilises():
    points = [BatchPoint(t + 0.5, float(t), "new", 50, 50 * (t - 109), 100 * t, None) for t in range(110, 300)]
    result = stabilisation(points, timeline(), 110.5, 0.2, 60)
    assert result.at_s is None and result.basis == "arrivals"


def test_the_new_run_is_told_by_its_run_id_else_by_not_being_the_stopped_one():
    old_late = BatchPoint(101.2, 100.0, "old", 90, None, None, None)  # the old run's event, published late
    new = BatchPoint(109.0, 108.0, "x", 7, None, None, None)
    empty = BatchPoint(108.5, 108.0, "x", 0, None, None, None)
    assert first_output([new, old_late, empty], timeline(new_run_id="x")) is new
    assert first_output([new, old_late], timeline(new_run_id=None)) is new  # not "old", after the stop
    assert first_output([old_late], timeline(new_run_id=None, old_run_id=None)) is old_late  # time alone
    assert first_output([old_late], timeline(new_run_id=None, old_run_id=None, new_run_since_s=102.0)) is None


def journal(strategy: str = "ccr", **phases: float) -> Journal:
    j = Journal(id="mig-1", app="a", query="q", strategy=strategy, from_partitions=4, to_partitions=8,
                requested_at=REQUEST, by="t", epoch=3)
    j.phases.update(phases)
    return j


def test_the_timeline_releases_input_at_the_later_of_restart_and_resume():
    ccr = journal("ccr", requested=REQUEST, stopped=101.0, restarted=109.8, resumed=RESUME)
    ccr.marks.update(input_at_request=10030, input_at_restart=10980, input_at_resume=10990, run_id="new",
                     run_id_at_request="old")
    t = timeline_of(ccr)
    assert (t.released_at_s, t.input_at_release, t.new_run_since_s) == (RESUME, 10990, 101.0)
    assert (t.new_run_id, t.old_run_id, t.input_at_request) == ("new", "old", 10030)
    dsm = journal("dsm", requested=REQUEST, stopped=100.5, restarted=106.0)
    dsm.marks["input_at_restart"] = 10600  # DSM holds back what arrives while the query is down
    assert (timeline_of(dsm).released_at_s, timeline_of(dsm).input_at_release) == (106.0, 10600)


def history_entry(t: int, run: str, rows: int, processed: int) -> dict[str, str]:
    source = {"description": "redis_streams", "kind": "redis_streams", "num_input_rows": rows,
              "backlog_records": 100 * t - processed, "backlog_estimate": "source_offsets",
              "position_records": 100 * t}
    return {"batch_id": str(t), "run_id": run, "num_input_rows": str(rows), "published_at": repr(t + 0.5),
            "timestamp": "", "sources": json.dumps([source])}


def test_a_batch_point_reads_its_positions_from_the_source_reports():
    p = BatchPoint.from_report(ProgressReport.from_fields(history_entry(110, "new", 200, 9200)))
    assert (p.committed_at_s, p.run_id, p.rows) == (110.5, "new", 200)
    assert (p.arrived_position, p.processed_position, p.backlog_records) == (11000, 9200, 1800)
    # The end offsets count records by themselves: a source that reports no latest offset still has
    # a processed position (catch-up and recovery), not an arrived one.
    redis_end = {"description": "redis_streams", "kind": "redis_streams", "backlog_estimate": "unknown",
                 "end_offset": {"ids": {"0": "5-0", "1": "9-0"}, "counts": {"0": 4600, "1": 4600}}}
    fields = {**history_entry(110, "new", 200, 9200), "sources": json.dumps([redis_end])}
    r = BatchPoint.from_report(ProgressReport.from_fields(fields))
    assert (r.arrived_position, r.processed_position, r.backlog_records) == (None, 9200, None)
    # Without app-wide marks, a catch-up needs the arrival positions too: said at once, not waited for.
    later = [BatchPoint.from_report(ProgressReport.from_fields({**fields, "published_at": "111.5"}))]
    unknown = follow_up(timeline(input_at_request=None, input_at_release=None), [r, *later], 0.2, 60)
    assert "no latest offsets" in unknown.not_measured["catch_up_s"]
    assert record_total({"topic": {"0": 10, "1": 5}}) == 15 and record_total({"topic": {"0": -1}}) is None
    assert record_total({"logOffset": 3}) is None and record_total(None) is None
    file_source = {"description": "FileStreamSource[/in]", "kind": "file", "backlog_records": 40,
                   "backlog_estimate": "file_listing"}
    fields = {**history_entry(110, "new", 200, 9200), "sources": json.dumps([file_source])}
    f = BatchPoint.from_report(ProgressReport.from_fields(fields))
    assert (f.arrived_position, f.processed_position, f.backlog_records) == (None, None, 40)


def file_entry(t: int, run: str, files: int, processed: int) -> dict[str, str]:
    """A file source's report (positions in files, `agent.sources`): 10 files/s arrive, listed at the report."""
    arrived = 10 * t + 5
    source = {"description": "FileStreamSource[file:/in]", "kind": "file", "num_input_rows": 100 * files,
              "end_offset": {"logOffset": t}, "backlog_files": arrived - processed,
              "backlog_records": 100 * (arrived - processed), "backlog_estimate": "file_listing",
              "position_records": arrived, "position_unit": "files"}
    return {"batch_id": str(t), "run_id": run, "num_input_rows": str(100 * files), "published_at": repr(t + 0.5),
            "timestamp": f"1970-01-01T00:00:{t % 60:02d}Z", "sources": json.dumps([source])}


def test_a_file_sources_positions_in_files_give_catch_up_and_recovery():
    """The old run read 9 of 10 files a second until t=100; the new run, from t=110, 20 per batch."""
    entries = [file_entry(t, "old", 9 if t else 0, 9 * t) for t in range(0, 101)]
    entries += [file_entry(109 + k, "new", 20, 900 + 20 * k) for k in range(1, 40)]
    points = [BatchPoint.from_report(ProgressReport.from_fields(e)) for e in entries]
    p = points[50]
    assert (p.processed_position, p.arrived_position, p.backlog_records) == (450, 505, 55)
    assert p.started_at_s == p.committed_at_s == 50.5  # the listing is the report's, not the trigger's start
    result = follow_up(timeline(input_at_request=None, input_at_release=None), points, 0.2, 60)
    # Arrived at the request: 1000 + 10 x 0.8 = 1008 files, covered at 900 + 20 x 6 (t=115).
    assert result.catch_up_s == pytest.approx(115.5 - REQUEST)
    # Arrived at the resume: 1010 + 95 x 9.4 / 10 = 1099 (no report while stopped), covered at t=119.
    assert result.recovery_s == pytest.approx(119.5 - REQUEST)
    assert "catch_up_s" not in result.not_measured and "recovery_s" not in result.not_measured
    # A source without positions beside it leaves the point uncounted, as before.
    rate = {"description": "RateStreamV2", "kind": "rate", "backlog_estimate": "unknown"}
    mixed = {**file_entry(50, "old", 9, 450)}
    mixed["sources"] = json.dumps([*json.loads(mixed["sources"]), rate])
    m = BatchPoint.from_report(ProgressReport.from_fields(mixed))
    assert (m.processed_position, m.arrived_position) == (None, None)


def published(entries: list[dict[str, str]]) -> list[tuple[str, dict[str, str]]]:
    """Progress entries at the stream ids the agent's XADD gives them: `<ms>-0` of their published time."""
    return [(f"{int(float(e['published_at']) * 1000)}-0", e) for e in entries]


def test_the_history_reader_reads_each_entry_once():
    client = fake_redis(streams={"k": published([history_entry(t, "old", 90, 90 * t) for t in range(1, 4)])})
    reader = HistoryReader(client, "k", since_s=0.0)
    assert [p.committed_at_s for p in reader.read()] == [1.5, 2.5, 3.5]
    client.xadd("k", history_entry(4, "old", 90, 360), id="4500-0")
    assert [p.committed_at_s for p in reader.read()] == [1.5, 2.5, 3.5, 4.5]


def test_measure_after_reads_the_batches_from_before_the_request_and_says_what_it_did_not_reach():
    entries = ([history_entry(t, "old", 90 if t else 0, 90 * t) for t in range(0, 101)]
               + [history_entry(110 + k, "new", 200, 9200 + 200 * k) for k in range(0, 12)])
    j = journal("ccr", requested=REQUEST, stopped=101.0, restarted=109.8, resumed=RESUME)
    j.marks.update(input_at_request=10030, input_at_resume=10990, run_id="new", run_id_at_request="old",
                   replayed_records=0)
    cfg = Config.model_validate({"migration": {"measure_timeout_s": 0.05, "stable_window_s": 60}})
    client = fake_redis(streams={progress_history_key(cfg.redis.key_prefix, "a", j.query): published(entries)})
    figures = measure_after(cfg, SimpleNamespace(name="a"), client, j, sample_s=0.01)
    assert figures["restore_s"] == pytest.approx(110.5 - REQUEST)
    assert figures["catch_up_s"] == pytest.approx(115.5 - REQUEST)
    assert figures["recovery_s"] == pytest.approx(119.5 - REQUEST)
    assert figures["stabilization_s"] is None  # 12 batches of the new run: no 60 s window yet
    assert "stabilization_s: not reached within measure_timeout_s" in figures["not_measured"]
    assert figures["replayed_records"] == 0


def test_the_default_stable_window_is_the_papers_60_s():
    assert Config().migration.stable_window_s == 60.0
    assert Config().migration.stable_tolerance == 0.2
