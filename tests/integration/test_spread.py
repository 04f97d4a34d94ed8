"""The spread rule for real (E-Storm's replica-aware placement on Spark): a stateful wordcount with 2
executors over 2 workers on their own addresses (127.0.0.2, 127.0.0.3), a daemon with DS2 on it.

- at the start each worker holds one executor (the master spreads at launch);
- SIGKILL of one worker with its executors: the app recovers on the other (the master relaunches the
  lost executor there: the app's target is still 2), which then holds both;
- the worker comes back (`cluster up` again): nothing moves by itself; the daemon sees the crowding
  in the cluster view and carries out one `replace_executor` whose reason names the spread; after
  it each worker holds one executor again;
- `sparkscale cluster-plan` then shows both workers, one executor on each, and the shuffle between
  them (the placement policies' live model);
- nothing lost or duplicated (the verifier).
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from click.testing import CliRunner

from sparkscale.apps.submit import submit
from sparkscale.cli import main
from sparkscale.config import Config
from sparkscale.daemon.action_log import ActionLog
from sparkscale.localenv import LocalEnvironment
from sparkscale.monitors.cluster_view import fetch_cluster_view
from sparkscale.monitors.spark_master import SparkUnreachable
from sparkscale.monitors.spark_rest import SparkRestError, driver_rest
from sparkscale.redisconn import connect
from sparkscale_lab.bench.daemon_process import DaemonProcess
from sparkscale_lab.pipelines.check import drained, verify_app
from sparkscale_lab.pipelines.loadgen import run_loadgen
from tests.conftest import wait_until
from tests.integration.two_hosts import WORKER_HOSTS, two_host_environment

pytestmark = pytest.mark.integration

APP = "wcspread"
KILLED = "spark-worker-2"  # the worker on 127.0.0.3
RATE = 500

CONFIG = f"""
apps:
  - name: {APP}
    pipeline: wordcount
    min_executors: 2
    max_executors: 2
    initial_executors: 2
    executor_memory_mb: 512
    source_partitions: 2
    shuffle_partitions: 2
loop: {{interval_s: 5.0, window_s: 15.0, cooldown_s: 20.0, stabilization_s: 0.0}}
policy: {{name: ds2}}
guards: {{spread_hold_s: 120.0}}
actuator: {{ack_timeout_s: 30.0, confirm_timeout_s: 90.0}}
metrics: {{port: 0}}
"""


@pytest.fixture(scope="module")
def spread_env(tmp_path_factory) -> Iterator[tuple[Config, str, list[str], Path]]:
    work = tmp_path_factory.mktemp("spread")
    with two_host_environment(work, CONFIG, APP) as (cfg, path, overrides):
        yield cfg, path, overrides, work


def per_worker(cfg: Config) -> dict[str, int] | None:
    """The app's active executors per ALIVE worker's host (None: not known right now)."""
    try:
        rest = driver_rest(cfg, cfg.app(APP), timeout_s=5)
        app_id = rest.application(APP).id
        active = {e.id for e in rest.executors(app_id) if e.active}
        view = fetch_cluster_view(cfg.spark.master_web_url, 5.0)
    except (SparkRestError, SparkUnreachable):
        return None
    if view.unreachable:
        return None
    placed = {e: w for e, w in view.app_executors(app_id).items() if e in active}
    if set(placed) != active:
        return None  # an executor on no worker that answered: starting, or being removed
    return {w.host: sum(1 for wid in placed.values() if wid == w.id) for w in view.alive}


def kill_worker(cfg: Config, name: str) -> int:
    """SIGKILL the worker `name` with everything it started (its executors); the executors killed."""
    status = next(s for s in LocalEnvironment(cfg).status() if s.name == name)
    assert status.running and status.pid is not None, status
    worker = psutil.Process(status.pid)
    children = worker.children(recursive=True)
    for proc in [worker, *children]:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    psutil.wait_procs([worker, *children], timeout=10)
    return len(children)


def spread_moves(cfg: Config) -> list:
    """The daemon's carried-out spread moves (replace_executor done, the reason naming the spread)."""
    logged = ActionLog(connect(cfg.redis), cfg.redis.key_prefix).read(APP)
    return [(d, r) for d in logged for r in d.results or ()
            if r.action.type == "replace_executor" and r.status == "done" and r.action.reason.startswith("spread:")]


