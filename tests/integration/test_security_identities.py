"""One identity per role for real, on Redis and ZooKeeper alone (no Spark; issue 32): `cluster up` with
`security.identity_dir` makes the daemon's and operator's secrets, locks the root and starts Redis with
a user per identity; `pipeline submit`'s identity step (identity_setup.provision_app) makes an app's
agent identity, Redis user and znodes; a real driver then runs under its own identity end to end.
Probes: an unauthenticated client cannot create under the root;
the driver's identity cannot write a command, a lock node, the action log or another app's keys; a
forged lock node neither commands the agent nor hides the leader; a forged ack is not believed.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import make_digest_acl

from sparkscale import zkconn
from sparkscale.agent.admission import CommandGate
from sparkscale.apps.submit import stop, submit
from sparkscale.config import Config, load_config
from sparkscale.config.identities import DAEMON, IDENTITY_FILE_ENV, OPERATOR, Role, identity_for
from sparkscale.config.secrets import REDIS_PASSWORD_ENV, ZOOKEEPER_AUTH_ENV, role_credentials
from sparkscale.identity_setup import provision_app
from sparkscale.localenv import LocalEnvironment
from sparkscale.localenv.ports import isolated_overrides
from sparkscale.protocol.commands import AckTimeout, Command, send_command, trusted_ack, wait_ack
from sparkscale.protocol.fencing import read_live_lock
from sparkscale.protocol.keys import actions_key, driver_key
from sparkscale.protocol.znodes import acks_path, commands_path, leader_path
from sparkscale.redisconn import connect_as
from sparkscale_lab.pipelines.check import drained, verify_app
from sparkscale_lab.pipelines.loadgen import run_loadgen
from tests.conftest import leader_lock, wait_until

pytestmark = pytest.mark.integration

ROOT = "/sparkscale-identities"
APP, OTHER = "wc", "other"


@dataclass
class IdentityEnv:
    cfg: Config
    env: LocalEnvironment
    work: Path
    overrides: list[str]


@pytest.fixture(scope="module")
def identity_env(tmp_path_factory) -> Iterator[IdentityEnv]:
    work = tmp_path_factory.mktemp("identities")
    overrides = [*isolated_overrides(work / "run"), f"security.identity_dir={work / 'ids'}",
                 f"zookeeper.root={ROOT}",
                 f"apps=[{{name: {APP}, pipeline: wordcount}}, {{name: {OTHER}, pipeline: wordcount}}]"]
    with pytest.MonkeyPatch.context() as mp:
        for name in (REDIS_PASSWORD_ENV, ZOOKEEPER_AUTH_ENV, IDENTITY_FILE_ENV):
            mp.delenv(name, raising=False)
        cfg = load_config(None, overrides)
        env = LocalEnvironment(cfg)
        try:
            # Spark too: one test runs a real driver under its own identity.
            statuses = {s.name: s for s in env.up()}
            assert all(s.answers for s in statuses.values()), statuses
            provision_app(cfg, APP)  # what `pipeline submit` does before each driver starts
            provision_app(cfg, OTHER)
            yield IdentityEnv(cfg, env, work, overrides)
        finally:
            env.down()


def started(zk: KazooClient) -> KazooClient:
    zk.start(timeout=15)
    return zk


@pytest.fixture
def clients(identity_env) -> Iterator[dict[str, KazooClient]]:
    cfg = identity_env.cfg
    made = {
        "anonymous": started(KazooClient(hosts=cfg.zookeeper.hosts, timeout=10)),
        "daemon": started(zkconn.client_as(cfg, DAEMON)),
        "operator": started(zkconn.client_as(cfg, OPERATOR)),
        "agent": started(zkconn.client_as(cfg, identity_for(Role.AGENT, APP))),
        "other_agent": started(zkconn.client_as(cfg, identity_for(Role.AGENT, OTHER))),
    }
    agent_creds = role_credentials(cfg, identity_for(Role.AGENT, APP))
    assert agent_creds is not None
    zkconn.adopt_agent_acl(made["agent"], ROOT, APP, agent_creds)
    try:
        yield made
    finally:
        for zk in made.values():
            zk.stop()
            zk.close()


def test_an_unauthenticated_client_cannot_create_under_the_root(clients):
    anonymous = clients["anonymous"]
    for path in (f"{ROOT}/intruder", f"{ROOT}/apps/intruder", f"{commands_path(ROOT, APP)}/cmd-",
                 f"{leader_path(ROOT, APP)}/x__lock__"):
        with pytest.raises(NoAuthError):
            anonymous.create(path, b"x", sequence=True)
    anonymous.create("/not-sparkscale-identities", b"x")  # outside the root nothing changed
    anonymous.delete("/not-sparkscale-identities")


def test_the_driver_identity_cannot_write_a_command_or_a_lock_node(clients):
    for who in ("agent", "other_agent"):
        with pytest.raises(NoAuthError):
            send_command(clients[who], ROOT, APP, "set_executors", {"total": 1}, epoch=0)
        with pytest.raises(NoAuthError):
            clients[who].create(f"{leader_path(ROOT, APP)}/x__lock__", b"", ephemeral=True, sequence=True)
    with pytest.raises(NoAuthError):  # another app's acks
        clients["other_agent"].create(f"{acks_path(ROOT, APP)}/cmd-0000000000", b"{}")


def test_the_driver_identity_keeps_to_its_apps_redis_keys(identity_env):
    cfg = identity_env.cfg
    agent = connect_as(cfg, identity_for(Role.AGENT, APP))
    prefix = cfg.redis.key_prefix
    agent.set(driver_key(prefix, APP), "{}")  # its own app's keys: yes
    for key in (driver_key(prefix, OTHER), actions_key(prefix), f"{prefix}blocklist", "elsewhere"):
        with pytest.raises(redis.exceptions.NoPermissionError):
            agent.set(key, "x")
    with pytest.raises(redis.exceptions.NoPermissionError):
        agent.execute_command("FLUSHALL")
    daemon = connect_as(cfg, DAEMON)
    daemon.xadd(actions_key(prefix), {"probe": "1"})  # the daemon writes the action log
    with pytest.raises(redis.exceptions.NoPermissionError):
        daemon.execute_command("FLUSHALL")
    with pytest.raises(redis.exceptions.AuthenticationError):  # the default user is off
        redis.Redis(host="127.0.0.1", port=cfg.redis.port, socket_timeout=5).ping()


def test_a_forged_lock_node_neither_commands_the_agent_nor_hides_the_leader(clients):
    operator, daemon, agent = clients["operator"], clients["daemon"], clients["agent"]
    # A node got in with an ACL naming someone else (ACLs got round): the lowest sequence.
    forged = operator.create(f"{leader_path(ROOT, APP)}/f__lock__", b"", ephemeral=True, sequence=True,
                             acl=[make_digest_acl("sparkscale-forger", "pw", all=True)])
    real = daemon.create(f"{leader_path(ROOT, APP)}/d__lock__", b"", ephemeral=True, sequence=True)
    try:
        live = read_live_lock(agent, ROOT, APP)
        assert live is not None and live.path == real and live.owner == daemon.client_id[0]
        gate = CommandGate(agent, ROOT, APP)
        gate.load()
        forged_epoch = int(forged[-10:])
        assert gate.fenced(Command("report", epoch=forged_epoch), operator.client_id[0]) is not None
        assert gate.fenced(Command("report", epoch=live.epoch), daemon.client_id[0]) is None
    finally:
        daemon.delete(real)
        operator.delete(forged)


def test_a_forged_ack_is_not_believed(clients):
    operator, daemon, agent = clients["operator"], clients["daemon"], clients["agent"]
    name = send_command(daemon, ROOT, APP, "report", {}, epoch=0, ttl_s=5)
    ack = f"{acks_path(ROOT, APP)}/{name}"
    operator.create(ack, b'{"ok": true, "detail": "forged"}',
                    acl=[make_digest_acl("sparkscale-agent-other", "pw", all=True),
                         make_digest_acl("sparkscale-daemon", "x", read=True)])
    assert not trusted_ack(daemon, APP, ack)
    with pytest.raises(AckTimeout):
        wait_ack(daemon, ROOT, APP, name, timeout_s=1.0)
    name = send_command(daemon, ROOT, APP, "report", {}, epoch=0, ttl_s=5)
    agent.create(f"{acks_path(ROOT, APP)}/{name}", b'{"ok": true, "detail": "mine"}')
    assert wait_ack(daemon, ROOT, APP, name, timeout_s=5.0).detail == "mine"


def test_a_real_driver_runs_under_its_own_identity_end_to_end(identity_env, clients):
    """`pipeline submit` with identities: the driver gets only its agent's secret; its agent registers
    and answers the daemon's command with an ack the daemon trusts; its executors read and write the
    app's Redis keys as the agent's user; nothing is lost or duplicated."""
    cfg = identity_env.cfg
    submit(cfg, APP, None, identity_env.overrides)
    try:
        daemon = clients["daemon"]
        with leader_lock(daemon, ROOT, APP, "identities") as epoch:
            name = send_command(daemon, ROOT, APP, "report", {}, epoch=epoch, ttl_s=60)
            ack = wait_ack(daemon, ROOT, APP, name, timeout_s=60)
        assert ack.ok, ack.detail
        run_loadgen(cfg, APP, "constant:50@4s", seed=4)
        operator = connect_as(cfg, OPERATOR)
        wait_until(lambda: drained(operator, cfg, cfg.app(APP)), 120, f"{APP} to process all its input")
        result = verify_app(cfg, APP)
        assert result.total_expected > 0 and result.ok, result.summary()
    finally:
        stop(cfg, APP)
