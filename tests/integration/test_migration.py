"""Migrations for real: each strategy moves a running stateful query up to 8 and then down to 2
state partitions under a constant load (the first from its 4), on the embedded environment, through `sparkscale
migrate`; afterwards the query runs with the new partitions and the verifier finds nothing lost
(and, for DCR and CCR, nothing duplicated), the sink's counts equal a direct computation."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from sparkscale.apps.submit import stop, submit
from sparkscale.cli import main
from sparkscale.config import Config, load_config
from sparkscale.daemon.action_log import ActionLog
from sparkscale.redisconn import connect
from sparkscale_lab.pipelines.check import drained, verify_app
from sparkscale_lab.pipelines.loadgen import run_loadgen
from tests.conftest import wait_until

pytestmark = pytest.mark.integration

CONFIG = """
apps:
  - name: mwc
    pipeline: wordcount
    max_executors: 2
    initial_executors: 2
    executor_memory_mb: 512
    source_partitions: 2
    shuffle_partitions: 4
    max_records_per_batch: 2000
  - name: mstar
    pipeline: dag
    max_executors: 2
    initial_executors: 2
    executor_memory_mb: 512
    source_partitions: 2
    shuffle_partitions: 4
    max_records_per_batch: 500
    dag: {shape: star, cost_ms_per_record: 0.2, selectivity: 1.0, key_space: 40}
migration: {phase_timeout_s: 120, stable_window_s: 5, measure_timeout_s: 15}
"""


@pytest.fixture(scope="module")
def setup(embedded_env, tmp_path_factory) -> tuple[Config, str, list[str]]:
    path = tmp_path_factory.mktemp("migration") / "sparkscale.yaml"
    path.write_text(CONFIG)
    overrides = [*embedded_env.overrides, "logging.stderr_format=json", "logging.level=warning"]
    return load_config(path, overrides), str(path), overrides


def state_partitions(cfg: Config, app: str, query: str) -> int | None:
    value = connect(cfg.redis).hget(f"{cfg.redis.key_prefix}{app}:progress:{query}", "state_partitions")
    return int(value) if value else None


def migrate(setup, app: str, partitions: int | None, strategy: str, *shape: str) -> list[dict]:
    _cfg, path, overrides = setup
    sets = [x for s in overrides for x in ("--set", s)]
    target = ["--partitions", str(partitions)] if partitions is not None else []
    out = CliRunner().invoke(main, ["migrate", "--app", app, *target, "--strategy", strategy, *shape,
                                    "--json", "--config", path, *sets])
    lines = [json.loads(line) for line in out.output.strip().splitlines() if line.startswith("{")]
    assert out.exit_code == 0, out.output
    return lines


def listed_follow_up(setup, app: str, migration: str) -> dict:
    """The follow-up figures `migrate --list --json` shows for `migration` ({} if none)."""
    _cfg, path, overrides = setup
    sets = [x for s in overrides for x in ("--set", s)]
    out = CliRunner().invoke(main, ["migrate", "--list", "--app", app, "--json", "--config", path, *sets])
    assert out.exit_code == 0, out.output
    listed = [m for m in json.loads(out.stdout) if m["id"] == migration]
    return (listed[0].get("follow_up") or {}) if listed else {}


def fresh(cfg: Config, app: str) -> None:
    """Forget an app's input, output, progress and checkpoints: each test judges its own run."""
    import shutil

    from sparkscale.apps.submit import checkpoint_root

    client = connect(cfg.redis)
    for key in client.scan_iter(f"{cfg.redis.key_prefix}{app}:*"):
        client.delete(key)
    shutil.rmtree(checkpoint_root(cfg, cfg.app(app)), ignore_errors=True)


