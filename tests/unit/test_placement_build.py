"""The placement policies' input: the master's landing choice, and the ClusterModel built from one
cycle's snapshots (workers, executors, load, gravity-model traffic, demand)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from sparkscale.config import AppConfig
from sparkscale.model.snapshot import Snapshot
from sparkscale.policies.ds2_model import estimate
from sparkscale.policies.placement.build import cluster_model
from sparkscale.policies.placement.landing import landing_worker
from sparkscale.policies.placement.model import ExecutorKey, Worker
from tests.unit.test_task_overhead import CLICKS_RECORDS, tasks
from tests.unit.test_task_overhead import snapshot as overhead_snapshot


def worker(wid: str, free: int, memory_free: int = 8192) -> Worker:
    return Worker(wid, "h", 8, 16384, 8 - free, 16384 - memory_free)


def test_the_master_puts_a_new_executor_on_the_worker_its_policy_sorts_first():
    ws = [worker("w-a", 3), worker("w-b", 5), worker("w-c", 5, memory_free=256)]
    assert landing_worker(ws, 1, 512) == "w-b"  # most free cores among those with memory for it
    assert landing_worker([worker("w-a", 5), worker("w-b", 5)], 1, 512) == "w-b"  # tie: largest id (reverse)
    assert landing_worker([worker("w-a", 5), worker("w-b", 5)], 1, 512, "cores_free_asc") == "w-a"
    assert landing_worker(ws, 1, 512, "CORES_FREE_ASC") == "w-a"
    assert landing_worker(ws, 1, 512, "MEMORY_FREE_DESC") == "w-b"  # w-a and w-b tie on memory: largest id
    assert landing_worker(ws, 1, 512, "WORKER_ID") == "w-a"
    assert landing_worker(ws, 6, 512) is None  # no worker has 6 free cores
    with pytest.raises(ValueError, match="workerSelectionPolicy"):
        landing_worker(ws, 1, 512, "RANDOM")


APP_A = AppConfig(name="a", min_executors=1, max_executors=4, executor_cores=2, executor_memory_mb=1024)
APP_B = AppConfig(name="b", min_executors=1, max_executors=4)


def snap(app: str, executors: list[dict[str, Any]], workers: list[dict[str, Any]], records: float = 3000.0,
         useful_s: float = 10.0, state_bytes: int | None = None) -> Snapshot:
    progress = {} if state_bytes is None else {"state_memory_bytes": state_bytes, "state_partitions": 4}
    return Snapshot.from_dict({
        "version": 1, "app": app, "query": "q", "taken_at": 1000.0, "window_s": 10.0,
        "executors": [{"host": "h", **e} for e in executors],
        "operators": [{"id": "source", "source": True, "parallelism": 1, "arrival_rate": 250.0,
                       "instances": [{"records_in": records, "records_out": records, "useful_time_s": 9.0}]},
                      {"id": "count", "parallelism": 4,
                       "instances": [{"records_in": records, "records_out": records, "useful_time_s": useful_s}]}],
        "edges": [["source", "count"]],
        "extensions": {"progress": progress, "cluster": {
            "app_id": f"app-{app}", "workers": workers, "unreachable": [], "executor_memory_mb": 1024}},
    })


def slots(a_on_1: list[str], a_on_2: list[str], b_on_1: list[str], b_on_2: list[str]) -> tuple[list, list]:
    def w(wid: str, host: str, mine: list[str]) -> dict[str, Any]:
        return {"id": wid, "host": host, "cores_free": 2, "memory_free_mb": 4096, "executors": mine,
                "cores": 8, "memory_mb": 8192}
    return ([w("w1", "10.0.0.1", a_on_1), w("w2", "10.0.0.2", a_on_2)],
            [w("w1", "10.0.0.1", b_on_1), w("w2", "10.0.0.2", b_on_2)])


def test_the_model_holds_every_apps_executors_on_their_workers_with_load_traffic_and_demand():
    wa, wb = slots(["1", "2"], ["3"], ["7"], [])
    a = snap("a", [{"id": "1", "cores": 2, "task_time_fraction": 0.5, "shuffle_write_bytes": 1000,
                    "shuffle_remote_read_bytes": 0, "shuffle_local_read_bytes": 0},
                   {"id": "2", "cores": 2, "task_time_fraction": 1.0, "shuffle_write_bytes": 0,
                    "shuffle_remote_read_bytes": 300, "shuffle_local_read_bytes": 100},
                   {"id": "3", "cores": 2, "task_time_fraction": 0.25, "shuffle_write_bytes": 0,
                    "shuffle_remote_read_bytes": 400, "shuffle_local_read_bytes": 800}],
             wa, state_bytes=5_000_000)
    b = snap("b", [{"id": "7", "cores": 1, "task_time_fraction": 0.8}], wb, records=0.0)
    model = cluster_model([a, b], {"a": APP_A, "b": APP_B})
    assert [(w.id, w.cores, w.cores_used) for w in model.workers] == [("w1", 8, 6), ("w2", 8, 6)]
    # w1: a/1 0.5x2 + a/2 1.0x2 + b/7 0.8x1 = 3.8 busy cores of 8; w2: a/3 0.25x2 = 0.5
    assert model.worker("w1").busy_share == pytest.approx(3.8 / 8)
    assert model.worker("w2").busy_share == pytest.approx(0.5 / 8)
    assert {(str(e.key), e.worker) for e in model.executors} == {("a/1", "w1"), ("a/2", "w1"), ("a/3", "w2"),
                                                                  ("b/7", "w1")}
    # gravity: a/1 wrote 100 B/s, read by a/2 (40 B/s of 160) and a/3 (120 of 160)
    flows = {(str(t.src), str(t.dst)): t.bytes_per_s for t in model.traffic}
    assert flows == {("a/1", "a/2"): pytest.approx(25.0), ("a/1", "a/3"): pytest.approx(75.0)}
    demand = model.app("a")
    assert (demand.arrival_rate, demand.state_bytes, demand.state_partitions) == (250.0, 5_000_000, 4)
    # DS2's capacity on one executor's 2 cores: the stage's true rate 300/s per task, 2 at once; the
    # source's 9 s (waiting on its input) are no work an executor adds
    assert demand.rate_per_executor == pytest.approx(3000 / 10 * 2)
    assert model.app("b").rate_per_executor is None  # no record processed: unknown, not 0
    assert model.landing == {"a": "w2", "b": "w2"}  # equal free cores: the largest id
    assert ExecutorKey("a", "1") < ExecutorKey("a", "2")


def test_apps_without_a_view_or_a_config_are_left_out():
    wa, _ = slots(["1"], [], [], [])
    a = snap("a", [{"id": "1", "cores": 2}], wa)
    unmanaged = snap("x", [{"id": "1", "cores": 2}], wa)
    model = cluster_model([a, unmanaged], {"a": APP_A})
    assert [d.app for d in model.apps] == ["a"] and model.worker("w1").busy_share == 0.0  # no load figure: 0
    assert cluster_model([], {"a": APP_A}).workers == ()


def test_an_oversubscribed_workers_load_is_over_its_hosts_cpus():
    wa, _ = slots(["1"], ["2"], [], [])
    a = snap("a", [{"id": "1", "cores": 2, "task_time_fraction": 0.5},
                   {"id": "2", "cores": 2, "task_time_fraction": 1.0}], wa)
    model = cluster_model([a], {"a": APP_A}, host_cpus={"10.0.0.1": 2, "10.0.0.2": 16})
    assert model.worker("w1").busy_share == pytest.approx(1.0 / 2)  # 1 busy core of the host's 2 CPUs, not of 8 cores
    assert model.worker("w2").busy_share == pytest.approx(2.0 / 8)  # more CPUs than cores: the cores count


# -- sparkscale cluster-plan ----------------------------------------------------------------------


@pytest.fixture
def two_apps(tmp_path):
    from click.testing import CliRunner

    wa, wb = slots(["1", "2"], [], ["7"], [])
    busy = [{"id": "1", "cores": 2, "task_time_fraction": 1.0}, {"id": "2", "cores": 2, "task_time_fraction": 1.0}]
    (tmp_path / "a.json").write_text(snap("a", busy, wa).to_json())
    (tmp_path / "b.json").write_text(snap("b", [{"id": "7", "cores": 1, "task_time_fraction": 1.0}], wb).to_json())
    (tmp_path / "c.yaml").write_text("apps:\n  - {name: a, executor_cores: 2, executor_memory_mb: 1024}\n"
                                     "  - {name: b}\n")
    return tmp_path, CliRunner()


def test_cluster_plan_shows_the_workers_their_load_and_the_otd_move(two_apps):
    from sparkscale.cli import main

    tmp, runner = two_apps
    args = ["cluster-plan", str(tmp / "a.json"), str(tmp / "b.json"), "--config", str(tmp / "c.yaml")]
    out = runner.invoke(main, [*args, "--policy", "otd", "--set", "placement.otd.high_load=0.6"])
    assert out.exit_code == 0, out.output
    # w1 holds a/1, a/2 (2 cores each, busy) and b/7: 5 of 8 cores busy (high at 0.6), w2 none (low):
    # Case 1 moves one off w1
    assert "0.62" in out.output and "a/1 a/2 b/7" in out.output and "placement otd" in out.output
    assert " -> w2" in out.output
    as_json = runner.invoke(main, [*args, "--json"])
    data = json.loads(as_json.output)
    assert data["plan"]["policy"] == "spark-default" and data["plan"]["moves"] == []
    assert {w["id"] for w in data["model"]["workers"]} == {"w1", "w2"}


def test_cluster_plan_refuses_a_bad_snapshot_or_an_app_not_in_the_config(two_apps):
    from sparkscale.cli import main

    tmp, runner = two_apps
    (tmp / "bad.json").write_text('{"version": 1}')
    bad = runner.invoke(main, ["cluster-plan", str(tmp / "bad.json"), "--config", str(tmp / "c.yaml")])
    assert bad.exit_code == 2 and "invalid snapshot" in bad.output and "Traceback" not in bad.output
    (tmp / "c2.yaml").write_text("apps:\n  - {name: a}\n")
    other = runner.invoke(main, ["cluster-plan", str(tmp / "b.json"), "--config", str(tmp / "c2.yaml")])
    assert other.exit_code == 2 and "b are not in the config" in other.output


def test_an_executors_rate_is_measured_with_the_capacity_model_ds2_sized_by():
    # Tasks paying 0.4 s each whatever their records (tests/unit/test_task_overhead.py): plain DS2's
    # capacity on one core is ~32.8 rec/s, the overhead model's 300 x (1 - 0.37) = 188 rec/s.
    plain_snap = overhead_snapshot(56, tasks(CLICKS_RECORDS))
    wa, _ = slots(["1"], [], [], [])
    view = {"cluster": {"app_id": "app-x", "workers": wa, "unreachable": [], "executor_memory_mb": 1024}}
    snap_with_view = replace(plain_snap, extensions=view)
    app = {"app": AppConfig(name="app", max_executors=8)}
    plain = cluster_model([snap_with_view], app, task_overhead=False).app("app").rate_per_executor
    assert plain == pytest.approx(estimate(plain_snap).capacity_rps(1))
    assert plain == pytest.approx(32.756, abs=0.01)
    overhead = cluster_model([snap_with_view], app).app("app").rate_per_executor  # the default, as before
    assert overhead == pytest.approx(300 * (1 - 14 * 0.4 / 15))
    assert cluster_model([snap_with_view], app, task_overhead=True).app("app").rate_per_executor == overhead
