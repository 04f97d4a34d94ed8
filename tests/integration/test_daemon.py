"""The daemon for real: `sparkscale run` processes managing pipelines on the embedded environment
(Spark standalone, Redis, ZooKeeper), scaling through the control agent, logging to Redis.

- (DS2 stepping an app up after the load rises and down after it falls, with nothing lost and each
  decision in the action log: test_demo.py, the main job on the shipped config.)
- dry-run: plans with actions are logged, the executor count never changes; apps[].mode advise
  and observe, an excluded period and a core quota each hold the change and say why.
- two daemons on one app: exactly one acts; SIGKILL it and the other acts within the ZooKeeper
  session timeout plus one cycle; a command at the old epoch is refused by the agent.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner
from kazoo.client import KazooClient

from sparkscale.apps.submit import running, stop, submit
from sparkscale.cli import main
from sparkscale.config import Config, load_config
from sparkscale.daemon.action_log import ActionLog
from sparkscale.daemon.leader import current_leader
from sparkscale.monitors.collector import AppNotRunningError, NoQueriesYet, collect_snapshot
from sparkscale.monitors.spark_rest import SparkRestError, driver_rest
from sparkscale.protocol.commands import send_command, wait_ack
from sparkscale.protocol.fencing import read_live_lock
from sparkscale.protocol.znodes import agent_epoch_path
from sparkscale.redisconn import connect
from sparkscale_lab.bench.daemon_process import DaemonProcess as BenchDaemonProcess
from sparkscale_lab.pipelines.check import drained, verify_app
from sparkscale_lab.pipelines.loadgen import run_loadgen
from tests.conftest import wait_until

pytestmark = pytest.mark.integration

CONFIG = """
apps:
  - name: dpart
    pipeline: dag
    min_executors: 2
    max_executors: 2
    initial_executors: 2
    executor_memory_mb: 512
    source_partitions: 2
    shuffle_partitions: 1
    max_records_per_batch: 200
    dag: {shape: linear, cost_ms_per_record: 5.0, selectivity: 1.0, key_space: 50}
  - name: fo
    pipeline: wordcount
    min_executors: 1
    max_executors: 3
    initial_executors: 1
    executor_memory_mb: 512
    source_partitions: 2
    shuffle_partitions: 2
loop: {interval_s: 5.0, window_s: 15.0, cooldown_s: 20.0, stabilization_s: 0.0}
policy: {name: ds2}
guards: {scale_down_delay_s: 20.0}
outcomes: {evaluation_windows: 2}
actuator: {ack_timeout_s: 30.0, confirm_timeout_s: 90.0}
metrics: {port: 0}
zookeeper: {session_timeout_s: 6.0}
"""
# For the dry-run and failover tests: a policy that never acts by itself, or always wants one more.
NEVER_ACTS = ["policy.name=threshold", "policy.threshold.preset=custom"]
# No start-up grace for it: these daemons run a few cycles right after the app started, whose windows
# rest on the run's first batches (the grace itself: tests/unit/test_guards_stability.py).
ALWAYS_ONE_MORE = [*NEVER_ACTS, 'policy.threshold.rules=[{metric: backlog, op: ">=", value: 0, executors_delta: 1}]',
                   "guards.startup_grace_batches=0"]


@pytest.fixture(scope="module")
def setup(embedded_env, tmp_path_factory) -> tuple[Config, str, list[str], Path]:
    work = tmp_path_factory.mktemp("daemon")
    path = work / "sparkscale.yaml"
    path.write_text(CONFIG)
    overrides = [*embedded_env.overrides, "logging.stderr_format=json"]
    return load_config(path, overrides), str(path), overrides, work


def DaemonProcess(setup, name: str, extra: list[str] = (), max_cycles: int | None = None,  # noqa: N802
                  env: dict[str, str] | None = None) -> BenchDaemonProcess:
    """`sparkscale run` for this module's setup, logging JSON lines to `<work>/<name>.jsonl`."""
    _cfg, path, overrides, work = setup
    return BenchDaemonProcess(path, overrides, work / f"{name}.jsonl", name, extra, max_cycles, env)