@pytest.mark.parametrize(("app", "query", "rate", "strategies"), [
    ("mwc", "counts", 400, ("dcr", "ccr", "dsm")),
    # CCR on the dag pipeline: the daemon's partition-bound migration (test_daemon.py).
    ("mstar", "dag", 60, ("dcr", "dsm")),
])
def test_each_strategy_rescales_state_up_then_down_without_loss(setup, app, query, rate, strategies):
    """DCR, CCR, then DSM (whose recomputed batch may duplicate, so it goes last), each under its own
    constant load, each up to 8 partitions and down to 2 (the first from 4, the next from the 2 the
    one before left); after each, drain and verify everything the app was ever sent."""
    import threading

    cfg, path, overrides = setup
    client = connect(cfg.redis)
    fresh(cfg, app)
    submit(cfg, app, path, overrides)
    stop_load = threading.Event()
    try:
        wait_until(lambda: state_partitions(cfg, app, query) is not None or client.exists(
            f"{cfg.redis.key_prefix}{app}:progress:{query}"), 90, "the query to report progress")
        partitions = 4
        for n, strategy in enumerate(strategies):
            stop_load.clear()
            loader = threading.Thread(target=run_loadgen, args=(cfg, app, f"constant:{rate}"), daemon=True,
                                      kwargs={"seed": 20 + n, "stop": stop_load})
            loader.start()
            wait_until(lambda partitions=partitions: state_partitions(cfg, app, query) == partitions, 90,
                       f"batches with {partitions} partitions under load")
            for target in (8, 2):
                out = migrate(setup, app, target, strategy)
                phases = [line["phase"] for line in out if "phase" in line]
                assert phases[0] == "requested" and phases[-1] == "done", phases
                result = out[-1]
                assert result["ok"] and result["figures"]["strategy"] == strategy, result
                assert result["figures"]["restore_s"] is not None and result["figures"]["rebalance_s"] > 0
                # Followed afterwards (`migrate` returns once done; `--list` measures what is still
                # pending): what arrived before the request is processed.
                migration = result["figures"]["migration"]
                wait_until(lambda migration=migration: listed_follow_up(setup, app, migration).get("catch_up_s")
                           is not None, 60, f"{strategy}: the catch-up of {migration} in migrate --list")
                partitions = target
                wait_until(lambda partitions=partitions: state_partitions(cfg, app, query) == partitions, 60,
                           f"{strategy}: batches with {partitions} partitions")
            stop_load.set()
            loader.join()
            wait_until(lambda: drained(client, cfg, cfg.app(app)), 180, f"{app} to process all its input")
            result = verify_app(cfg, app)
            assert result.lost == 0 and result.unexpected == 0, (strategy, result.summary())
            if strategy in ("dcr", "ccr"):
                assert result.duplicated == 0, (strategy, result.summary())
            # The migrations are in the action log, with their metrics.
            logged = [d for d in ActionLog(client, cfg.redis.key_prefix).read(app)
                      if d.decision.plan.actions and d.decision.plan.actions[0].type == "set_parallelism"]
            assert [d.results[0].status for d in logged[-2:]] == ["done", "done"]
            assert logged[-1].results[0].figures["strategy"] == strategy
    finally:
        stop_load.set()
        stop(cfg, app)


def test_a_new_executor_shape_restarts_the_whole_app_without_loss(setup):
    """CCR to 8 partitions with 2 cores and 768 MiB per executor: the application restarts (a new
    driver) with executors of the new shape and batches on the new partitions; the shape is stored
    for every later submit (apps/submit.py `with_shape`, unit-tested in tests/unit/test_store.py);
    nothing is lost or duplicated."""
    import threading

    from sparkscale.apps.submit import running, stored_shape
    from sparkscale.monitors.spark_rest import driver_rest

    cfg, path, overrides = setup
    app, query = "mwc", "counts"
    client = connect(cfg.redis)

    def shape_in_spark() -> tuple[set[int], str | None]:
        # The driver's REST URL as its agent published it: a restarted driver has a new one.
        rest = driver_rest(cfg, cfg.app(app), timeout_s=5)
        app_id = rest.application(app).id
        props = dict(rest.get_json(f"applications/{app_id}/environment")["sparkProperties"])
        return {e.cores for e in rest.executors(app_id)}, props.get("spark.executor.memory")

    fresh(cfg, app)
    submit(cfg, app, path, overrides)
    stop_load = threading.Event()
    loader = threading.Thread(target=run_loadgen, args=(cfg, app, "constant:400"), daemon=True,
                              kwargs={"seed": 31, "stop": stop_load})
    try:
        loader.start()
        wait_until(lambda: state_partitions(cfg, app, query) == 4, 90, "batches under load")
        assert shape_in_spark() == ({1}, "512m")
        first_driver = running(cfg, app).pid

        out = migrate(setup, app, 8, "ccr", "--executor-cores", "2", "--executor-memory-mb", "768")
        result = out[-1]
        assert result["ok"], result
        assert "executors restarted as 2 core(s), 768 MiB" in result["detail"]
        assert [line["phase"] for line in out if "phase" in line][-1] == "done"
        assert running(cfg, app).pid != first_driver, "the whole application was restarted"
        wait_until(lambda: shape_in_spark()[0] == {2}, 60, "executors with 2 cores")
        assert shape_in_spark()[1] == "768m"
        wait_until(lambda: state_partitions(cfg, app, query) == 8, 60, "batches with 8 partitions")
        shape = stored_shape(client, cfg.redis.key_prefix, app)
        assert (shape.executor_cores, shape.executor_memory_mb) == (2, 768)

        stop_load.set()
        loader.join()
        wait_until(lambda: drained(client, cfg, cfg.app(app)), 180, f"{app} to process all its input")
        verified = verify_app(cfg, app)
        assert (verified.lost, verified.duplicated, verified.unexpected) == (0, 0, 0), verified.summary()
    finally:
        stop_load.set()
        stop(cfg, app)
        fresh(cfg, app)


