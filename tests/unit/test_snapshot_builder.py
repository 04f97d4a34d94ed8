"""The pure half of the monitor: Spark REST JSON (+ progress reports) -> Snapshot v1.

`fixtures/rest/handmade/` is a small hand-written app (batches 5..9 of query `counts`, one with a
SKIPPED stage, one with an extra stage, one still running; its progress reports carry the sources'
positions and backlogs as the agent publishes them, and an idle sample); `fixtures/rest/wordcount/`
was recorded from a real wordcount under 2000 lines/s (PySpark 4.3.0 standalone, by an agent whose
reports had offsets but no positions or backlogs; its `meta.json` holds what the old monitor read
from the input streams over the window then).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import ClassVar

import pytest
from click.testing import CliRunner

from sparkscale.cli.offline import snapshot_command
from sparkscale.config import AppConfig, PolicyConfig
from sparkscale.localenv.ports import free_port
from sparkscale.model.snapshot import Snapshot
from sparkscale.monitors.progress_reports import ProgressReport
from sparkscale.monitors.snapshot_builder import SnapshotInputs, build_snapshot, finished_batches, window_batches
from sparkscale.monitors.source_figures import partition_rows
from sparkscale.monitors.spark_rest import (
    SparkRestClient,
    SparkRestError,
    parse_applications,
    parse_batch_description,
    parse_executors,
    parse_jobs,
    parse_stage_attempts,
    parse_time_s,
)
from sparkscale.policies.base import get_policy
from sparkscale.policies.ds2 import Ds2Policy
from sparkscale.policies.history import DecisionHistory

FIXTURES = Path(__file__).parent / "fixtures" / "rest"
HANDMADE = FIXTURES / "handmade"
RECORDED = FIXTURES / "wordcount"
T0 = parse_time_s("2026-11-22T05:00:00.000GMT")
assert T0 is not None


def load(directory: Path, name: str):
    return json.loads((directory / name).read_text())


def rest_inputs(directory: Path):
    jobs = parse_jobs(load(directory, "jobs.json"))
    stages = {int(p.stem): parse_stage_attempts(json.loads(p.read_text()))
              for p in (directory / "stages").glob("*.json")}
    progress = [ProgressReport.from_fields(f) for f in load(directory, "progress_history.json")]
    executors = parse_executors(load(directory, "executors.json"))
    return jobs, stages, progress, executors


def handmade_snapshot(window_s: float = 30.0, taken_at: float = T0 + 40) -> Snapshot:
    jobs, stages, progress, executors = rest_inputs(HANDMADE)
    batches = finished_batches(jobs, "counts", [(r.run_id, r.batch_id) for r in progress])
    return build_snapshot(SnapshotInputs(
        app="wc", query="counts", taken_at=taken_at, window_s=window_s, executors=executors, batches=batches,
        stages=stages, progress=progress, trigger_interval_s=1.0,
        host={"cpu_fraction": 0.5, "memory_fraction": 0.25}, app_figures={"cpu_fraction": 0.4},
    ))


# -- parsing -------------------------------------------------------------------------------------


def test_batch_description_parsed_into_query_run_and_batch():
    ref = parse_batch_description("counts\nid = 3f2a-11\nrunId = 9c1e-22\nbatch = 17")
    assert (ref.query, ref.query_id, ref.run_id, ref.batch_id) == ("counts", "3f2a-11", "9c1e-22", 17)
    assert parse_batch_description("count at NativeMethodAccessorImpl.java:0") is None
    assert parse_batch_description(None) is None


def test_jobs_parsed_with_batches_stages_and_times():
    jobs = {j.job_id: j for j in parse_jobs(load(HANDMADE, "jobs.json"))}
    assert jobs[12].batch.batch_id == 7 and jobs[12].stage_ids == (23, 24)
    assert jobs[12].completed_at_s == pytest.approx(T0 + 21.9)
    assert jobs[1].batch is None  # not a micro-batch
    assert jobs[14].status == "RUNNING" and jobs[14].completed_at_s is None


def test_executors_exclude_the_driver_and_inactive_ones():
    data = [*load(HANDMADE, "executors.json"),
            {"id": "3", "hostPort": "127.0.0.1:1", "isActive": False, "totalCores": 1}]
    executors = parse_executors(data)
    assert [(e.id, e.host, e.cores) for e in executors] == [("1", "127.0.0.1", 1), ("2", "127.0.0.1", 1)]
    assert parse_applications(load(HANDMADE, "applications.json"))[0].id == "app-20261122050000-0001"


def test_stage_tasks_carry_their_metrics():
    (attempt,) = parse_stage_attempts(load(HANDMADE / "stages", "21.json"))
    task = attempt.tasks[0]
    assert (task.executor_id, task.run_time_ms, task.shuffle_read_records, task.fetch_wait_ms) == ("1", 40, 550, 10)
    (skipped,) = parse_stage_attempts(load(HANDMADE / "stages", "23.json"))
    assert skipped.status == "SKIPPED" and skipped.tasks == ()


def test_progress_report_rows_by_partition_from_source_offsets():
    first = {"batch_id": "0", "run_id": "r", "num_input_rows": "483", "sources": json.dumps([{
        "start_offset": "None",  # what PySpark 4.3 reports for the first batch (recorded)
        "end_offset": {"ids": {"0": "1-4", "1": "1-4"}, "counts": {"0": 242, "1": 241}}, "num_input_rows": 483}])}
    (source,) = ProgressReport.from_fields(first).sources
    assert partition_rows(source) == {"0": 242, "1": 241}
    later = {**first, "sources": json.dumps([{"start_offset": {"counts": {"0": 242, "1": 241}},
                                              "end_offset": {"counts": {"0": 300, "1": 241}}}])}
    assert partition_rows(ProgressReport.from_fields(later).sources[0]) == {"0": 58, "1": 0}
    assert partition_rows(ProgressReport.from_fields({**first, "sources": "[{}]"}).sources[0]) is None


# -- batches and the window ------------------------------------------------------------------------


def test_running_batch_is_not_finished_and_window_selects_by_completion():
    jobs, _, progress, _ = rest_inputs(HANDMADE)
    batches = finished_batches(jobs, "counts", [(r.run_id, r.batch_id) for r in progress])
    assert [b.batch_id for b in batches] == [5, 6, 7, 8]
    assert [b.batch_id for b in window_batches(batches, T0 + 40, 30)] == [6, 7, 8]
    assert [b.batch_id for b in window_batches(batches, T0 + 21.6, 2)] == [6]  # 7 ends at 21.9: after
    assert batches[2].stage_ids == (22, 23, 24) and batches[2].job_ids == (11, 12)


def test_latest_batch_without_progress_report_waits_for_the_next_one():
    jobs, _, _, _ = rest_inputs(HANDMADE)
    # Without progress reports, batch 8 may still get another job: only a later batch proves it ended.
    assert [b.batch_id for b in finished_batches(jobs, "counts")] == [5, 6, 7, 8]  # 9 has started
    no_nine = [j for j in jobs if j.job_id != 14]
    assert [b.batch_id for b in finished_batches(no_nine, "counts")] == [5, 6, 7]


# -- operators -------------------------------------------------------------------------------------


def test_skipped_stages_ignored_and_odd_batches_left_out():
    snap = handmade_snapshot()
    assert [op.id for op in snap.operators] == ["source", "stage0", "stage1"]
    assert snap.edges == (("source", "stage0"), ("stage0", "stage1"))
    monitor = snap.extensions["monitor"]
    assert monitor["batches"] == [6, 7]  # batch 7's SKIPPED stage 23 is not an operator
    assert monitor["excluded_batches"] == [{"run_id": "run-1", "batch": 8, "stages": 3}]
    assert snap.operator("stage1").extra["spark_stage_id"] == 24


def test_instances_are_tasks_with_useful_time_run_time_less_fetch_wait():
    snap = handmade_snapshot()
    stage0, stage1 = snap.operator("stage0"), snap.operator("stage1")
    assert len(stage0.instances) == 4  # 2 tasks x batches 6 and 7; the FAILED attempt is left out
    assert sorted(i.records_in for i in stage0.instances) == [90, 100, 110, 120]
    assert sum(i.records_out for i in stage0.instances) == 500 + 600 + 450 + 550
    useful = sorted(i.useful_time_s for i in stage1.instances)
    assert useful == pytest.approx([0.0, 0.03, 0.035, 0.04])  # (40-10, 45-5, 30-30, 35-0) ms
    assert {i.executor for i in stage1.instances} == {"1", "2"}
    # The last stage writes nothing measurable (a foreachBatch sink): it passes its input on.
    assert all(i.records_out == i.records_in for i in stage1.instances)
    assert stage1.extra["records_out_from"] == "records_in"
    assert stage0.parallelism == stage1.parallelism == 2


def test_source_operator_figures():
    snap = handmade_snapshot()
    source = snap.operator("source")
    assert source.source and source.parallelism == 2
    # The sources' positions: 10000 at 05:00:20, 13400 at the idle sample at 05:00:37.
    assert source.arrival_rate == pytest.approx(6000 / 30)
    # The latest report's 30 (05:00:37, no rows read), brought forward to the snapshot's time,
    # 05:00:40: + 200 rec/s x 3 s arrived since.
    assert source.backlog == pytest.approx(30 + 200 * 3)
    assert snap.extensions["source"]["backlog_stated_records"] == 30
    assert snap.extensions["source"]["backlog_age_s"] == pytest.approx(3.0)
    assert snap.extensions["source"]["arrival_estimate"] == "position"
    assert snap.extensions["source"]["backlog_known"] is True
    assert snap.extensions["source"]["backlog_estimate"] == "source_metrics"
    assert snap.extensions["source"]["sources"] == [{
        "kind": "redis_streams", "description": "redis_streams", "backlog_records": 30,
        "backlog_estimate": "source_metrics", "detail": "per stream: 0: 10, 1: 20"}]
    # Records read per partition in batches 6 and 7, from the progress reports' source offsets.
    assert [i.records_in for i in source.instances] == [100 + 90, 120 + 110]
    assert all(i.records_out == i.records_in and i.useful_time_s == 30 for i in source.instances)
    assert snap.extensions["monitor"]["source_records_from"] == {"progress": 2, "tasks": 0}


def test_source_falls_back_to_first_stage_tasks_without_progress():
    jobs, stages, _, executors = rest_inputs(HANDMADE)
    snap = build_snapshot(SnapshotInputs(
        app="wc", query="counts", taken_at=T0 + 40, window_s=30, executors=executors,
        batches=finished_batches(jobs, "counts"), stages=stages))
    assert [i.records_in for i in snap.operator("source").instances] == [190, 230]
    assert [i.extra["partition"] for i in snap.operator("source").instances] == [0, 1]
    # No report at all: nothing tells the backlog, and the arrival rate is what was read.
    assert snap.operator("source").backlog is None
    assert snap.operator("source").arrival_rate == pytest.approx(420 / 30)
    assert snap.extensions["source"]["backlog_known"] is False
    assert "backlog unknown" in snap.extensions["source"]["note"]
    assert snap.extensions["monitor"]["source_records_from"] == {"progress": 0, "tasks": 2}
    assert snap.batch_duration_s == pytest.approx(0.85)  # median of 0.8 and 0.9 s from the job times


def test_durations_progress_and_host_in_snapshot():
    snap = handmade_snapshot()
    assert snap.trigger_interval_s == 1.0
    assert snap.batch_duration_s == pytest.approx(0.85)  # median of 800 and 900 ms
    assert snap.extensions["progress"]["longest_batch_s"] == pytest.approx(0.9)  # a stall shows here
    longest = next(r for r in rest_inputs(HANDMADE)[2] if r.batch_duration_ms == 900)
    assert snap.extensions["progress"]["longest_batch_ended_at_s"] == pytest.approx(longest.at_s + 0.9)
    assert snap.extensions["progress"]["num_input_rows"] == 420
    assert snap.extensions["progress"]["state_rows_total"] == 42
    assert snap.extensions["host"]["cpu_fraction"] == 0.5
    assert [e.id for e in snap.executors] == ["1", "2"]


def test_empty_window_gives_a_source_only_snapshot():
    snap = handmade_snapshot(window_s=5.0)
    assert [op.id for op in snap.operators] == ["source"] and snap.edges == ()
    assert snap.batch_duration_s is None


# -- contracts -------------------------------------------------------------------------------------


@pytest.mark.parametrize("make", [handmade_snapshot], ids=["handmade"])
def test_snapshot_round_trips_and_ds2_plans_from_it(make):
    snap = make()
    assert Snapshot.from_dict(snap.to_dict()) == snap
    assert Snapshot.from_json(snap.to_json()).to_dict() == snap.to_dict()
    plan = get_policy("ds2").decide(snap, DecisionHistory.empty(), PolicyConfig(), AppConfig(name=snap.app))
    assert set(plan.parallelism) == {op.id for op in snap.operators}


def recorded_snapshot() -> Snapshot:
    meta = load(RECORDED, "meta.json")
    jobs, stages, progress, executors = rest_inputs(RECORDED)
    return build_snapshot(SnapshotInputs(
        app=meta["app"], query=meta["query"], taken_at=meta["taken_at"], window_s=meta["window_s"],
        executors=executors, batches=finished_batches(jobs, meta["query"], [(r.run_id, r.batch_id) for r in progress]),
        stages=stages, progress=progress, trigger_interval_s=meta["trigger_interval_s"],
    ))


def test_recorded_wordcount_snapshot():
    meta = load(RECORDED, "meta.json")
    snap = recorded_snapshot()
    assert [op.id for op in snap.operators] == ["source", "stage0", "stage1"]
    source, stage0 = snap.operator("source"), snap.operator("stage0")
    assert source.parallelism == meta["partitions"]
    assert stage0.parallelism == meta["partitions"]  # the scan: one task per input partition
    assert snap.operator("stage1").parallelism == meta["shuffle_partitions"]
    # The scan reads exactly what the progress reports say the query took in.
    read = sum(i.records_in for i in stage0.instances)
    assert read == snap.extensions["progress"]["num_input_rows"] == sum(i.records_in for i in source.instances)
    assert sum(i.records_out for i in stage0.instances) > 0
    assert all(i.useful_time_s > 0 for i in stage0.instances)
    # Recorded before sources reported positions and backlogs: the arrival rate is the mean input
    # rate of the window's reports (exactly), which agrees with what the load generator added then.
    _, _, progress, _ = rest_inputs(RECORDED)
    rates = [r.input_rows_per_s for r in progress if meta["taken_at"] - meta["window_s"] < r.at_s <= meta["taken_at"]]
    assert snap.extensions["source"]["arrival_estimate"] == "input_rate"
    assert source.arrival_rate == pytest.approx(sum(rates) / len(rates))
    assert source.arrival_rate == pytest.approx(sum(meta["produced_records"]) / meta["window_s"], rel=0.01)
    assert source.backlog is None and snap.extensions["source"]["backlog_known"] is False
    assert Snapshot.from_dict(snap.to_dict()) == snap
    plan = get_policy("ds2").decide(snap, DecisionHistory.empty(), PolicyConfig(), AppConfig(name=snap.app))
    assert set(plan.parallelism) == {"source", "stage0", "stage1"}


# -- the REST client and the command (local sockets only, no Spark) --------------------------------


class _FlakyHandler(BaseHTTPRequestHandler):
    """Answers 503 to the first `failures` requests, then the JSON list [1]; 404 under /missing."""

    failures = 2
    seen: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        type(self).seen.append(self.path)
        if self.path.startswith("/api/v1/missing"):
            self.send_error(404)
        elif len(type(self).seen) <= type(self).failures:
            self.send_error(503)
        else:
            body = b"[1]"
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def flaky_server():
    _FlakyHandler.seen = []
    server = HTTPServer(("127.0.0.1", 0), _FlakyHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/api/v1"
    server.shutdown()
    server.server_close()


def test_rest_client_retries_server_errors_with_backoff(flaky_server):
    client = SparkRestClient(flaky_server, timeout_s=2, retries=3, backoff_s=0.01)
    assert client.get_json("applications") == [1]
    assert len(_FlakyHandler.seen) == 3


def test_rest_client_does_not_retry_a_missing_resource_and_names_the_url(flaky_server):
    client = SparkRestClient(flaky_server, timeout_s=2, retries=3, backoff_s=0.01)
    with pytest.raises(SparkRestError, match=r"/api/v1/missing: HTTP 404") as info:
        client.get_json("missing")
    assert info.value.status == 404 and not info.value.unreachable
    assert len(_FlakyHandler.seen) == 1


def test_rest_client_unreachable_after_retries():
    client = SparkRestClient(f"http://127.0.0.1:{free_port()}/api/v1", timeout_s=1, retries=2, backoff_s=0.01)
    with pytest.raises(SparkRestError, match=r"127\.0\.0\.1:\d+/api/v1/applications: no answer") as info:
        client.application()
    assert info.value.unreachable


def test_snapshot_command_exit_codes(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("loop: {window_s: -1}\n")
    result = CliRunner().invoke(snapshot_command, ["--app", "wordcount", "--config", str(bad)])
    assert result.exit_code == 2 and "loop.window_s" in result.stderr
    result = CliRunner().invoke(snapshot_command, ["--app", "nosuchapp"])
    assert result.exit_code == 2 and "nosuchapp" in result.stderr
    # Redis does not answer: said so, exit 1 (an app whose agent registered no driver is not running,
    # exit 1 too: test_collector.py).
    sets = ["--set", f"redis.port={free_port()}", "--set", "redis.socket_timeout_s=0.5",
            "--set", "logging.stderr=false"]
    result = CliRunner().invoke(snapshot_command, ["--app", "wordcount", *sets])
    assert result.exit_code == 1
    assert "cannot read 'wordcount' from Redis at 127.0.0.1:" in result.stderr


def test_plan_command_on_the_recorded_live_snapshot_explains_each_operator(tmp_path):
    """`sparkscale plan` on a snapshot of a real wordcount: the figures behind the decision."""
    from click.testing import CliRunner

    from sparkscale.cli import main

    path = tmp_path / "wordcount.snapshot.json"
    path.write_text(recorded_snapshot().to_json(indent=2))
    table = CliRunner().invoke(main, ["plan", str(path), "--policy", "ds2"])
    assert table.exit_code == 0, table.output
    for operator in ("stage0", "stage1"):
        line = next(x for x in table.output.splitlines() if x.strip().startswith("[") and f"] {operator}:" in x)
        assert "true processing rate" in line and "target input rate" in line and "π = ceil(" in line
    assert "cores needed" in table.output
    as_json = CliRunner().invoke(main, ["plan", str(path), "--policy", "ds2", "--json"])
    plan = json.loads(as_json.output)
    assert set(plan) == {"policy", "app", "parallelism", "actions", "explanation"}
    assert plan["policy"] == "ds2" and set(plan["parallelism"]) == {"source", "stage0", "stage1"}


def test_ds2_says_how_the_sources_backlog_was_brought_forward():
    plan = Ds2Policy().decide(handmade_snapshot(), DecisionHistory(()), PolicyConfig(name="ds2"), AppConfig(name="wc"))
    source_line = next(line for line in plan.explanation if "(source)" in line)
    assert "backlog 630 (stated 30 + what arrived in the 3 s since it was measured) / 60 s" in source_line
