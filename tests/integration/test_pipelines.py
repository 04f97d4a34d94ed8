"""The workloads for real: submitted to the embedded Spark standalone cluster, fed by the load
generator through Redis streams, steered through the control agent, and checked record by record
against a direct computation over the input."""

from __future__ import annotations

import os
import signal
from concurrent.futures import ThreadPoolExecutor

import pytest
from click.testing import CliRunner
from kazoo.client import KazooClient

from sparkscale.apps.driver_record import current_driver
from sparkscale.apps.run_files import started_marker
from sparkscale.apps.submit import running, stop, submit
from sparkscale.cli import main
from sparkscale.config import Config, load_config
from sparkscale.protocol.commands import send_command, wait_ack
from sparkscale.protocol.keys import progress_key
from sparkscale.protocol.sinks import SinkTarget
from sparkscale.protocol.streams import StreamOffsets, read_source_status, stream_heads
from sparkscale.redisconn import connect
from sparkscale_lab.pipelines.check import drained, verify_app
from sparkscale_lab.pipelines.loadgen import run_loadgen
from sparkscale_lab.pipelines.verify import read_input_records, read_keyed_sink
from sparkscale_lab.pipelines.workloads.taxi import expected_output as taxi_expected
from sparkscale_lab.pipelines.workloads.taxi import top_routes
from tests.conftest import leader_lock, wait_until

pytestmark = pytest.mark.integration

APPS = """
apps:
  - name: wc
    pipeline: wordcount
    max_executors: 4
    initial_executors: 2
    executor_memory_mb: 512
    source_partitions: 2
    shuffle_partitions: 4
    max_records_per_batch: 4000
  - name: dagl
    pipeline: dag
    max_executors: 6
    initial_executors: 4
    executor_memory_mb: 512
    source_partitions: 4
    shuffle_partitions: 4
    max_records_per_batch: 4000
    dag: {shape: linear, cost_ms_per_record: 0.5, selectivity: 1.5, key_space: 50}
"""


@pytest.fixture(scope="module")
def setup(embedded_env, tmp_path_factory) -> tuple[Config, str, list[str]]:
    path = tmp_path_factory.mktemp("pipelines") / "sparkscale.yaml"
    path.write_text(APPS)
    overrides = [*embedded_env.overrides, "logging.stderr_format=json"]
    return load_config(path, overrides), str(path), overrides


def target(cfg: Config, app: str, query: str) -> SinkTarget:
    r = cfg.redis
    return SinkTarget(app=app, query=query, host=r.host, port=r.port, db=r.db, prefix=r.key_prefix)


def run_and_verify(setup, app_name: str, profile: str, seed: int, while_loading=None):
    """Submit the app, drive it with `profile` (calling `while_loading(cfg, client)` meanwhile),
    wait until it processed everything, and verify it."""
    cfg, path, overrides = setup
    app = cfg.app(app_name)
    submit(cfg, app_name, path, overrides)
    client = connect(cfg.redis)
    try:
        with ThreadPoolExecutor(1) as pool:
            loading = pool.submit(run_loadgen, cfg, app_name, profile, seed=seed)
            if while_loading is not None:
                while_loading(cfg, client)
            summary = loading.result()
        wait_until(lambda: drained(client, cfg, app), 180, f"{app_name} to process all its input")
        return summary, verify_app(cfg, app_name), client
    finally:
        stop(cfg, app_name)


def pause_then_resume(cfg: Config, client) -> None:
    """Through the control agent: while paused, the source admits nothing although input grows."""
    prefix = cfg.redis.key_prefix
    keys = [f"{prefix}wc:in:{i}" for i in range(cfg.app("wc").source_partitions)]

    def admitted() -> int:
        latest = read_source_status(client, prefix, "wc", "counts").latest
        return StreamOffsets.from_json(latest or {}, len(keys)).total

    def produced() -> int:
        return sum(h.entries_added for h in stream_heads(client, keys))

    def command(zk: KazooClient, kind: str) -> None:
        # As the daemon does: from the holder of the app's leader lock, at its epoch.
        with leader_lock(zk, cfg.zookeeper.root, "wc") as epoch:
            name = send_command(zk, cfg.zookeeper.root, "wc", kind, {}, epoch=epoch, ttl_s=30)
            ack = wait_ack(zk, cfg.zookeeper.root, "wc", name, 30)
        assert ack.ok, ack.detail

    wait_until(lambda: admitted() > 500, 120, "the first batches to admit records")
    zk = KazooClient(hosts=cfg.zookeeper.hosts)
    zk.start(timeout=15)
    try:
        command(zk, "pause_sources")
        assert client.exists(f"{prefix}wc:paused")
        # A batch planned just before the flag was set may still admit; after that, nothing.
        frozen = admitted()
        grown_to = produced() + 600
        wait_until(lambda: produced() >= grown_to, 60, "600 more records to arrive while paused")
        still = admitted()
        assert still - frozen <= cfg.app("wc").max_records_per_batch  # at most the batch in flight
        later = produced() + 300
        wait_until(lambda: produced() >= later, 60, "300 more records while paused")
        assert admitted() == still, "the source admitted records while paused"
        command(zk, "resume_sources")
        assert not client.exists(f"{prefix}wc:paused")
        wait_until(lambda: admitted() > still, 60, "admission to restart after resume")
    finally:
        zk.stop()
        zk.close()


