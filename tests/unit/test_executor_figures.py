"""Executors' CPU and memory from Spark's REST figures, wherever the executors run: the parsing, the
window's CPU from task metrics, the app's figures, and what the threshold policy reads of them.

`hosts/executors.json` is handmade in Spark's format: executors on 127.0.0.2 and 127.0.0.3 (one not
yet heartbeating, one removed); `wordcount/` was recorded from a live run (process-tree metrics off)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sparkscale.apps.submit import spark_conf
from sparkscale.config import AppConfig, Config
from sparkscale.model.snapshot import Snapshot
from sparkscale.monitors.executor_figures import ExecutorWork, app_extension, executor_figures, window_work
from sparkscale.monitors.snapshot_builder import SnapshotInputs, build_snapshot, finished_batches
from sparkscale.monitors.spark_rest import host_of, parse_executors, parse_jobs, parse_stage_attempts, parse_time_s
from sparkscale.policies.threshold import metrics_of

REST = Path(__file__).parent / "fixtures" / "rest"
T0 = parse_time_s("2026-11-22T05:00:00.000GMT")
assert T0 is not None
TAKEN_AT, WINDOW_S = T0 + 40, 30.0  # the window is (T0 + 10, T0 + 40]


def at(offset_s: float) -> str:
    whole, ms = divmod(round(offset_s * 1000), 1000)
    return f"2026-11-22T05:00:{whole:02d}.{ms:03d}GMT"


def task(task_id: int, executor: str, launch_s: float | None, duration_ms: float, run_ms: float, cpu_ms: float,
         status: str = "SUCCESS", deserialize_cpu_ms: float = 0.0) -> dict[str, Any]:
    out: dict[str, Any] = {
        "taskId": task_id, "index": task_id, "executorId": executor, "status": status,
        "taskMetrics": {"executorRunTime": run_ms, "executorCpuTime": cpu_ms * 1e6,
                        "executorDeserializeCpuTime": deserialize_cpu_ms * 1e6},
    }
    if launch_s is not None:
        out |= {"launchTime": at(launch_s), "duration": duration_ms}
    return out


STAGE = [{
    "stageId": 30, "attemptId": 0, "status": "COMPLETE", "numTasks": 6,
    "tasks": {str(t["taskId"]): t for t in [
        task(1, "0", 20.0, 1000, 900, 600, deserialize_cpu_ms=100),  # inside: 0.7 CPU-s, 0.9 s run
        task(2, "0", 9.0, 2000, 1000, 800),  # half inside: 0.4, 0.5
        task(3, "1", 30.0, 500, 500, 300, status="FAILED"),  # a failed task burnt CPU too
        task(4, "1", 5.0, 1000, 1000, 1000),  # before the window
        task(5, "2", 38.0, 1000, 1000, 1000, status="RUNNING"),  # not final
        task(6, "2", 35.0, 1000, 1000, 1000),  # executor 2 came at T0 + 30
    ]},
}]


def hosts_executors():
    return parse_executors(json.loads((REST / "hosts" / "executors.json").read_text()))


def stage_map(data: list[dict[str, Any]]):
    return {30: parse_stage_attempts(data)}


# -- parsing ------------------------------------------------------------------------------------


def test_executors_carry_their_host_from_host_port_and_spark_memory():
    executors = {e.id: e for e in hosts_executors()}
    assert sorted(executors) == ["0", "1", "2"]  # the driver and the removed executor are left out
    zero = executors["0"]
    assert (zero.host, zero.host_port, zero.cores) == ("127.0.0.2", "127.0.0.2:40001", 2)
    assert (zero.total_task_time_ms, zero.total_gc_time_ms) == (20446, 691)
    assert zero.memory is not None
    assert (zero.memory.storage_used_bytes, zero.memory.storage_total_bytes) == (2_000_000, 100_000_000)
    assert zero.memory.peak_rss_bytes == 550_000_000 and zero.memory.peak_python_rss_bytes == 150_000_000
    assert zero.memory.peak_jvm_heap_bytes == 70039096
    assert executors["1"].memory.peak_rss_bytes == 401_000_000
    # No heartbeat yet: no peaks at all, storage figures still.
    two = executors["2"].memory
    assert two.peak_jvm_heap_bytes is None and two.peak_rss_bytes is None and two.storage_total_bytes == 100_000_000


def test_process_tree_metrics_off_read_as_unknown_not_zero():
    recorded = parse_executors(json.loads((REST / "wordcount" / "executors.json").read_text()))
    assert all(e.memory.peak_rss_bytes is None and e.memory.peak_jvm_heap_bytes for e in recorded)


@pytest.mark.parametrize(("host_port", "host"), [
    ("127.0.0.2:40001", "127.0.0.2"), ("[::1]:40001", "::1"), ("worker-7", "worker-7"), ("", "unknown"),
])
def test_host_of_host_port(host_port, host):
    assert host_of(host_port) == host


def test_tasks_carry_cpu_time_and_their_dates():
    t = parse_stage_attempts(STAGE)[0].tasks[0]
    assert t.cpu_time_ns == pytest.approx(700e6) and t.launched_at_s == pytest.approx(T0 + 20)
    assert t.duration_ms == 1000


# -- the window's work --------------------------------------------------------------------------


def test_window_work_counts_each_finished_task_by_its_share_of_the_window():
    work = window_work(stage_map(STAGE), TAKEN_AT, WINDOW_S)
    assert work["0"].tasks == 2 and work["0"].cpu_s == pytest.approx(1.1) and work["0"].run_s == pytest.approx(1.4)
    assert work["1"] == ExecutorWork(1, pytest.approx(0.3), pytest.approx(0.5))
    assert work["2"] == ExecutorWork(1, pytest.approx(1.0), pytest.approx(1.0))


def test_window_work_carries_shuffle_bytes_by_the_same_share():
    shuffled = task(7, "0", 9.0, 2000, 1000, 800)  # half of its run inside the window
    shuffled["taskMetrics"] |= {"shuffleReadMetrics": {"remoteBytesRead": 4000, "localBytesRead": 1000},
                                "shuffleWriteMetrics": {"bytesWritten": 600, "recordsWritten": 3}}
    t = parse_stage_attempts([{**STAGE[0], "tasks": {"7": shuffled}}])[0].tasks[0]
    assert (t.remote_bytes_read, t.local_bytes_read, t.shuffle_write_bytes) == (4000, 1000, 600)
    work = window_work(stage_map([{**STAGE[0], "tasks": {"7": shuffled}}]), TAKEN_AT, WINDOW_S)["0"]
    assert (work.remote_read_bytes, work.local_read_bytes, work.shuffle_write_bytes) == (2000, 500, 300)
    figures = executor_figures(hosts_executors()[:1], {"0": work}, TAKEN_AT, WINDOW_S)[0].extra
    if figures["shuffle_remote_read_bytes"] or hosts_executors()[0].id == "0":
        assert (figures["shuffle_remote_read_bytes"], figures["shuffle_local_read_bytes"]) in ((2000, 500), (0, 0))


def test_undated_tasks_count_whole():
    undated = [{**STAGE[0], "tasks": {"9": task(9, "0", None, 0, 200, 150)}}]
    assert window_work(stage_map(undated), TAKEN_AT, WINDOW_S)["0"].cpu_s == pytest.approx(0.15)


def test_executor_figures_per_executor_over_its_cores_and_its_time_in_the_window():
    work = window_work(stage_map(STAGE), TAKEN_AT, WINDOW_S)
    figures = {e.id: e for e in executor_figures(hosts_executors(), work, TAKEN_AT, WINDOW_S)}
    zero = figures["0"]
    assert (zero.host, zero.cores) == ("127.0.0.2", 2)
    assert zero.extra["host_port"] == "127.0.0.2:40001"
    assert zero.extra["cpu_fraction"] == pytest.approx(1.1 / 60, abs=1e-4)
    assert zero.extra["task_time_fraction"] == pytest.approx(1.4 / 60, abs=1e-4)
    assert zero.extra["memory"]["peak_rss_bytes"] == 550_000_000 and zero.extra["memory"]["storage_used_bytes"]
    assert figures["1"].extra["cpu_fraction"] == pytest.approx(0.01, abs=1e-4)
    # Executor 2 existed for the last 10 s of the window: its 1 CPU-s is a tenth of its core's time.
    assert figures["2"].extra["present_s"] == 10 and figures["2"].extra["cpu_fraction"] == pytest.approx(0.1)
    assert figures["2"].extra["memory"]["peak_rss_bytes"] is None


def test_app_figures_cover_every_host():
    executors = hosts_executors()
    work = window_work(stage_map(STAGE), TAKEN_AT, WINDOW_S)
    app = app_extension(executors, work, TAKEN_AT, WINDOW_S)
    assert app["hosts"] == {"127.0.0.2": 1, "127.0.0.3": 2} and app["executors"] == 3
    # 2.4 CPU-s over 2 x 30 + 30 + 10 core-seconds.
    assert app["cpu_fraction"] == pytest.approx(0.024) and app["cpu_cores_busy"] == pytest.approx(0.08)
    assert app["task_time_fraction"] == pytest.approx(0.029)
    assert app["memory_fraction"] == pytest.approx(5e6 / 3e8, abs=1e-4)
    assert app["peak_rss_bytes"] is None  # executor 2 has not reported yet
    assert app["figures_from"] == "spark"
    none = app_extension([], {}, TAKEN_AT, WINDOW_S)
    assert none["cpu_fraction"] is None and none["memory_fraction"] is None and none["hosts"] == {}


# -- in the snapshot ----------------------------------------------------------------------------


def recorded_snapshot() -> tuple[Snapshot, dict[str, Any], dict[int, list[dict[str, Any]]]]:
    directory = REST / "wordcount"
    meta = json.loads((directory / "meta.json").read_text())
    raw = {int(p.stem): json.loads(p.read_text()) for p in (directory / "stages").glob("*.json")}
    stages = {k: parse_stage_attempts(v) for k, v in raw.items()}
    jobs = parse_jobs(json.loads((directory / "jobs.json").read_text()))
    executors = parse_executors(json.loads((directory / "executors.json").read_text()))
    snap = build_snapshot(SnapshotInputs(
        app=meta["app"], query=meta["query"], taken_at=meta["taken_at"], window_s=meta["window_s"],
        executors=executors, batches=finished_batches(jobs, meta["query"]), stages=stages,
    ))
    return snap, meta, raw


def test_recorded_wordcount_executors_have_cpu_from_their_tasks():
    snap, meta, raw = recorded_snapshot()
    start, end = meta["taken_at"] - meta["window_s"], meta["taken_at"]
    expected: dict[str, float] = {}
    for attempts in raw.values():
        for attempt in attempts:
            for t in attempt["tasks"].values():
                began = parse_time_s(t["launchTime"])
                finished = began + t["duration"] / 1000
                share = max(min(finished, end) - max(began, start), 0) / (finished - began)
                m = t["taskMetrics"]
                cpu_s = (m["executorCpuTime"] + m["executorDeserializeCpuTime"]) / 1e9
                expected[t["executorId"]] = expected.get(t["executorId"], 0.0) + cpu_s * share
    assert {e.id for e in snap.executors} == {"0", "1"} == set(expected)
    for e in snap.executors:
        assert e.host == "127.0.0.1" and e.extra["host_port"].startswith("127.0.0.1:")
        assert e.extra["cpu_s"] == pytest.approx(expected[e.id], abs=1e-3)
        assert 0 < e.extra["cpu_fraction"] < e.extra["task_time_fraction"] <= 1
    app = snap.extensions["app"]
    assert app["cpu_cores_busy"] == pytest.approx(sum(expected.values()) / meta["window_s"], abs=1e-3)
    # The JSON keeps every figure, and an older reader still finds id, host and cores.
    data = json.loads(snap.to_json())
    assert Snapshot.from_dict(data) == snap
    assert {"id", "host", "cores", "cpu_fraction", "memory"} <= set(data["executors"][0])


def test_threshold_reads_the_spark_figures_not_the_daemon_host():
    snap, _meta, _raw = recorded_snapshot()
    app = AppConfig(name="wordcount")
    with_host = Snapshot.from_dict({**snap.to_dict(), "extensions": {
        **snap.extensions, "host": {"cpu_fraction": 0.99, "memory_fraction": 0.99}}})
    metrics = metrics_of(with_host, app)
    assert metrics["cpu"] == snap.extensions["app"]["cpu_fraction"] and metrics["cpu"] < 0.99
    assert metrics["memory"] == snap.extensions["app"]["memory_fraction"]
    # No executors: unknown, not the daemon host's figure.
    empty = Snapshot.from_dict({**with_host.to_dict(), "executors": [], "extensions": {
        **with_host.extensions, "app": app_extension([], {}, snap.taken_at, snap.window_s)}})
    assert metrics_of(empty, app)["cpu"] is None and metrics_of(empty, app)["memory"] is None


def test_drivers_turn_on_process_tree_metrics():
    cfg = Config()
    assert spark_conf(cfg, cfg.apps[0])["spark.executor.processTreeMetrics.enabled"] == "true"