def active_executors(cfg: Config, app: str) -> int | None:
    rest = driver_rest(cfg, cfg.app(app), timeout_s=5)
    try:
        return len(rest.executors(rest.application(app).id))
    except SparkRestError:
        return None


def backlog_known(cfg: Config, app: str) -> bool:
    """Whether the app's sources have reported their backlog yet (a new query with no input reports
    its first progress only after Spark's no-data progress interval)."""
    try:
        snapshot = collect_snapshot(cfg, app)
    except (AppNotRunningError, NoQueriesYet):
        return False
    return all(op.backlog is not None for op in snapshot.operators if op.source)


def decisions(cfg: Config, app: str):
    return ActionLog(connect(cfg.redis), cfg.redis.key_prefix).read(app)


def test_a_partition_bound_stage_makes_the_daemon_migrate_its_query(setup):
    """DS2 finds a dag stage partition-bound (1 shuffle partition, a load one task cannot carry) and
    asks for more on that stage; the daemon migrates the whole query (Spark has one partition count
    per query) with CCR, and nothing is lost or duplicated."""
    cfg, path, overrides, _work = setup
    submit(cfg, "dpart", path, overrides)
    daemon = DaemonProcess(setup, "part-daemon", ["migration.measure_timeout_s=5"])
    client = connect(cfg.redis)
    progress = f"{cfg.redis.key_prefix}dpart:progress:dag"

    def migrated() -> list:
        return [r for d in decisions(cfg, "dpart") for r in d.results or ()
                if r.action.type == "set_parallelism" and r.status == "done"]

    try:
        with ThreadPoolExecutor(1) as pool:
            # Each stage's task takes 5 ms per record: 1 partition carries at most 200 records/s, and
            # batches of at most 200 records (3 s over the 3 stages) finish within the 15 s window.
            # At 90 records/s the 3 stages need 3 x 90 x 0.005 / 0.8 = 1.7 windows on one partition
            # (partition-bound). The load ends once the migration starts: the backlog it left keeps the
            # query busy through the migration, and each record more is 0.025 s of drain (batches
            # carry 40 records/s): at 150 records/s the drain took 135 s of the test's 224.
            stop_load = threading.Event()
            loading = pool.submit(run_loadgen, cfg, "dpart", "constant:90@120s", seed=9, stop=stop_load)
            try:
                wait_until(lambda: daemon.events("migration.start", app="dpart"), 240, "dpart's query to migrate")
            finally:
                stop_load.set()
                loading.result()
            wait_until(migrated, 120, "the migration of dpart's query to end")
        result = migrated()[0]
        assert result.action.operator != "dag" and result.figures["strategy"] == "ccr"  # a stage asked
        assert "dag:" in result.detail
        wait_until(lambda: int(client.hget(progress, "state_partitions") or 0) > 1, 60, "batches on more partitions")
        wait_until(lambda: drained(client, cfg, cfg.app("dpart")), 420, "dpart to process all its input")
        verified = verify_app(cfg, "dpart")
        assert (verified.lost, verified.duplicated, verified.unexpected) == (0, 0, 0), verified.summary()
    finally:
        daemon.stop()
        stop(cfg, "dpart")


def test_dry_run_logs_plans_but_never_changes_executors(setup):
    cfg, path, overrides, _work = setup
    submit(cfg, "fo", path, overrides)
    # Standalone launches up to cores.max at first and the agent trims to initial_executors.
    wait_until(lambda: active_executors(cfg, "fo") == 1, 60, "fo to settle at its initial executor")
    wait_until(lambda: backlog_known(cfg, "fo"), 60, "fo's first progress report (its backlog)")
    daemon = DaemonProcess(setup, "dry", [*ALWAYS_ONE_MORE, "loop.dry_run=true", "loop.interval_s=2"], max_cycles=5)
    assert daemon.proc.wait(timeout=120) == 0
    cycles = daemon.events("cycle", app="fo")
    dry = [e for e in cycles if e["mode"] == "dry_run"]
    assert dry, [e.get("mode") for e in cycles]
    # Each cycle says what its time went on: reading Spark, Redis and ZooKeeper, and the daemon's own CPU.
    assert all(0 < e["collect_s"] <= e["duration_s"] and 0 <= e["cpu_s"] <= e["duration_s"] for e in cycles)
    assert dry[0]["actions"] == ["scale_executors 1 -> 2"]
    assert not daemon.events("actuator.start")
    assert active_executors(cfg, "fo") == 1
    logged = decisions(cfg, "fo")
    assert any(d.decision.mode == "dry_run" for d in logged) and not any(d.results for d in logged)


