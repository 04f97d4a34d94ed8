"""Nothing may silently assume one host: an embedded environment whose two workers bind and advertise
127.0.0.2 and 127.0.0.3 (master, Redis, ZooKeeper, driver and daemon side on 127.0.0.1), a wordcount
under ~30 s of load on it, and what Spark, the monitor and a manual scale-out then say.

- the master lists the workers on their own addresses, and each worker's web UI answers there only;
- every executor advertises its worker's address (`hostPort` in the driver's REST API, and
  `--hostname` on its command line), none 127.0.0.1;
- the snapshot's executors carry those hosts and CPU figures from Spark's task metrics (> 0 under
  load), and process-tree RSS from Spark's executor metrics;
- `sparkscale scale-executors --to 2` lands a second executor on a worker's address, and the next
  snapshot sees both.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from sparkscale.apps.submit import submit
from sparkscale.cli import main
from sparkscale.config import Config
from sparkscale.model.snapshot import Snapshot
from sparkscale.monitors.collector import AppNotRunningError, CollectOptions, NoQueriesYet, collect_snapshot
from sparkscale.monitors.host import executor_processes
from sparkscale.monitors.spark_master import get_json
from sparkscale.monitors.spark_rest import SparkRestError, driver_rest, host_of
from sparkscale_lab.pipelines.loadgen import run_loadgen
from tests.conftest import wait_until
from tests.integration.two_hosts import WORKER_HOSTS, two_host_environment

pytestmark = pytest.mark.integration

APP = "wchosts"
LOOPBACK = "127.0.0.1"
RATE = 1000
MAX_LOAD_S = 90  # the load stops as soon as the test has what it needs (~30 s)
WINDOW_S = 15.0

CONFIG = f"""
apps:
  - name: {APP}
    pipeline: wordcount
    min_executors: 1
    max_executors: 2
    initial_executors: 1
    executor_memory_mb: 512
    source_partitions: 2
    shuffle_partitions: 2
loop:
  window_s: {WINDOW_S}
"""


@pytest.fixture(scope="module")
def hosts_env(tmp_path_factory) -> Iterator[tuple[Config, str, list[str]]]:
    with two_host_environment(tmp_path_factory.mktemp("hosts"), CONFIG, APP) as (cfg, path, overrides):
        assert cfg.spark.master_host == LOOPBACK and cfg.spark.driver_host == LOOPBACK
        yield cfg, path, overrides


def answers(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        return sock.connect_ex((host, port)) == 0


def rest_executors(cfg: Config) -> list[dict]:
    """The driver's raw `/executors` answer, active executors only (the driver left out)."""
    rest = driver_rest(cfg, cfg.app(APP), timeout_s=5)
    app_id = rest.application(APP).id
    return [e for e in rest.get_json(f"applications/{app_id}/executors")
            if e["id"] != "driver" and e.get("isActive", True)]


def active_count(cfg: Config) -> int | None:
    try:
        return len(rest_executors(cfg))
    except SparkRestError:
        return None


def loaded_snapshot(cfg: Config) -> Snapshot | None:
    """A snapshot with a few batches in its window and CPU on its executors, else None (not yet)."""
    try:
        snap = collect_snapshot(cfg, APP, CollectOptions(window_s=WINDOW_S))
    except (AppNotRunningError, NoQueriesYet):
        return None
    busy = snap.executors and all((e.extra.get("cpu_s") or 0) > 0 for e in snap.executors)
    return snap if len(snap.extensions["monitor"]["batches"]) >= 3 and busy else None


