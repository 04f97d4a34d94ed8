"""Shared fixtures. Integration fixtures start real servers on loopback, on free ports, in tmp dirs,
so tests never touch a developer's running environment (default ports, ~/.sparkscale)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis

from sparkscale.config import Config, load_config
from sparkscale.localenv.ports import free_port, isolated_overrides

# The JVMs the tests start (drivers through spark-submit, executors through their driver's conf, the
# master and workers, in-process sessions) compile with C1 only and collect with the serial
# collector. On 2 cores a start-up of many JVMs spends most of its CPU in C2's compiler threads:
# submitting wordcount and waiting for its one executor took 82 s and 167 CPU-seconds by default,
# 40 s and 81 with these flags, and one executor processed as many lines per second (7,250 and
# 7,270). The product's JVMs keep Spark's defaults. SPARKSCALE_TEST_JVM=default turns this off.
TEST_JVM_FLAGS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def pytest_configure(config) -> None:
    if os.environ.get("SPARKSCALE_TEST_JVM") == "default" or "SPARK_CONF_DIR" in os.environ:
        return
    conf_dir = Path(tempfile.mkdtemp(prefix="sparkscale-test-jvm-"))
    # spark-submit's launcher reads `java-opts` in SPARK_CONF_DIR; a driver's SparkConf takes the
    # spark.* system properties, so its executors get the flags too. Readable by the drivers that
    # run under identities of their own.
    (conf_dir / "java-opts").write_text(f'{TEST_JVM_FLAGS} "-Dspark.executor.extraJavaOptions={TEST_JVM_FLAGS}"\n')
    conf_dir.chmod(0o755)
    (conf_dir / "java-opts").chmod(0o644)
    os.environ["SPARK_CONF_DIR"] = str(conf_dir)
    os.environ.setdefault("SPARK_DAEMON_JAVA_OPTS", TEST_JVM_FLAGS)  # the master and the workers
    config.add_cleanup(lambda: shutil.rmtree(conf_dir, ignore_errors=True))


def wait_until(condition, timeout_s: float, what: str, interval_s: float = 0.2, story=None):
    """Poll `condition` until it returns something truthy; fail the test naming `what` otherwise
    (and telling `story()`, what led there, when given)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            told = f"\n{story()}" if story is not None else ""
            pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}{told}")
        time.sleep(interval_s)


@contextmanager
def leader_lock(zk: Any, root: str, app: str, identity: str = "tests", timeout_s: float = 30.0) -> Iterator[int]:
    """Hold `app`'s leader lock as a daemon does (`LeaderElection`) and yield its epoch: an agent
    runs a command only if it comes from the live lock holder's session, at its epoch."""
    from sparkscale.daemon.leader import LeaderElection

    election = LeaderElection(zk, root, app, identity)
    if not election.acquire(timeout_s=timeout_s) or election.epoch is None:
        pytest.fail(f"could not take the leader lock of {app} within {timeout_s:g} s")
    try:
        yield election.epoch
    finally:
        election.release()


@dataclass
class RedisServer:
    host: str
    port: int

    def client(self) -> redis.Redis:
        return redis.Redis(host=self.host, port=self.port, decode_responses=True)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory) -> Iterator[RedisServer]:
    """A real redis-server on a free loopback port, for tests that need Redis alone."""
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.fail("redis-server is not installed: apt-get install redis-server (.ci/run does this)")
    workdir = tmp_path_factory.mktemp("redis")
    port = free_port()
    proc = subprocess.Popen(
        [exe, "--bind", "127.0.0.1", "--port", str(port), "--dir", str(workdir), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
    )
    server = RedisServer("127.0.0.1", port)
    client = server.client()
    wait_until(lambda: _ping(client), 20, "redis-server to answer PING")
    yield server
    proc.terminate()
    proc.wait(timeout=10)


def _ping(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False


@dataclass
class EmbeddedEnv:
    cfg: Config
    overrides: list[str]


@pytest.fixture(scope="session")
def embedded_env(tmp_path_factory) -> Iterator[EmbeddedEnv]:
    """The whole embedded environment (Spark master + 2 workers, Redis, ZooKeeper), once per session."""
    from sparkscale.localenv import LocalEnvironment

    overrides = isolated_overrides(tmp_path_factory.mktemp("env"))
    cfg = load_config(None, overrides)
    env = LocalEnvironment(cfg)
    try:
        env.up()  # inside: a start that fails part-way stops what it did start
        yield EmbeddedEnv(cfg, overrides)
    finally:
        env.down()
