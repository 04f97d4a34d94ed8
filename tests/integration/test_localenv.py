"""The embedded environment for real: up, a PySpark job on the standalone master, Redis, ZooKeeper,
idempotent up, status, and a down that leaves nothing it started (and stops nothing else)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import urllib.request

import psutil
import pytest
import redis
from click.testing import CliRunner
from kazoo.client import KazooClient

from sparkscale.cli import main
from sparkscale.config import load_config
from sparkscale.localenv import EnvironmentStartError, LocalEnvironment, PreflightError, check_tools
from sparkscale.localenv.ports import isolated_overrides

pytestmark = pytest.mark.integration


def test_up_runs_a_spark_job_and_down_leaves_nothing(tmp_path, redis_server):
    overrides = isolated_overrides(tmp_path / "run")
    cfg = load_config(None, overrides)
    env = LocalEnvironment(cfg)
    try:
        statuses = env.up()
        assert [s.name for s in statuses] == ["zookeeper", "redis", "spark-master", "spark-worker-1", "spark-worker-2"]
        assert all(s.running and s.answers for s in statuses), statuses

        # Every service answers its own protocol, on loopback.
        with urllib.request.urlopen(f"{cfg.spark.master_web_url}/json/", timeout=5) as resp:
            master = json.load(resp)
        assert master["status"] == "ALIVE" and master["aliveworkers"] == 2
        assert master["cores"] == 2 * cfg.cluster.worker_cores
        assert redis.Redis(port=cfg.redis.port).ping()
        zk = KazooClient(hosts=cfg.zookeeper.hosts, timeout=10)
        zk.start(timeout=15)
        zk.ensure_path("/sparkscale-test")
        assert zk.exists("/sparkscale-test")
        zk.stop()
        zk.close()

        # Spark accepts an application: a tiny PySpark job runs to completion on the workers.
        job = tmp_path / "job.py"
        job.write_text(textwrap.dedent("""
            from pyspark.sql import SparkSession
            spark = SparkSession.builder.appName("sparkscale-tiny").getOrCreate()
            print("SUM", spark.range(1000).selectExpr("sum(id)").first()[0], flush=True)
            spark.stop()
        """))
        tools = check_tools()
        proc = subprocess.run(
            [str(tools.spark_submit), "--master", cfg.spark.master_url, "--conf", "spark.cores.max=1",
             "--conf", "spark.executor.memory=512m", "--conf", "spark.ui.enabled=false", str(job)],
            capture_output=True, text=True, timeout=300,
            env={**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}, check=False
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "SUM 499500" in proc.stdout
        with urllib.request.urlopen(f"{cfg.spark.master_web_url}/json/", timeout=5) as resp:
            completed = [a["name"] for a in json.load(resp)["completedapps"]]
        assert "sparkscale-tiny" in completed

        # up again is idempotent: same processes.
        pids_before = sorted(env.recorded_pids())
        env.up()
        assert sorted(env.recorded_pids()) == pids_before

        # status through the CLI: a table naming every service with its pid; exit 0.
        result = CliRunner().invoke(main, ["cluster", "status", *[a for o in overrides for a in ("--set", o)]])
        assert result.exit_code == 0, result.output
        for s in statuses:
            assert s.name in result.output and str(s.pid) in result.output

        started = [psutil.Process(pid) for pid in pids_before]
        family = started + [c for p in started for c in p.children(recursive=True)]
    finally:
        stopped = env.down()

    assert sorted(stopped) == sorted(["zookeeper", "redis", "spark-master", "spark-worker-1", "spark-worker-2"])
    still_running = [p.pid for p in family if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert still_running == []
    # down stopped nothing it did not start: the test's own Redis still answers.
    assert redis_server.client().ping()
    after = env.status()
    assert not any(s.running for s in after)
    result = CliRunner().invoke(main, ["cluster", "status", *[a for o in overrides for a in ("--set", o)]])
    assert result.exit_code == 1 and "stopped" in result.output


def test_a_port_taken_by_another_process_is_named(tmp_path):
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        cfg = load_config(None, [*isolated_overrides(tmp_path / "run"), f"redis.port={port}"])
        env = LocalEnvironment(cfg)
        try:
            with pytest.raises(EnvironmentStartError, match=f"redis: port 127.0.0.1:{port} is already in use"):
                env.up()
        finally:
            env.down()


def test_missing_java_names_the_install_command(tmp_path):
    cfg = load_config(None, [f"cluster.run_dir={tmp_path}", "cluster.java=/nonexistent/java"])
    with pytest.raises(PreflightError, match="apt-get install openjdk-17-jre-headless"):
        LocalEnvironment(cfg).up()
    result = CliRunner().invoke(main, ["cluster", "up", "--set", f"cluster.run_dir={tmp_path}",
                                       "--set", "cluster.java=/nonexistent/java"])
    assert result.exit_code == 3
    assert "openjdk-17-jre-headless" in result.output
