"""The collector's wiring without Spark or Redis: one REST round per app, one snapshot per live query
the agent lists, and the errors the daemon and the CLI act on. The REST answers are the handmade
fixture's (query `counts`); Redis is fakeredis, the host sample a fake."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import redis
from click.testing import CliRunner
from structlog.testing import capture_logs

from sparkscale.cli import offline
from sparkscale.config import AppConfig, Config
from sparkscale.daemon.operator_view import AppLine, status_table
from sparkscale.daemon.status import AppStatus, QueryView, query_view
from sparkscale.model.snapshot import Snapshot
from sparkscale.monitors import collect_reads, collector, driver_round
from sparkscale.monitors.host import HostFigures
from sparkscale.monitors.progress_reports import ProgressReport
from sparkscale.monitors.spark_rest import (
    SparkRestError,
    parse_applications,
    parse_executors,
    parse_jobs,
    parse_stage_attempts,
    parse_time_s,
)
from sparkscale.protocol.keys import driver_key, progress_history_key
from sparkscale.protocol.queries import QueryInfo, queries_key
from tests.unit.fake_redis import RecordingRedis, make_wrong_type, seed

HANDMADE = Path(__file__).parent / "fixtures" / "rest" / "handmade"
T0 = parse_time_s("2026-11-22T05:00:00.000GMT")
assert T0 is not None
PREFIX = Config().redis.key_prefix


def load(name: str) -> Any:
    return json.loads((HANDMADE / name).read_text())


class FakeRest:
    def __init__(self, base_url: str = "http://127.0.0.1:4040/api/v1") -> None:
        self.base_url = base_url
        self.calls: list[str] = []

    def application(self, name: str):
        self.calls.append("application")
        return parse_applications(load("applications.json"))[0]

    def executors(self, app_id: str):
        self.calls.append("executors")
        return parse_executors(load("executors.json"))

    def jobs(self, app_id: str):
        self.calls.append("jobs")
        return parse_jobs(load("jobs.json"))

    def stage_attempts(self, app_id: str, stage_id: int):
        self.calls.append(f"stage {stage_id}")
        path = HANDMADE / "stages" / f"{stage_id}.json"
        return parse_stage_attempts(json.loads(path.read_text())) if path.exists() else []


def registered(rest_of: Any) -> Any:
    """`driver_rest_at` for the tests: the app's FakeRest where a registration was read, else what
    a missing one raises."""
    def driver_rest_at(cfg: Config, app: AppConfig, raw: object) -> Any:
        if isinstance(raw, Exception):
            raise SparkRestError(f"(driver of {app.name})", f"its registration in Redis is unreadable: {raw}",
                                 unreachable=True)
        if not raw:
            raise SparkRestError(f"(driver of {app.name})", "its agent has not registered a REST URL",
                                 unreachable=True)
        return rest_of(app)

    return driver_rest_at


def info(name: str, status: str = "active", qid: str = "") -> str:
    return QueryInfo(name=name, id=qid or f"id-{name}", run_id="run", status=status, trigger_interval_s=1.0).to_json()


def listing() -> dict[str, str]:
    """The queries the agent of `wc` lists: counts (with reports), other (idle: no batch, no report
    yet) and gone (terminated)."""
    return {"counts": info("counts", qid="qid-1"), "other": info("other"), "gone": info("gone", "terminated")}


@pytest.fixture
def world(monkeypatch):
    """The handmade app `wc`, registered, with its `listing()` and the reports of counts, observed at
    T0 + 40 over 30 s. Its Redis counts the round trips the collector makes (`direct`: the test's)."""
    history = [(f"{int((ProgressReport.from_fields(f).at_s or 0) * 1000)}-0", f) for f in load("progress_history.json")]
    redis = RecordingRedis()
    seed(redis.direct, hashes={queries_key(PREFIX, "wc"): listing()}, strings={driver_key(PREFIX, "wc"): "registered"},
         streams={progress_history_key(PREFIX, "wc", "counts"): history})
    rest = FakeRest()
    world = SimpleNamespace(rest=rest, redis=redis, cfg=Config(apps=[AppConfig(name="wc")]))
    monkeypatch.setattr(collector, "driver_rest_at", registered(lambda app: world.rest))
    monkeypatch.setattr(driver_round, "APP_IDS", driver_round.AppIds())  # no application id kept from another test
    monkeypatch.setattr(collector, "LAST_OBSERVED", collect_reads.LastObserved())  # nothing observed by another test
    monkeypatch.setattr(collector, "connect_as", lambda cfg: world.redis)
    monkeypatch.setattr(collector, "sample_host", lambda sample_s: HostFigures(0.5, 0.25, 2, sample_s, "head"))
    monkeypatch.setattr(collector, "time", SimpleNamespace(time=lambda: T0 + 40, monotonic=time.monotonic))
    # No master here: the cluster view is the test's (None: loop.cluster_view off).
    world.cluster = None
    monkeypatch.setattr(collector, "cluster_extension", lambda cfg, app_id: world.cluster)
    return world


def test_one_snapshot_per_live_query_from_one_rest_round(world):
    snaps = collector.collect_snapshots(world.cfg, "wc", options=collector.CollectOptions(window_s=30))
    assert [s.query for s in snaps] == ["counts", "other"]  # not the terminated one
    counts, other = snaps
    assert [op.id for op in counts.operators] == ["source", "stage0", "stage1"]
    # The backlog: the latest report's 30, + 200 rec/s x the 3 s since it was measured.
    assert counts.operators[0].arrival_rate == pytest.approx(200) and counts.operators[0].backlog == 630
    assert counts.extensions["query"]["id"] == "qid-1" and counts.extensions["spark"]["app_id"]
    assert [op.id for op in other.operators] == ["source"] and other.operators[0].backlog is None
    # One round for the app; each stage of the window's batches once.
    assert world.rest.calls[0] == "application" and sorted(world.rest.calls[1:3]) == ["executors", "jobs"]
    stages = world.rest.calls[3:]
    assert len(stages) == len(set(stages)) and all(c.startswith("stage ") for c in stages)
    merged = collector.collect_snapshot(world.cfg, "wc", collector.CollectOptions(window_s=30))
    assert merged.query == "counts+other" and merged.operator("counts/stage1")


def test_executor_figures_come_from_spark_and_the_host_sample_names_its_host(world):
    counts, other = collector.collect_snapshots(world.cfg, "wc", options=collector.CollectOptions(window_s=30))
    # The window's tasks of every query count for the app's executors, so both snapshots say the same.
    assert counts.executors == other.executors and counts.extensions["app"] == other.extensions["app"]
    by_id = {e.id: e for e in counts.executors}
    assert set(by_id) == {"1", "2"} and {e.host for e in counts.executors} == {"127.0.0.1"}
    assert by_id["1"].extra["host_port"] == "127.0.0.1:41001"
    assert all(e.extra["cpu_fraction"] > 0 and e.extra["tasks"] > 0 for e in counts.executors)
    app = counts.extensions["app"]
    assert app["figures_from"] == "spark" and app["hosts"] == {"127.0.0.1": 2}
    assert app["cpu_cores_busy"] == pytest.approx(sum(e.extra["cpu_s"] for e in counts.executors) / 30, abs=1e-3)
    assert counts.extensions["host"]["hostname"] == "head" and counts.extensions["host"]["scope"] == "daemon host"
    assert "local_executors" not in app  # psutil no longer stands in for executors


def test_one_query_by_name(world):
    (snap,) = collector.collect_snapshots(world.cfg, "wc", "counts", collector.CollectOptions(window_s=30))
    assert snap.query == "counts"
    # The merged snapshot of one query is its own: what the daemon decided on before.
    world.redis.direct.hdel(queries_key(PREFIX, "wc"), "other", "gone")
    assert collector.collect_snapshot(world.cfg, "wc", collector.CollectOptions(window_s=30)).query == "counts"


def test_unnamed_query_jobs_are_found_by_query_id(world):
    # An unnamed query is listed by its id; its jobs carry an empty name and the id.
    jobs = parse_jobs([{**j, "description": (j.get("description") or "").replace("counts\n", "\n", 1)}
                       for j in load("jobs.json")])
    world.rest.jobs = lambda app_id: jobs
    world.redis.direct.delete(queries_key(PREFIX, "wc"))
    world.redis.direct.hset(queries_key(PREFIX, "wc"), "qid-1", info("qid-1", qid="qid-1"))
    world.redis.direct.rename(progress_history_key(PREFIX, "wc", "counts"), progress_history_key(PREFIX, "wc", "qid-1"))
    (snap,) = collector.collect_snapshots(world.cfg, "wc", options=collector.CollectOptions(window_s=30))
    assert snap.query == "qid-1" and [op.id for op in snap.operators] == ["source", "stage0", "stage1"]


def test_no_queries_yet_and_an_unknown_query(world):
    with pytest.raises(collector.NoQueriesYet, match=r"no query 'nope'.*counts, gone, other"):
        collector.collect_snapshots(world.cfg, "wc", "nope")
    world.redis.direct.delete(queries_key(PREFIX, "wc"))
    with pytest.raises(collector.NoQueriesYet, match="published no running query yet"):
        collector.collect_snapshots(world.cfg, "wc")


def test_a_driver_that_does_not_answer_is_not_running(world):
    world.redis.direct.delete(driver_key(PREFIX, "wc"))  # no registration
    with pytest.raises(collector.AppNotRunningError, match="not registered a REST URL"):
        collector.collect_snapshots(world.cfg, "wc")


def test_snapshot_command_prints_one_object_per_query_or_a_list(world, monkeypatch):
    monkeypatch.setattr(offline, "collect_snapshots", collector.collect_snapshots)
    base = ["--app", "wc", "--window-s", "30", "--set", "apps=[{name: wc}]", "--set", "logging.stderr=false"]
    runner = CliRunner(env={"SPARKSCALE_CONFIG": None})
    both = runner.invoke(offline.snapshot_command, base)
    assert both.exit_code == 0, both.output
    assert [s["query"] for s in json.loads(both.stdout)] == ["counts", "other"]
    one = runner.invoke(offline.snapshot_command, [*base, "--query", "counts"])
    assert one.exit_code == 0, one.output
    assert Snapshot.from_json(one.stdout).query == "counts"
    unknown = runner.invoke(offline.snapshot_command, [*base, "--query", "nope"])
    assert unknown.exit_code == 2 and "no query 'nope'" in unknown.stderr


def test_status_shows_each_query(world):
    counts, other = collector.collect_snapshots(world.cfg, "wc", options=collector.CollectOptions(window_s=30))
    views = (query_view(counts, 2), query_view(other, None))
    assert views[0] == QueryView("counts", 200.0, "position", 630.0, "source_metrics", 2)
    assert views[0].summary() == "counts: 200 rec/s (position), backlog 630 (source_metrics), 2 partitions"
    assert views[1].backlog_records is None and "backlog unknown" in views[1].summary()
    status = AppStatus("d", "leader", 1, T0, "ok", queries=views)
    assert AppStatus.from_dict(json.loads(json.dumps(status.to_dict()))) == status
    table = status_table([AppLine("wc", "d", status)], T0 + 10)
    assert "  wc/counts: 200 rec/s (position), backlog 630 (source_metrics), 2 partitions" in table.splitlines()
    assert "  wc/other: 0 rec/s (input_rate), backlog unknown" in table.splitlines()


def test_every_snapshot_carries_where_the_executors_run(world, monkeypatch):
    asked = []
    cluster = {"app_id": "x", "workers": [{"id": "w1", "host": "127.0.0.2", "cores_free": 6, "memory_free_mb": 7168,
                                           "executors": ["1", "2"]}], "unreachable": [], "requests": 2}

    def extension(cfg, app_id):
        asked.append(app_id)
        return {**cluster, "app_id": app_id}

    world.cluster = None
    counts, _other = collector.collect_snapshots(world.cfg, "wc", options=collector.CollectOptions(window_s=30))
    assert "cluster" not in counts.extensions  # loop.cluster_view off
    monkeypatch.setattr(collector, "cluster_extension", extension)
    snaps = collector.collect_snapshots(world.cfg, "wc", options=collector.CollectOptions(window_s=30))
    app_id = snaps[0].extensions["spark"]["app_id"]
    assert asked == [app_id]  # one view a round, for every query's snapshot
    assert all(s.extensions["cluster"]["workers"][0]["executors"] == ["1", "2"] for s in snaps)
    merged = collector.collect_snapshot(world.cfg, "wc", collector.CollectOptions(window_s=30))
    assert merged.extensions["cluster"]["app_id"] == app_id  # shared, at the top of the app's snapshot
    assert Snapshot.from_json(merged.to_json()) == merged


# -- what one cycle waits on (issue 33) --------------------------------------------------------------


def without_costs(snapshot: Snapshot) -> dict[str, Any]:
    """The snapshot less what reading it cost (requests, seconds)."""
    out = json.loads(snapshot.to_json())
    spark = out["extensions"]["spark"]
    costs = ("rest_requests", "collect_s", "collect_parts_s", "rest_cpu_s")
    out["extensions"]["spark"] = {k: v for k, v in spark.items() if k not in costs}
    return out


def test_the_application_id_is_asked_once_per_driver_and_again_after_a_404(world):
    opts = collector.CollectOptions(window_s=30)
    first = collector.collect_snapshots(world.cfg, "wc", options=opts)
    asked = list(world.rest.calls)
    assert asked[0] == "application" and first[0].extensions["spark"]["rest_requests"] == len(asked)
    world.rest.calls.clear()
    again = collector.collect_snapshots(world.cfg, "wc", options=opts)
    assert sorted(world.rest.calls) == ["executors", "jobs"]  # its stages are kept, its id too
    assert again[0].extensions["spark"]["rest_requests"] == 2
    assert [without_costs(s) for s in again] == [without_costs(s) for s in first]  # the same figures
    # The driver started again on the same URL: the kept id answers 404, and is asked again.
    world.rest.calls.clear()
    executors = world.rest.executors
    answers = [SparkRestError("http://x/executors", "HTTP 404 Not Found", status=404)]

    def once_gone(app_id: str):
        world.rest.calls.append("executors")
        if answers:
            raise answers.pop()
        return executors(app_id)

    world.rest.executors = once_gone
    renewed = collector.collect_snapshots(world.cfg, "wc", options=opts)
    assert world.rest.calls.count("application") == 1 and renewed[0].extensions["spark"]["rest_requests"] == 5


def test_a_driver_silent_on_the_first_request_of_a_round_is_not_running(world):
    collector.collect_snapshots(world.cfg, "wc", options=collector.CollectOptions(window_s=30))

    def silent(app_id: str):
        raise SparkRestError("http://x/executors", "no answer (refused)", unreachable=True)

    world.rest.executors = silent
    with pytest.raises(collector.AppNotRunningError, match="not running"):
        collector.collect_snapshots(world.cfg, "wc")


def test_redis_is_read_in_two_round_trips_on_the_given_client(world, monkeypatch):
    opened: list[object] = []
    monkeypatch.setattr(collector, "connect_as", lambda cfg: opened.append(cfg) or world.redis)
    world.redis.direct.hset(queries_key(PREFIX, "wc"), "third", info("third"))  # three live queries
    snaps = collector.collect_snapshots(world.cfg, "wc", options=collector.CollectOptions(window_s=30),
                                        client=world.redis)  # type: ignore[arg-type]
    assert [s.query for s in snaps] == ["counts", "other", "third"]
    # The query list, then the executor target and every query's progress in one pipeline.
    assert world.redis.round_trips == 2 and opened == [] and world.redis.closed == 0
    assert snaps[0].operators[0].arrival_rate == pytest.approx(200)  # the pipelined progress is read
    # Without a client (a one-shot command): one opened for the call, and closed.
    collector.collect_snapshots(world.cfg, "wc", options=collector.CollectOptions(window_s=30))
    assert len(opened) == 1 and world.redis.closed == 1


def test_a_ride_reads_for_the_observed_queries_in_the_collects_last_round_trip(world):
    world.redis.direct.hset("extra", "a", "1")
    asked: list[list[str]] = []

    def ride(pipe: Any, queries: Any) -> Any:
        asked.append(list(queries))
        pipe.hgetall("extra")
        return lambda replies, taken_at: (list(replies), taken_at)

    snaps, ridden = collector.collect_riding(world.cfg, "wc", ride, options=collector.CollectOptions(window_s=30),
                                             client=world.redis)  # type: ignore[arg-type]
    assert asked == [["counts", "other"]] and ridden == ([{"a": "1"}], snaps[0].taken_at)
    assert world.redis.round_trips == 2  # the registration and the list; the histories and the ride


def test_error_replies_read_as_an_unregistered_driver_or_no_query_and_raise_for_a_history(world):
    opts = collector.CollectOptions(window_s=30)
    client = world.redis.direct
    make_wrong_type(client, driver_key(PREFIX, "wc"))
    with pytest.raises(collector.AppNotRunningError, match="registration in Redis is unreadable"):
        collector.collect_snapshots(world.cfg, "wc", options=opts)
    client.set(driver_key(PREFIX, "wc"), "registered")
    make_wrong_type(client, queries_key(PREFIX, "wc"))
    with capture_logs() as events, pytest.raises(collector.NoQueriesYet):
        collector.collect_snapshots(world.cfg, "wc", options=opts)
    assert [e["key"] for e in events if e["event"] == "store.bad_record"] == [queries_key(PREFIX, "wc")]
    client.delete(queries_key(PREFIX, "wc"))
    client.hset(queries_key(PREFIX, "wc"), mapping=listing())
    make_wrong_type(client, progress_history_key(PREFIX, "wc", "counts"))
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        collector.collect_snapshots(world.cfg, "wc", options=opts)


def test_n_apps_cycles_read_the_master_once(world, monkeypatch):
    from sparkscale.monitors import cluster_view

    reads: list[str] = []

    def fetch(url: str, timeout_s: float) -> cluster_view.ClusterView:
        reads.append(url)
        return cluster_view.build_view({"workers": [], "aliveworkers": 0}, {})

    monkeypatch.setattr(collector, "cluster_extension", cluster_view.cluster_extension)
    monkeypatch.setattr(cluster_view, "fetch_cluster_view", fetch)
    monkeypatch.setattr(cluster_view, "RECENT", cluster_view.RecentView())
    names = [f"wc{i}" for i in range(5)]
    cfg = Config(apps=[AppConfig(name=n) for n in names], loop={"cluster_view_max_age_s": 60})
    rests = {n: FakeRest(f"http://127.0.0.{i + 1}:4040/api/v1") for i, n in enumerate(names)}
    monkeypatch.setattr(collector, "driver_rest_at", registered(lambda app: rests[app.name]))
    for n in names:
        world.redis.direct.set(driver_key(PREFIX, n), "registered")
        world.redis.direct.hset(queries_key(PREFIX, n), "counts", info("counts", qid="qid-1"))
        world.redis.direct.copy(progress_history_key(PREFIX, "wc", "counts"), progress_history_key(PREFIX, n, "counts"))
    costs = [collector.collect_snapshot(cfg, n, collector.CollectOptions(window_s=30)).extensions["cluster"]["requests"]
             for n in names]
    assert len(reads) == 1 and costs == [1, 0, 0, 0, 0]  # one master read for the apps of a round
    assert all(r.calls[0] == "application" for r in rests.values())  # each driver asked its own id


def test_the_window_stages_are_fetched_side_by_side_and_at_most_so_many_at_once(world, monkeypatch):
    from sparkscale.monitors import stage_cache

    monkeypatch.setattr(driver_round, "STAGES", stage_cache.StageCache())
    lock, in_flight, most = threading.Lock(), [0], [0]
    both = threading.Barrier(2, timeout=5)  # two stage requests must be in flight together
    fetch = world.rest.stage_attempts

    def stage_attempts(app_id: str, stage_id: int):
        with lock:
            in_flight[0] += 1
            most[0] = max(most[0], in_flight[0])
        try:
            with contextlib.suppress(threading.BrokenBarrierError):
                both.wait()
            time.sleep(0.02)
            return fetch(app_id, stage_id)
        finally:
            with lock:
                in_flight[0] -= 1

    world.rest.stage_attempts = stage_attempts
    (counts, _other) = collector.collect_snapshots(world.cfg, "wc", options=collector.CollectOptions(window_s=30))
    fetched = [c for c in world.rest.calls if c.startswith("stage ")]
    assert len(fetched) >= 3 and not both.broken  # the first two met: they were asked at once
    assert 2 <= most[0] <= driver_round.REST_CONCURRENCY
    assert counts.extensions["spark"]["rest_requests"] == 3 + len(fetched)


def test_the_rest_threads_cpu_is_counted_for_the_cycle(world):
    pool = driver_round.MeteredPool(2)
    with pool:
        burn = [pool.submit(lambda: sum(i * i for i in range(200_000))) for _ in range(2)]
        assert all(f.result() > 0 for f in burn)
    assert pool.cpu_s > 0  # the threads' own CPU, which the cycle thread's clock does not see
    (counts, _other) = collector.collect_snapshots(world.cfg, "wc", options=collector.CollectOptions(window_s=30))
    assert counts.extensions["spark"]["rest_cpu_s"] >= 0 and set(counts.extensions["spark"]["collect_parts_s"]) == {
        "driver", "redis", "stages", "cluster"}