def test_advise_observe_an_excluded_period_and_a_quota_each_hold_the_change_and_say_why(setup):
    """The operator's controls on one running app whose policy always wants one executor more: each
    daemon run (3 cycles) must change nothing, and each says so in its own way."""
    cfg, path, overrides, _work = setup
    if not running(cfg, "fo"):
        submit(cfg, "fo", path, overrides)
    wait_until(lambda: active_executors(cfg, "fo") == 1, 60, "fo at one executor")
    wait_until(lambda: backlog_known(cfg, "fo"), 60, "fo's first progress report (its backlog)")
    now = datetime.now(UTC)
    around_now = f"daily {now - timedelta(minutes=10):%H:%M}-{now + timedelta(minutes=20):%H:%M}"
    controls = {"advise": ["apps.fo.mode=advise"], "observe": ["apps.fo.mode=observe"],
                "excluded": [f"guards.excluded_periods=['{around_now}']"], "quota": ["quotas.max_cores=1"]}
    # A trickle of input keeps every window's backlog known (the rule reads it): an idle query's
    # windows came to have none about 35 s after its last batch, and the last daemon's rule never fired.
    stop_load = threading.Event()
    trickle = threading.Thread(target=run_loadgen, args=(cfg, "fo", "constant:5"),
                               kwargs={"seed": 12, "stop": stop_load}, daemon=True)
    trickle.start()
    try:
        _run_controls(setup, controls)
    finally:
        stop_load.set()
        trickle.join()
    assert active_executors(cfg, "fo") == 1


def _run_controls(setup, controls: dict[str, list[str]]) -> None:
    """One daemon run (3 cycles) per operator control; each must change nothing and say so its way."""
    cfg = setup[0]
    for name, sets in controls.items():
        wait_until(lambda: backlog_known(cfg, "fo"), 60, "fo's backlog in the window")
        daemon = DaemonProcess(setup, f"controls-{name}", [*ALWAYS_ONE_MORE, "loop.interval_s=2", *sets], max_cycles=3)
        assert daemon.proc.wait(timeout=120) == 0, name
        cycles = daemon.events("cycle", app="fo")
        assert len(cycles) == 3 and not daemon.events("actuator.start"), (name, cycles)
        logged = [d.decision for d in decisions(cfg, "fo") if d.decision.daemon == f"controls-{name}"]
        explained = [line for d in logged for line in d.plan.explanation]
        if name == "advise":  # decided and logged as it would act, never carried out
            modes = {e["mode"] for e in cycles}  # a cycle may be held (settle) while the app's executors move
            assert "dry_run" in modes and modes <= {"dry_run", "no_change"}, cycles
            assert next(e["actions"] for e in cycles if e["mode"] == "dry_run") == ["scale_executors 1 -> 2"]
            assert "dry_run" in {d.mode for d in logged} <= {"dry_run", "no_change"}
        elif name == "observe":  # snapshots only: no plan made, no decision written
            assert {e["mode"] for e in cycles} == {"observe"} and not logged
        elif name == "excluded":
            assert {e["mode"] for e in cycles} == {"no_change"}, cycles
            assert any("guard excluded period: scale_executors 1 -> 2 held" in line for line in explained), explained
        else:  # the quota binds: held, named in the explanation and in a warning
            assert {e["mode"] for e in cycles} == {"no_change"}, cycles
            assert any("quotas.max_cores = 1" in line for line in explained), explained
            assert any(a.type == "warn" and "quota reached" in (a.reason or "") for d in logged for a in d.plan.actions)


