"""Authentication for real, on Redis and ZooKeeper alone (no Spark): `cluster up` with the auth keys
starts Redis requiring the password (an ACL user with `redis.username`, `requirepass` without) and
ZooKeeper; clients without the password are refused, the configured ones work; `cluster up` locks
ZooKeeper's root to the digest identity, and a daemon (`sparkscale run`, one app that is not running)
locks it again (a root left open by an earlier version, opened by hand here), so a client without it
can neither create nor change a znode under the root, also one made earlier without auth, while the
identity can; and no secret shows on a command line, in a config file others can read, or in
the daemon's log.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
import redis
from click.testing import CliRunner
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import OPEN_ACL_UNSAFE

from sparkscale import zkconn
from sparkscale.cli import main
from sparkscale.config import Config, load_config
from sparkscale.config.secrets import REDIS_PASSWORD_ENV, ZOOKEEPER_AUTH_ENV
from sparkscale.localenv import LocalEnvironment
from sparkscale.localenv.ports import isolated_overrides
from sparkscale.protocol.znodes import leader_path
from sparkscale.redisconn import connect
from sparkscale_lab.bench.daemon_process import DaemonProcess
from tests.conftest import wait_until

pytestmark = pytest.mark.integration

REDIS_USER = "sparkscale"
REDIS_PASSWORD = "redis-Pa55 with space"
ZK_USER, ZK_PASSWORD = "sparky", "zk-Pa55"
ROOT = "/sparkscale-auth"
APP = "ghost"  # configured, never started: the daemon's cycles report it absent


@dataclass
class AuthEnv:
    cfg: Config
    overrides: list[str]
    env: LocalEnvironment
    work: Path


def private_file(path: Path, text: str) -> Path:
    path.write_text(text + "\n")
    path.chmod(0o600)
    return path


def cli_sets(overrides: list[str]) -> list[str]:
    return [a for o in overrides for a in ("--set", o)]


@pytest.fixture(scope="module")
def auth_env(tmp_path_factory) -> Iterator[AuthEnv]:
    work = tmp_path_factory.mktemp("auth")
    password = private_file(work / "redis-password", REDIS_PASSWORD)
    identity = private_file(work / "zk-auth", f"{ZK_USER}:{ZK_PASSWORD}")
    overrides = [
        *isolated_overrides(work / "run"),
        f"redis.username={REDIS_USER}", f"redis.password_file={password}",
        f"zookeeper.auth_file={identity}", f"zookeeper.root={ROOT}",
        f"apps=[{{name: {APP}, pipeline: wordcount}}]",
    ]
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv(REDIS_PASSWORD_ENV, raising=False)
        mp.delenv(ZOOKEEPER_AUTH_ENV, raising=False)
        cfg = load_config(None, overrides)
        env = LocalEnvironment(cfg)
        try:
            statuses = {s.name: s for s in env.up(only=("zookeeper", "redis"))}
            assert statuses["redis"].answers and statuses["zookeeper"].answers, statuses
            yield AuthEnv(cfg, overrides, env, work)
        finally:
            env.down()


def recorded_pid(env: LocalEnvironment, service: str) -> int:
    [status] = [s for s in env.status() if s.name == service]
    assert status.pid is not None
    return status.pid


def test_redis_refuses_clients_without_the_users_password(auth_env):
    cfg = auth_env.cfg
    anonymous = redis.Redis(host="127.0.0.1", port=cfg.redis.port, socket_timeout=5)
    with pytest.raises((redis.exceptions.AuthenticationError, redis.exceptions.ResponseError)):
        anonymous.ping()
    # The password without the user name is the `default` user's, which is off.
    with pytest.raises(redis.exceptions.AuthenticationError):
        redis.Redis(host="127.0.0.1", port=cfg.redis.port, password=REDIS_PASSWORD, socket_timeout=5).ping()
    with pytest.raises(redis.exceptions.AuthenticationError):
        redis.Redis(host="127.0.0.1", port=cfg.redis.port, username=REDIS_USER, password="wrong",
                    socket_timeout=5).ping()
    client = connect(cfg.redis)
    client.set("sparkscale:auth-test", "ok")
    assert client.get("sparkscale:auth-test") == "ok"

    # The password is in a config file only its owner can read, not on Redis's command line.
    conf = cfg.cluster.run_path / "redis" / "redis.conf"
    assert os.stat(conf).st_mode & 0o777 == 0o600
    assert REDIS_PASSWORD not in " ".join(psutil.Process(recorded_pid(auth_env.env, "redis")).cmdline())


def test_cluster_status_authenticates_its_redis_probe(auth_env):
    result = CliRunner().invoke(main, ["cluster", "status", "--json", *cli_sets(auth_env.overrides)])
    assert result.exit_code == 1, result.output  # Spark is not started here
    statuses = {s["name"]: s for s in json.loads(result.stdout)}
    assert statuses["redis"]["answers"] and statuses["zookeeper"]["answers"]
    assert REDIS_PASSWORD not in result.output


def test_the_daemon_locks_the_root_to_its_identity(auth_env):
    cfg = auth_env.cfg
    acl = zkconn.digest_acl(ZK_USER, ZK_PASSWORD)
    anonymous = KazooClient(hosts=cfg.zookeeper.hosts, timeout=10)
    stranger = KazooClient(hosts=cfg.zookeeper.hosts, timeout=10, auth_data=[("digest", "mallory:guess")])
    identity = zkconn.client(cfg.zookeeper)  # as the agent and the CLI connect
    for client in (anonymous, stranger, identity):
        client.start(timeout=15)
    daemon = None
    try:
        # `cluster up` locked the root already (issue 32: not only once a daemon stays connected).
        with pytest.raises(NoAuthError):
            anonymous.create(f"{ROOT}/early-intruder", b"x")
        assert identity.get_acls(ROOT)[0] == acl
        # A root left open by an earlier version, and znodes made there without auth: the daemon locks them.
        identity.set_acls(ROOT, OPEN_ACL_UNSAFE)
        anonymous.ensure_path(f"{ROOT}/apps/old/commands")
        anonymous.create(f"{ROOT}/apps/old/note", b"x")

        daemon = DaemonProcess(None, [*auth_env.overrides, "loop.interval_s=1", "metrics.enabled=false",
                                      "logging.level=debug"], auth_env.work / "daemon.jsonl", "auth-daemon")
        wait_until(lambda: daemon.events("zookeeper.secured"), 60, "the daemon to lock the root",
                   story=lambda: daemon.stderr_tail(3000))
        assert daemon.events("zookeeper.secured")[0]["refused"] == 0
        # Its cycles run as leader, through authenticated ZooKeeper and Redis.
        wait_until(lambda: daemon.events("cycle.app_absent", app=APP, role="leader"), 60, "a leader cycle")

        for path in (ROOT, f"{ROOT}/apps/old", f"{ROOT}/apps/old/note", leader_path(ROOT, APP)):
            assert identity.get_acls(path)[0] == acl, path
        for outsider in (anonymous, stranger):
            with pytest.raises(NoAuthError):
                outsider.create(f"{ROOT}/intruder", b"x")
            with pytest.raises(NoAuthError):
                outsider.create(f"{ROOT}/apps/old/commands/cmd-", b"{}", sequence=True)
            with pytest.raises(NoAuthError):
                outsider.set(f"{ROOT}/apps/old/note", b"y")
            with pytest.raises(NoAuthError):
                outsider.delete(f"{ROOT}/apps/old/note")
            with pytest.raises(NoAuthError):
                outsider.get(f"{ROOT}/apps/old/note")
        # Outside the root nothing changed.
        anonymous.create("/not-sparkscale", b"x")

        created = identity.create(f"{ROOT}/apps/old/commands/cmd-", b"{}", sequence=True)
        identity.set(f"{ROOT}/apps/old/note", b"z")
        assert identity.get(f"{ROOT}/apps/old/note")[0] == b"z"
        assert identity.get_acls(created)[0] == acl  # what the identity creates is locked too

        # `sparkscale status` reads the leader through the same authenticated factory.
        result = CliRunner().invoke(main, ["status", "--json", *cli_sets(auth_env.overrides)])
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)[0]["leader"] == "auth-daemon"
    finally:
        if daemon is not None:
            daemon.stop()
        for client in (anonymous, stranger, identity):
            client.stop()
            client.close()
    logged = daemon.log_path.read_text() + daemon.stderr_path.read_text()
    assert REDIS_PASSWORD not in logged and ZK_PASSWORD not in logged


def test_requirepass_without_a_user_name(tmp_path, monkeypatch):
    monkeypatch.delenv(REDIS_PASSWORD_ENV, raising=False)
    password = private_file(tmp_path / "pw", REDIS_PASSWORD)
    cfg = load_config(None, [*isolated_overrides(tmp_path / "run"), f"redis.password_file={password}"])
    env = LocalEnvironment(cfg)
    try:
        env.up(only=("redis",))
        with pytest.raises(redis.exceptions.AuthenticationError):  # NOAUTH
            redis.Redis(host="127.0.0.1", port=cfg.redis.port, socket_timeout=5).ping()
        assert connect(cfg.redis).ping()
        assert REDIS_PASSWORD not in " ".join(psutil.Process(recorded_pid(env, "redis")).cmdline())
    finally:
        env.down()
