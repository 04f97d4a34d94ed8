"""The cluster view: which standalone worker runs which executor, from the master's and the workers'
`/json/`. The fixtures (tests/unit/fixtures/rest/cluster/, see its README) are handmade, with the
field names of Spark 4.3.0's `org.apache.spark.deploy.JsonProtocol` as read from the jar
(`writeWorkerInfo`, `writeWorkerState`, `writeExecutorRunner`): after worker 2 died and came
back, the app's executors 1 and 2 sit on worker 1; the returned worker runs another app's executor."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from sparkscale.config import Config
from sparkscale.model.fields import FieldError
from sparkscale.model.placement import Placement, WorkerSlots, placement_of
from sparkscale.monitors import cluster_view
from sparkscale.monitors.cluster_view import (
    build_view,
    cluster_extension,
    fetch_cluster_view,
    parse_worker_executors,
    parse_workers,
)
from sparkscale.monitors.spark_master import SparkUnreachable

CLUSTER = Path(__file__).parent / "fixtures" / "rest" / "cluster"
APP = "app-20261122050000-0000"
OTHER = "app-20261122050030-0001"
W1 = "worker-20261122045900-127.0.0.2-40001"
W2_DEAD = "worker-20261122045900-127.0.0.3-40002"
W2 = "worker-20261122050100-127.0.0.3-40003"


def load(name: str) -> Any:
    return json.loads((CLUSTER / name).read_text())


def answers() -> dict[str, Any]:
    return {W1: load("worker-1.json"), W2: load("worker-2.json")}


def test_the_masters_workers_with_their_capacity_and_use():
    workers, alive = parse_workers(load("master.json"))
    assert alive == 2 and [w.id for w in workers] == [W1, W2_DEAD, W2]
    w1 = workers[0]
    assert (w1.host, w1.port, w1.web_url, w1.state) == ("127.0.0.2", 40001, "http://127.0.0.2:8081", "ALIVE")
    assert (w1.cores, w1.cores_used, w1.cores_free) == (8, 2, 6)
    assert (w1.memory_mb, w1.memory_used_mb, w1.memory_free_mb) == (8192, 1024, 7168)
    assert not workers[1].alive and workers[2].alive


def test_older_masters_without_the_free_figures_derive_them():
    master = load("master.json")
    for w in master["workers"]:
        del w["coresfree"], w["memoryfree"]
    del master["aliveworkers"]
    workers, alive = parse_workers(master)
    assert alive == 2 and workers[0].cores_free == 6 and workers[0].memory_free_mb == 7168


def test_a_workers_running_executors_not_its_finished_ones():
    runs = parse_worker_executors(load("worker-1.json"))
    assert [(e.app_id, e.executor_id, e.memory_mb) for e in runs] == [(APP, "1", 512), (APP, "2", 512)]


def test_the_view_maps_each_apps_executors_to_their_workers():
    view = build_view(load("master.json"), answers())
    assert view.applications == {APP: {"1": W1, "2": W1}, OTHER: {"0": W2}}
    assert view.app_executors(APP) == {"1": W1, "2": W1} and view.app_executors("app-none") == {}
    assert [w.id for w in view.alive] == [W1, W2] and view.requests == 3 and not view.unreachable
    placement = view.placement(APP)
    assert placement == Placement(APP, (WorkerSlots(W1, "127.0.0.2", 6, 7168, ("1", "2"), 8, 8192),
                                        WorkerSlots(W2, "127.0.0.3", 7, 7680, (), 8, 8192)), (), 512)
    assert Placement.from_extension(placement.to_extension()) == placement  # the worker's size goes along
    assert placement.worker_of() == {"1": W1, "2": W1}


def test_an_unreachable_worker_is_reported_not_fatal():
    view = build_view(load("master.json"), {W1: load("worker-1.json"), W2: "connection refused"})
    assert view.unreachable == {W2: "connection refused"} and view.app_executors(APP) == {"1": W1, "2": W1}
    placement = view.placement(APP)
    assert [w.id for w in placement.workers] == [W1] and placement.unreachable == (W2,)


def test_a_worker_answering_under_another_id_counts_as_unreachable():
    # A worker restarted on the same address answers with its new id before the master lists it.
    view = build_view(load("master.json"), {W1: load("worker-1.json"), W2: {**load("worker-2.json"), "id": "w-new"}})
    assert "answers as worker w-new" in view.unreachable[W2]


def test_the_placement_round_trips_through_the_snapshot_extension():
    placement = build_view(load("master.json"), answers()).placement(APP)
    extension = placement.to_extension()
    assert Placement.from_extension(json.loads(json.dumps(extension))) == placement
    assert placement_of({"cluster": {**extension, "requests": 3}}) == placement  # unknown keys ignored
    assert placement_of({}) is None
    failed = Placement(APP, error="master down")
    assert Placement.from_extension(failed.to_extension()) == failed


@pytest.mark.parametrize(("bad", "path"), [
    ({"workers": [{"id": "w", "cores_free": -1, "memory_free_mb": 0}]}, "extensions.cluster.workers[0].cores_free"),
    ({"workers": [{"id": "w", "cores_free": 1, "memory_free_mb": 0, "executors": [1]}]},
     "extensions.cluster.workers[0].executors[0]"),
    ({"workers": [{"id": "a", "cores_free": 1, "memory_free_mb": 0, "executors": ["1"]},
                  {"id": "b", "cores_free": 1, "memory_free_mb": 0, "executors": ["1"]}]},
     "extensions.cluster.workers[1].executors"),
    ({"unreachable": "w"}, "extensions.cluster.unreachable"),
])
def test_a_malformed_extension_names_its_field(bad, path):
    with pytest.raises(FieldError) as err:
        Placement.from_extension(bad)
    assert err.value.path == path


def test_fetch_asks_the_master_then_each_alive_worker_once(monkeypatch):
    served = {"http://127.0.0.1:8080/json/": load("master.json"), "http://127.0.0.2:8081/json/": load("worker-1.json"),
              "http://127.0.0.3:8082/json/": load("worker-2.json")}
    asked: list[str] = []

    def get_json(url: str, timeout_s: float) -> Any:
        asked.append(url)
        return served[url]

    monkeypatch.setattr(cluster_view, "get_json", get_json)
    view = fetch_cluster_view("http://127.0.0.1:8080/", 1.0)
    assert asked == list(served)  # the dead worker is not asked
    assert view.app_executors(APP) == {"1": W1, "2": W1}


@pytest.fixture(autouse=True)
def fresh_recent_view(monkeypatch):
    """Each test reads its own view: none kept from another test."""
    monkeypatch.setattr(cluster_view, "RECENT", cluster_view.RecentView())


def test_the_snapshot_extension_off_or_with_the_master_down(monkeypatch):
    assert cluster_extension(Config(loop={"cluster_view": False}), APP) is None

    def down(url: str, timeout_s: float) -> Any:
        raise SparkUnreachable(f"{url} did not answer: refused")

    monkeypatch.setattr(cluster_view, "get_json", down)
    extension = cluster_extension(Config(), APP)
    assert extension is not None and "did not answer" in extension["error"] and extension["requests"] == 1
    assert placement_of({"cluster": extension}).error == extension["error"]


def test_one_read_of_the_view_serves_every_apps_cycle_for_its_max_age(monkeypatch):
    reads: list[str] = []

    def fetch(url: str, timeout_s: float) -> Any:
        reads.append(url)
        return build_view(load("master.json"), answers())

    monkeypatch.setattr(cluster_view, "fetch_cluster_view", fetch)
    cfg = Config(loop={"cluster_view_max_age_s": 60})
    first, second = cluster_extension(cfg, APP), cluster_extension(cfg, OTHER)
    assert len(reads) == 1 and first["requests"] == 3 and second["requests"] == 0  # the second app's is free
    assert placement_of({"cluster": second}).worker_of() == {"0": W2}  # its own share of the same view
    cluster_extension(Config(loop={"cluster_view_max_age_s": 0}), APP)
    assert len(reads) == 2  # 0: every cycle reads its own

    def down(url: str, timeout_s: float) -> Any:
        raise SparkUnreachable("refused")

    monkeypatch.setattr(cluster_view, "fetch_cluster_view", down)
    monkeypatch.setattr(cluster_view, "RECENT", cluster_view.RecentView())
    assert "refused" in cluster_extension(cfg, APP)["error"]
    monkeypatch.setattr(cluster_view, "fetch_cluster_view", fetch)
    assert "error" not in cluster_extension(cfg, APP)  # a failed read is not kept


class Clock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


def test_an_old_view_is_read_again_in_the_background_and_the_cycles_go_on_with_the_kept_one(monkeypatch):
    """Issue 33: no cycle waits on the master once a view is kept; one background read at a time."""
    reads: list[str] = []
    release = threading.Event()

    def fetch(url: str, timeout_s: float) -> Any:
        reads.append(url)
        if len(reads) > 1:  # the background read: the master is stuck until released
            assert release.wait(10)
        return build_view(load("master.json"), answers())

    clock, threads = Clock(), []

    def spawn(work):
        thread = threading.Thread(target=work, daemon=True)
        threads.append(thread)
        thread.start()

    monkeypatch.setattr(cluster_view, "fetch_cluster_view", fetch)
    monkeypatch.setattr(cluster_view, "RECENT", cluster_view.RecentView(spawn, clock))
    cfg = Config(loop={"cluster_view_max_age_s": 2})
    first = cluster_extension(cfg, APP)
    assert first["requests"] == 3 and first["age_s"] == 0.0 and len(reads) == 1
    clock.now_s += 2.5  # older than its max age: renewed in the background
    started = time.monotonic()
    stale = [cluster_extension(cfg, APP) for _ in range(5)]
    assert time.monotonic() - started < 1.0  # the stuck master delayed no cycle
    assert all(e["requests"] == 0 and e["age_s"] == 2.5 and "error" not in e for e in stale)
    assert len(threads) == 1 and len(reads) == 2  # one background read for all of them
    release.set()
    threads[0].join(5)
    clock.now_s += 0.5
    renewed = cluster_extension(cfg, OTHER)
    assert renewed["requests"] == 0 and renewed["age_s"] == 0.5 and len(reads) == 2


def test_a_failed_background_read_drops_the_kept_view(monkeypatch):
    outcomes: list[Any] = [build_view(load("master.json"), answers()), SparkUnreachable("refused"),
                           SparkUnreachable("refused")]

    def fetch(url: str, timeout_s: float) -> Any:
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    clock = Clock()
    monkeypatch.setattr(cluster_view, "fetch_cluster_view", fetch)
    monkeypatch.setattr(cluster_view, "RECENT", cluster_view.RecentView(lambda work: work(), clock))
    cfg = Config(loop={"cluster_view_max_age_s": 2})
    assert "error" not in cluster_extension(cfg, APP)
    clock.now_s += 3
    assert "error" not in cluster_extension(cfg, APP)  # the kept view; its renewal failed meanwhile
    failed = cluster_extension(cfg, APP)  # none kept: this cycle reads, and says the master is down
    assert "refused" in failed["error"] and failed["requests"] == 1 and outcomes == []


def test_the_daemons_first_read_runs_in_the_background_and_the_first_cycles_go_on_without_it(monkeypatch):
    """Issue 33: 10 apps' first cycles all waited on the first read (up to 9 s, a loaded machine)."""
    outcomes: list[Any] = [SparkUnreachable("refused"), build_view(load("master.json"), answers()),
                           build_view(load("master.json"), answers())]
    release, reads, threads = threading.Event(), [], []

    def fetch(url: str, timeout_s: float) -> Any:
        assert release.wait(10)
        reads.append(url)
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def spawn(work):
        threads.append(threading.Thread(target=work, daemon=True))
        threads[-1].start()

    monkeypatch.setattr(cluster_view, "fetch_cluster_view", fetch)
    monkeypatch.setattr(cluster_view, "RECENT", cluster_view.RecentView(spawn))
    cfg = Config(loop={"cluster_view_max_age_s": 60})
    cluster_view.prime_cluster_view(cfg)
    cluster_view.prime_cluster_view(cfg)  # one read under way at a time
    waiting = cluster_extension(cfg, APP)
    assert waiting["error"] == cluster_view.FIRST_READ_UNDER_WAY and waiting["requests"] == 0 and reads == []
    assert len(threads) == 1
    release.set()
    threads[0].join(5)
    failed = cluster_extension(cfg, APP)  # the primed read failed: kept nothing, so this cycle reads
    assert "error" not in failed and failed["requests"] == 3 and len(reads) == 2
    cluster_view.prime_cluster_view(cfg)  # a view is kept: nothing to begin
    assert len(threads) == 1 and cluster_extension(cfg, OTHER)["requests"] == 0
    monkeypatch.setattr(cluster_view, "RECENT", cluster_view.RecentView(spawn))
    cluster_view.prime_cluster_view(Config(loop={"cluster_view": False}))  # no view wanted: no read
    cluster_view.prime_cluster_view(Config(loop={"cluster_view_max_age_s": 0}))  # each cycle reads its own
    assert len(threads) == 1