def test_two_daemons_one_acts_and_the_other_takes_over_after_sigkill(setup):
    cfg, path, overrides, _work = setup
    if active_executors(cfg, "fo") is None:
        submit(cfg, "fo", path, overrides)
    zk = KazooClient(hosts=cfg.zookeeper.hosts)
    zk.start(timeout=15)
    root = cfg.zookeeper.root
    a = DaemonProcess(setup, "alpha", [*NEVER_ACTS, "loop.interval_s=2"])
    wait_until(lambda: current_leader(zk, root, "fo") == "alpha", 60, "alpha to lead fo")
    b = DaemonProcess(setup, "beta", [*NEVER_ACTS, "loop.interval_s=2"])
    try:
        wait_until(lambda: b.events("cycle", app="fo", role="standby"), 60, "beta to run fo's cycle in standby")
        sets = [x for s in overrides for x in ("--set", s)]
        runner = CliRunner()
        out = runner.invoke(main, ["scale-executors", "--app", "fo", "--to", "2", "--config", path, *sets])
        assert out.exit_code == 0, out.output
        assert "by alpha" in out.output
        assert active_executors(cfg, "fo") == 2
        alpha_decisions = [d for d in decisions(cfg, "fo") if d.decision.mode == "manual"]
        assert [d.decision.daemon for d in alpha_decisions] == ["alpha"]
        old_epoch = alpha_decisions[0].decision.epoch
        assert a.events("actuator.done") and not b.events("actuator.done")

        killed_at = time.monotonic()
        os.kill(a.proc.pid, signal.SIGKILL)
        a.proc.wait()
        wait_until(lambda: current_leader(zk, root, "fo") == "beta", 60, "beta to take over")
        wait_until(lambda: b.events("leader.elected", app="fo"), 30, "beta to act as leader")
        took_s = time.monotonic() - killed_at
        print(f"takeover after SIGKILL: {took_s:.1f} s (session timeout {cfg.zookeeper.session_timeout_s:g} s)")
        assert took_s <= cfg.zookeeper.session_timeout_s + 2 + 5, f"takeover took {took_s:.1f} s"

        out = runner.invoke(main, ["scale-executors", "--app", "fo", "--to", "1", "--config", path, *sets])
        assert out.exit_code == 0 and "by beta" in out.output, out.output
        manual = [d for d in decisions(cfg, "fo") if d.decision.mode == "manual"]
        assert manual[-1].decision.daemon == "beta" and manual[-1].decision.epoch > old_epoch
        # A paused old leader waking up: its epoch is refused by the agent. (It holds no lock any
        # more, which is the point: this test's session stands in for it.)
        name = send_command(zk, root, "fo", "set_executors", {"total": 3}, old_epoch)
        ack = wait_ack(zk, root, "fo", name, 30)
        assert not ack.ok and "stale epoch" in str(ack.detail)
        # Nor can it pass for beta: beta's live epoch, claimed from a session without the lock.
        live = read_live_lock(zk, root, "fo")
        assert live is not None and live.epoch == manual[-1].decision.epoch
        name = send_command(zk, root, "fo", "set_executors", {"total": 3}, live.epoch)
        ack = wait_ack(zk, root, "fo", name, 30)
        assert not ack.ok and "not the current leader" in str(ack.detail)
        assert int(zk.get(agent_epoch_path(root, "fo"))[0]) == live.epoch  # neither changed it
        assert active_executors(cfg, "fo") == 1
        # status shows the new leader, and (from its next cycle on) the new executor count.

        def fo_status() -> dict:
            out = runner.invoke(main, ["status", "--json", "--config", path, *sets])
            assert out.exit_code == 0, out.output
            return next(line for line in json.loads(out.output) if line["app"] == "fo")

        wait_until(lambda: fo_status()["view"]["executors"] == 1, 30, "status to show 1 executor")
        assert fo_status()["leader"] == "beta" and fo_status()["view"]["role"] == "leader"
    finally:
        for d in (a, b):
            d.stop()
        zk.stop()
        stop(cfg, "fo")