def test_workers_and_executors_on_their_own_addresses(hosts_env):
    cfg, path, overrides = hosts_env

    # The master lists the workers on their own addresses; each web UI answers there and not on 127.0.0.1.
    workers = [w for w in get_json(f"{cfg.spark.master_web_url}/json/", 5)["workers"] if w["state"] == "ALIVE"]
    assert sorted(w["host"] for w in workers) == sorted(WORKER_HOSTS), workers
    for w in workers:
        ui_host, ui_port = w["webuiaddress"].removeprefix("http://").rsplit(":", 1)
        assert ui_host == w["host"], w
        assert answers(ui_host, int(ui_port)) and not answers(LOOPBACK, int(ui_port)), w

    submit(cfg, APP, path, overrides)
    # Standalone starts as many executors as cores.max allows; the agent trims to initial_executors.
    wait_until(lambda: active_count(cfg) == 1, 90, "the app to settle at 1 executor")

    stop_load = threading.Event()
    done = threading.Event()

    def load() -> None:
        try:
            run_loadgen(cfg, APP, f"constant:{RATE}@{MAX_LOAD_S}s", seed=3, stop=stop_load)
        finally:
            done.set()

    loader = threading.Thread(target=load, daemon=True)
    loader.start()
    try:
        snap = wait_until(lambda: loaded_snapshot(cfg) or done.is_set(), 60, "a snapshot of a loaded window")
        assert isinstance(snap, Snapshot), "the load generator stopped early"

        # Spark: every executor advertises a worker's address, none 127.0.0.1; the driver stays there.
        raw = rest_executors(cfg)
        hosts = {host_of(e["hostPort"]) for e in raw}
        assert hosts and hosts <= set(WORKER_HOSTS) and LOOPBACK not in hosts, raw
        app_id = snap.extensions["spark"]["app_id"]
        for proc in executor_processes(app_id):  # started by the worker with --hostname <its host>
            cmdline = proc.cmdline()
            assert cmdline[cmdline.index("--hostname") + 1] in WORKER_HOSTS, cmdline

        # The monitor: the executors' hosts, and CPU from Spark's task metrics.
        assert len(snap.executors) == 1
        (executor,) = snap.executors
        assert executor.host in WORKER_HOSTS
        assert executor.extra["host_port"] in {e["hostPort"] for e in raw}
        assert executor.extra["cpu_s"] > 0 and 0 < executor.extra["cpu_fraction"] <= 1
        assert executor.extra["tasks"] > 0 and executor.extra["task_time_fraction"] >= executor.extra["cpu_fraction"]
        app = snap.extensions["app"]
        assert app["figures_from"] == "spark" and set(app["hosts"]) <= set(WORKER_HOSTS)
        assert app["cpu_fraction"] > 0
        assert snap.extensions["host"]["scope"] == "daemon host"
        print("executor figures:", json.dumps(executor.to_dict()))

        # A manual scale-out through the CLI (no daemon runs: the command takes the lock itself).
        sets = [x for s in overrides for x in ("--set", s)]
        out = CliRunner().invoke(main, ["scale-executors", "--app", APP, "--to", "2", "--config", path, *sets])
        assert out.exit_code == 0, out.output
        wait_until(lambda: active_count(cfg) == 2, 60, "the REST API to show 2 executors")
        raw = rest_executors(cfg)
        assert {host_of(e["hostPort"]) for e in raw} <= set(WORKER_HOSTS), raw
        after = collect_snapshot(cfg, APP, CollectOptions(window_s=WINDOW_S))
        assert len(after.executors) == 2 and {e.host for e in after.executors} <= set(WORKER_HOSTS)
        print("executors after the scale-out on:", sorted(e.host for e in after.executors))

        # Spark's executor metrics: the process tree's RSS once the executor has sent a heartbeat
        # (spark.executor.processTreeMetrics.enabled, set by submit).
        memory = next(e for e in after.executors if e.id == executor.id).extra["memory"]
        assert memory["peak_rss_bytes"] and memory["peak_rss_bytes"] > 0, memory
        assert memory["peak_jvm_heap_bytes"] and memory["storage_total_bytes"] > 0, memory
    finally:
        stop_load.set()
        done.wait(30)
        loader.join(5)