def test_the_daemon_restores_the_spread_after_a_worker_comes_back(spread_env):
    cfg, path, overrides, work = spread_env
    one_each = dict.fromkeys(WORKER_HOSTS, 1)
    submit(cfg, APP, path, overrides)
    daemon = DaemonProcess(path, overrides, work / "daemon.jsonl", "spread-daemon")
    stop_load = threading.Event()
    loader = threading.Thread(target=run_loadgen, args=(cfg, APP, f"constant:{RATE}@600s"),
                              kwargs={"seed": 11, "stop": stop_load}, daemon=True)
    try:
        # The master spreads at launch (spark.deploy.spreadOutApps): one executor on each worker.
        wait_until(lambda: per_worker(cfg) == one_each, 120, "one executor of the app on each worker")
        loader.start()
        wait_until(lambda: daemon.events("cycle", app=APP), 90, "the daemon's first cycle")
        assert not spread_moves(cfg)

        # One worker dies with its executor: the app recovers on the other, which holds both.
        assert kill_worker(cfg, KILLED) >= 1
        wait_until(lambda: per_worker(cfg) == {WORKER_HOSTS[0]: 2}, 120,
                   "the lost executor relaunched on the surviving worker")

        # The worker comes back: Spark moves nothing; the daemon moves one executor back.
        LocalEnvironment(cfg).up()
        wait_until(lambda: (per_worker(cfg) or {}).get(WORKER_HOSTS[1]) is not None, 60,
                   "the returned worker in the master's view")
        wait_until(lambda: spread_moves(cfg), 180, "a spread move by the daemon",
                   story=lambda: f"per worker: {per_worker(cfg)}; last cycles: {daemon.events('cycle', app=APP)[-3:]}")
        wait_until(lambda: per_worker(cfg) == one_each, 60, "one executor on each worker again")
        (decision, result), *more = spread_moves(cfg)
        assert not more, "one move was enough"  # the master placed the replacement on the returned worker
        assert "holds 2 of the app's 2 executors, above ceil(2/2) = 1 per worker" in result.action.reason
        assert decision.decision.plan.observation.figures["spread_at_risk"] == 1.0
        acted = daemon.events("cycle", app=APP, mode="acted")
        assert any(a.startswith("replace_executor") for e in acted for a in e["actions"])

        # The cluster as the placement policies see it, live: both workers, one executor each, and,
        # once both run the query's tasks again (the replacement gets its state partitions back over
        # some batches), the wordcount's shuffle between the two hosts (issue 20's model).
        args = ["cluster-plan", "--config", path, *(x for o in overrides for x in ("--set", o)), "--policy", "otd",
                "--json"]
        seen: list[dict] = []

        def model_with_traffic() -> bool:
            shown = CliRunner().invoke(main, args)
            assert shown.exit_code == 0, shown.output
            seen.append(json.loads(shown.stdout)["model"])
            return sum(t["bytes_per_s"] for t in seen[-1]["traffic"]) > 0

        wait_until(model_with_traffic, 120, "shuffle between the two executors in cluster-plan's model",
                   story=lambda: f"last model: {seen[-1] if seen else None}")
        model = seen[-1]
        assert sorted(w["host"] for w in model["workers"]) == list(WORKER_HOSTS)
        assert sorted(e["worker"] for e in model["executors"]) == sorted(w["id"] for w in model["workers"])

        stop_load.set()
        loader.join(30)
        client = connect(cfg.redis)
        wait_until(lambda: drained(client, cfg, cfg.app(APP)), 240, f"{APP} to process all its input")
        verified = verify_app(cfg, APP)
        assert (verified.lost, verified.duplicated, verified.unexpected) == (0, 0, 0), verified.summary()
    finally:
        stop_load.set()
        daemon.stop()
    assert daemon.proc.returncode == 0