def test_a_failure_after_the_repartition_leaves_the_app_running_with_its_sources_resumed(setup, monkeypatch):
    """CCR 4 -> 8 whose restart step fails (SPARKSCALE_MIGRATION_FAIL=restarted, read by the runner,
    which `migrate` runs in this process: the step fails before it runs, so the query is stopped on
    8 partitions with its sources paused, where a failure used to leave it): the runner restarts it
    forward and resumes the sources (`done_degraded`), and nothing is lost or duplicated."""
    import threading

    from kazoo.client import KazooClient

    from sparkscale.actuators.migration import JournalStore
    from sparkscale_lab.bench.migration_faults import FAULT_FAIL_ENV, install

    install()  # the runner's phase hooks read FAULT_FAIL_ENV (nothing happens while it is unset)
    from sparkscale.protocol.keys import paused_key

    cfg, path, overrides = setup
    app, query = "mwc", "counts"
    client = connect(cfg.redis)
    fresh(cfg, app)
    submit(cfg, app, path, overrides)
    stop_load = threading.Event()
    loader = threading.Thread(target=run_loadgen, args=(cfg, app, "constant:400"), daemon=True,
                              kwargs={"seed": 41, "stop": stop_load})
    zk = KazooClient(hosts=cfg.zookeeper.hosts)
    zk.start(timeout=15)
    try:
        loader.start()
        wait_until(lambda: state_partitions(cfg, app, query) == 4, 90, "batches with 4 partitions under load")
        monkeypatch.setenv(FAULT_FAIL_ENV, "restarted")
        out = migrate(setup, app, 8, "ccr")  # exit 0: recovered forward counts as done
        monkeypatch.delenv(FAULT_FAIL_ENV)
        result = out[-1]
        assert result["ok"] and result["figures"]["status"] == "done_degraded", result
        assert f"done_degraded: restarted: injected failure before restarted ({FAULT_FAIL_ENV}" in result["detail"]
        steps = [(line["recovery"], line["step"], line["ok"]) for line in out if "recovery" in line]
        assert steps == [("forward", "start_query", True), ("forward", "resume_sources", True)], out
        journal = JournalStore(zk, cfg.zookeeper.root, app).read()
        assert journal.status == "done_degraded" and "repartitioned" in journal.phases
        assert "restarted" not in journal.phases  # the walk's step failed; the recovery started it
        assert not client.exists(paused_key(cfg.redis.key_prefix, app)), "the sources were left paused"
        wait_until(lambda: state_partitions(cfg, app, query) == 8, 90, "batches with 8 partitions after the recovery")
        stop_load.set()
        loader.join()
        wait_until(lambda: drained(client, cfg, cfg.app(app)), 180, f"{app} to process all its input")
        verified = verify_app(cfg, app)
        assert (verified.lost, verified.duplicated, verified.unexpected) == (0, 0, 0), verified.summary()
    finally:
        stop_load.set()
        zk.stop()
        stop(cfg, app)
        fresh(cfg, app)


CCR_PHASES_TO_KILL = ("requested", "paused", "stopped", "captured", "repartitioned", "restarted", "resumed",
                      "restored")


