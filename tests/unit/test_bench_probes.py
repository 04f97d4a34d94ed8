"""What a scaling benchmark's sample reads (bench.probes) from hand-made progress reports, stream
entries and checkpoint logs, over fakeredis; and the clickstream output's differences counted as
records (bench.scaling_workloads)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from sparkscale.config import AppConfig, load_config
from sparkscale.monitors.progress_reports import ProgressReport
from sparkscale.protocol.keys import input_stream_key, progress_history_key, progress_key
from sparkscale.protocol.queries import QueryInfo, queries_key
from sparkscale_lab.bench.clickcheck import ClickCheck
from sparkscale_lab.bench.clickexpected import Expected
from sparkscale_lab.bench.probes import (
    FileProbe,
    LatencyTracker,
    latency_ms,
    oldest_file_landed_s,
    oldest_stream_arrival_s,
    stated_backlog,
)
from sparkscale_lab.bench.scaling_workloads import click_record_losses
from tests.unit.fake_redis import fake_redis

T0 = 1_800_000_000.0  # epoch seconds of the hand-made reports


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def report_fields(batch: int, start_s: float, duration_ms: float, rows: int, sources: list[dict]) -> dict[str, str]:
    return {"batch_id": str(batch), "run_id": "r1", "num_input_rows": str(rows),
            "batch_duration_ms": str(duration_ms), "timestamp": iso(start_s),
            "published_at": str(start_s + duration_ms / 1000), "sources": json.dumps(sources)}


def test_stated_backlog_and_batch_latency_from_a_report():
    fields = report_fields(4, T0, 1500, 10, [{"kind": "file", "backlog_records": 30},
                                            {"kind": "file", "backlog_records": 12}])
    report = ProgressReport.from_fields(fields)
    assert stated_backlog(report) == 42
    unknown = ProgressReport.from_fields(report_fields(4, T0, 1500, 10, [{"kind": "file", "backlog_records": 30},
                                                                         {"kind": "file"}]))
    assert stated_backlog(unknown) is None and stated_backlog(None) is None
    # Ended at T0 + 1.5 s; its oldest record arrived at T0 - 2 s: 3.5 s.
    assert latency_ms(report, T0 - 2.0) == 3500.0
    empty = ProgressReport.from_fields(report_fields(5, T0, 100, 0, []))
    assert latency_ms(empty, T0 - 2.0) is None  # a batch that read nothing has no latency


def test_the_latency_tracker_keeps_the_worst_new_batch_and_carries_it_while_none_finishes():
    tracker = LatencyTracker()
    reports = [ProgressReport.from_fields(report_fields(b, T0, 500, rows, [])) for b, rows in ((1, 5), (2, 0), (3, 5))]
    assert [r.batch_id for r in tracker.new("q", reports)] == [1, 3]  # the empty batch is left out
    assert tracker.new("q", reports) == []  # each batch once
    assert tracker.update([2000.0, None, 3000.0]) == 3000.0
    assert tracker.update([]) == 3000.0  # a long batch still running: the last figure stands
    assert tracker.update([1000.0]) == 1000.0


def test_the_oldest_stream_record_of_a_batch_is_the_first_entry_after_its_start_offset():
    record = {"line": "a record"}
    client = fake_redis(streams={input_stream_key("p:", "bench", p): [(f"{ms}-0", record) for ms in arrived]
                                 for p, arrived in enumerate([(1000, 2000, 3000), (1500, 2500)])})
    source = {"kind": "redis_streams",
              "start_offset": {"ids": {"0": "1000-0", "1": "2500-0"}, "counts": {"0": 1, "1": 2}},
              "end_offset": {"ids": {"0": "3000-0", "1": "2500-0"}, "counts": {"0": 3, "1": 2}}}
    report = ProgressReport.from_fields(report_fields(7, T0, 100, 2, [source]))
    assert oldest_stream_arrival_s(client, "p:", "bench", report) == 2.0  # partition 1 read nothing new
    first = {**source, "start_offset": "None"}  # the query's first batch: from the streams' start
    assert oldest_stream_arrival_s(client, "p:", "bench", ProgressReport.from_fields(
        report_fields(0, T0, 100, 5, [first]))) == 1.0


def _log(directory: Path, name: str, entries: list[tuple[str, int, int]]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    lines = ["v1", *(json.dumps({"path": f"file://{p}", "timestamp": ts, "batchId": b}) for p, ts, b in entries)]
    (directory / name).write_text("\n".join(lines) + "\n")


def test_the_oldest_file_of_a_batch_comes_from_the_checkpoint_source_log(tmp_path):
    sources = tmp_path / "chk" / "q" / "sources" / "0"
    _log(sources, "3", [("/in/a", 5_000, 3), ("/in/b", 4_000, 3)])
    _log(sources, "9.compact", [("/in/c", 1_000, 8), ("/in/d", 7_000, 9), ("/in/e", 6_500, 9)])
    checkpoint = f"file:{tmp_path / 'chk' / 'q'}"
    assert oldest_file_landed_s(checkpoint, 0, 3) == 4.0
    assert oldest_file_landed_s(checkpoint, 0, 9) == 6.5  # a compact file: only this batch's entries
    assert oldest_file_landed_s(checkpoint, 0, 4) is None and oldest_file_landed_s(None, 0, 3) is None


def test_a_file_probe_takes_the_slowest_query_and_the_worst_stated_backlog(tmp_path):
    cfg = load_config(None, ["redis.key_prefix=p:"])
    app = AppConfig(name="bench", pipeline="wordcount")
    inp = tmp_path / "in"
    inp.mkdir()
    (inp / "a.json").write_text('{"x": 1}\n{"x": 2}\n{"x": 3}\n')
    (inp / "b.json").write_text('{"x": 4}\n{"x": 5}\n')
    (inp / ".b.json.tmp").write_text('{"x": 6}\n')  # being landed: not counted
    client = fake_redis()
    name = app.name
    for q in ("fast", "slow"):
        info = QueryInfo(name=q, id=q, run_id="r1", status="active", checkpoint=f"file:{tmp_path / 'chk' / q}")
        client.hset(queries_key("p:", name), q, info.to_json())
    _log(tmp_path / "chk" / "fast" / "sources" / "0", "0", [(str(inp / "a.json"), int(T0 * 1000), 0)])
    _log(tmp_path / "chk" / "fast" / "sources" / "0", "1", [(str(inp / "b.json"), int((T0 + 2) * 1000), 1)])
    _log(tmp_path / "chk" / "slow" / "sources" / "0", "0", [(str(inp / "a.json"), int(T0 * 1000), 0)])
    fast = [report_fields(0, T0 + 1, 1000, 3, [{"kind": "file", "backlog_records": 2}]),
            report_fields(1, T0 + 3, 1000, 2, [{"kind": "file", "backlog_records": 0}])]
    slow = [report_fields(0, T0 + 1, 9000, 3, [{"kind": "file", "backlog_records": 2}])]
    for q, reports in (("fast", fast), ("slow", slow)):
        for i, fields in enumerate(reports):
            client.xadd(progress_history_key("p:", name, q), fields, id=f"{int(T0 * 1000) + i}-0")
        client.hset(progress_key("p:", name, q), mapping=reports[-1])
    probe = FileProbe(cfg, app, inp)
    arrived, processed, _lasts = probe.counts(client)
    assert (arrived, processed) == (5, 3)  # 5 landed; the slow query has read a.json only
    assert not probe.drained(client)
    # Latency: the slow query's batch 0 ended at T0 + 10 s, its file landed at T0: 10 s, the worst.
    assert probe.latency.value_ms == 10_000.0
    sample = probe.look(client, _NoRest(), T0)
    assert sample.stated_backlog_records == 2 and sample.batch_duration_ms == 9000 and sample.executors is None
    # One query stating no backlog makes the app's unknown (the daemon's rule: no guess).
    client.hset(progress_key("p:", name, "slow"), mapping=report_fields(0, T0 + 1, 9000, 3, [{"kind": "file"}]))
    assert probe.look(client, _NoRest(), T0).stated_backlog_records is None


class _NoRest:
    """A driver REST API that does not answer."""

    def executors(self, app_id):
        raise AssertionError("not reached: the application is not found first")

    def application(self, name):
        from sparkscale.monitors.spark_rest import SparkRestError

        raise SparkRestError("http://nowhere", "refused")


def _check(**found) -> ClickCheck:
    return ClickCheck(input_files=3, input_records=100, windows_expected=4, windows_found=4, **found)


def test_click_output_differences_count_as_records_the_worse_query_wins():
    k = [(f"2025-01-01T00:00:{s:02d}.000Z", "shop") for s in (0, 10, 20, 30)]
    expected = Expected(10, 5, {"f": 100}, 100, 0, {k[0]: 7, k[1]: 5, k[2]: 4, k[3]: 9}, {},
                        {"u1": (30, 900), "u2": (20, 400)})
    assert click_record_losses(_check(), expected) == (0, 0)
    # A lost window (7), one short by 2, one written twice (4 duplicated), an extra window (3):
    windows = _check(windows_lost=[k[0]], windows_wrong={k[1]: (5, 3)}, windows_duplicated={k[2]: [4, 4]},
                     windows_extra={("2025-01-01T00:01:00.000Z", "help"): 3})
    assert click_record_losses(windows, expected) == (9, 7)
    # user_totals: u1 lost (30 clicks), u2 with 25 of 20 (5 duplicated); windows: one short by 1.
    users = _check(users_lost=["u1"], users_wrong={"u2": ((20, 400), (25, 500))}, windows_wrong={k[3]: (9, 8)})
    assert click_record_losses(users, expected) == (30, 5)