def test_wordcount_under_steps_loses_and_duplicates_nothing(setup):
    summary, result, client = run_and_verify(setup, "wc", "steps:150@15s,500@15s,150@15s", seed=1,
                                             while_loading=pause_then_resume)
    assert summary.duration_s >= 45
    assert summary.records_sent >= 0.95 * summary.target_records > 0
    assert result.total_expected > 5 * summary.records_sent  # counted words, 5-12 a sentence
    assert (result.lost, result.duplicated, result.unexpected) == (0, 0, 0), result.summary()
    assert result.ok

    # The counts per word equal those computed directly from the generated input.
    cfg = setup[0]
    lines = [r.fields["line"] for r in read_input_records(client, cfg.redis.key_prefix, "wc")]
    assert len(lines) == summary.records_sent
    direct: dict[str, int] = {}
    for line in lines:
        for word in line.split(" "):
            direct[word] = direct.get(word, 0) + 1
    assert read_keyed_sink(client, target(cfg, "wc", "counts")) == direct


def crash_the_driver(cfg: Config, client) -> None:
    """SIGKILL the driver once batches run: its supervisor starts a new one, which goes on from the
    queries' checkpoints (the supervisor itself stays)."""
    supervisor = running(cfg, "dagl")
    first = current_driver(cfg, "dagl")
    assert supervisor is not None and first is not None
    wait_until(lambda: int(client.hget(progress_key(cfg.redis.key_prefix, "dagl", "dag"), "batch_id") or -1) >= 2,
               120, "dagl to commit a few batches")
    os.kill(first.pid, signal.SIGKILL)
    wait_until(lambda: (d := current_driver(cfg, "dagl")) is not None and d.pid != first.pid
               and started_marker(cfg, "dagl").exists(), 180, "the supervisor to restart dagl's driver")
    restarted = current_driver(cfg, "dagl")
    assert restarted.restarts == 1
    assert running(cfg, "dagl").pid == supervisor.pid


def test_dag_linear_under_steps_loses_and_duplicates_nothing_across_a_driver_crash(setup):
    summary, result, _ = run_and_verify(setup, "dagl", "steps:100@15s,400@15s,100@15s", seed=2,
                                        while_loading=crash_the_driver)
    assert summary.duration_s >= 45
    # Selectivity 1.5 at each of 4 tasks: about 1.5^4 = 5 counted records per input record.
    assert result.total_expected > 3 * summary.records_sent
    assert (result.lost, result.duplicated, result.unexpected) == (0, 0, 0), result.summary()


def test_taxi_top_routes_submitted_by_name_match_a_batch_computation(setup):
    """`sparkscale pipeline submit taxi_top_routes`: a pipeline name stands for a default app."""
    cfg, path, overrides = setup
    sets = [arg for o in overrides for arg in ("--set", o)]
    cfg = cfg.with_app("taxi_top_routes")
    app = cfg.app("taxi_top_routes")
    cli = CliRunner()
    result = cli.invoke(main, ["pipeline", "submit", "taxi_top_routes", "--config", path, *sets])
    assert result.exit_code == 0, result.output
    assert "REST API http://" in result.output and "/api/v1" in result.output  # as the agent published it
    client = connect(cfg.redis)
    try:
        summary = run_loadgen(cfg, "taxi_top_routes", "constant:300@15s", seed=3)
        wait_until(lambda: drained(client, cfg, app), 180, "taxi_top_routes to process all its input")
        verified = cli.invoke(main, ["verify", "--app", "taxi_top_routes", "--config", path, *sets])
    finally:
        stopped = cli.invoke(main, ["pipeline", "stop", "taxi_top_routes", "--config", path, *sets])
    assert stopped.exit_code == 0 and "stopped" in stopped.output
    assert summary.records_sent >= 0.95 * 300 * 15
    assert verified.exit_code == 0, verified.output
    assert "lost 0, duplicated 0" in verified.output

    trips = [{**r.fields, "uid": r.uid} for r in read_input_records(client, cfg.redis.key_prefix, "taxi_top_routes")]
    expected_top = top_routes(taxi_expected(trips, app), app.taxi.top_n)
    actual_top = top_routes(read_keyed_sink(client, target(cfg, "taxi_top_routes", "top_routes")), app.taxi.top_n)
    assert len(expected_top) >= 20  # windows: 15 s x 300 trips/s x 0.2 s of event time = 15 min
    assert actual_top == expected_top
    # Popular routes dominate: the top route of the busiest window is counted many times.
    busiest = max(expected_top.values(), key=lambda rows: rows[0][1])
    assert busiest[0][1] >= 20