def test_sigkill_at_each_ccr_phase_then_the_next_leader_completes_it(setup, tmp_path):
    """The daemon running a CCR migration is SIGKILLed as the journal names each phase in turn; a new
    daemon takes over, reads the journal and completes (or rolls back) the migration; in the end
    nothing is lost or duplicated."""
    import os
    import signal
    import threading

    from kazoo.client import KazooClient

    from sparkscale.actuators.migration import JournalStore
    from sparkscale.daemon import manual
    from sparkscale.store.zk_requests import ZkRequests
    from sparkscale_lab.bench.migration_faults import FAULT_HOLD_ENV
    from tests.integration.test_daemon import DaemonProcess

    cfg, path, overrides = setup
    app, query = "mwc", "counts"
    client = connect(cfg.redis)
    fresh(cfg, app)
    zk = KazooClient(hosts=cfg.zookeeper.hosts)
    zk.start(timeout=15)
    root = cfg.zookeeper.root
    store = JournalStore(zk, root, app)
    quiet = ["policy.name=threshold", "policy.threshold.preset=custom", "loop.interval_s=1",
             "zookeeper.session_timeout_s=4", "logging.level=info", "migration.measure_timeout_s=5"]
    daemon_setup = (cfg, path, [*overrides, *quiet], tmp_path)
    submit(cfg, app, path, overrides)
    daemons: list[DaemonProcess] = []
    outcomes = []
    stop_load = threading.Event()
    try:
        # The load runs in a thread, not a pool: a failure must not wait for it to end.
        loader = threading.Thread(target=run_loadgen, args=(cfg, app, "constant:300"), daemon=True,
                                  kwargs={"seed": 12, "stop": stop_load})
        loader.start()
        wait_until(lambda: state_partitions(cfg, app, query) == 4, 90, "the query to run with 4 partitions")
        partitions = 4
        leader = None
        for n, phase in enumerate(CCR_PHASES_TO_KILL):
            target = 8 if partitions != 8 else 2
            # This daemon stops right after the phase's step, before recording it; we kill it there.
            leader = DaemonProcess(daemon_setup, f"m{n}", env={FAULT_HOLD_ENV: phase})
            daemons.append(leader)
            wait_until(lambda leader=leader: leader.events("leader.elected", app=app), 90, f"m{n} to lead")
            manual.submit_request(ZkRequests(zk, root), app, target, "test", 600, type="migrate", query=query,
                                  strategy="ccr")
            wait_until(lambda leader=leader: leader.events("migration.fault_hold"), 180,
                       f"the migration to reach {phase}")
            killed_id = store.read().id
            os.kill(leader.proc.pid, signal.SIGKILL)
            leader.proc.wait()
            # The next daemon (no fault) takes over, reads the journal and finishes the migration.
            successor = DaemonProcess(daemon_setup, f"r{n}")
            daemons.append(successor)
            final = wait_until(lambda killed_id=killed_id: (j := store.read()) is not None and j.id == killed_id
                               and j.status != "running" and j, 180, f"the migration killed at {phase} to end")
            successor.stop()
            # A graceful stop (exit 0), not the SIGKILL stop() falls back to: a daemon that took over a
            # migration once hung on SIGTERM (a cycle woke the scheduler while it shut down).
            assert successor.proc.returncode == 0, (phase, successor.proc.returncode, successor.events()[-12:],
                                                    successor.stderr_tail())
            outcomes.append((phase, final.status, final.marks.get("resumed_by")))
            assert final.status in ("done", "rolled_back"), (phase, final.status, final.detail)
            if final.status == "done":
                partitions = target
            wait_until(lambda partitions=partitions: state_partitions(cfg, app, query) == partitions, 90,
                       f"batches with {partitions} partitions after the kill at {phase}")
        stop_load.set()
        loader.join()
        wait_until(lambda: drained(client, cfg, cfg.app(app)), 180, "all input processed")
        result = verify_app(cfg, app)
        assert (result.lost, result.duplicated, result.unexpected) == (0, 0, 0), (result.summary(), outcomes)
        assert all(resumed for _phase, status, resumed in outcomes if status == "done"), outcomes
        print("kill phase -> outcome:", outcomes)
    finally:
        stop_load.set()
        for d in daemons:
            d.stop()
        zk.stop()
        stop(cfg, app)
