"""Where identities are made and applied (issue 32): Redis ACL rules per role, the embedded Redis's
users, `cluster up`'s secrets and root, `pipeline submit`'s agent identity and app znodes, and the
driver given only its own secret (on fakes and fakeredis: no Redis server, ZooKeeper or Spark here)."""

from __future__ import annotations

import os
import stat
from types import SimpleNamespace

import pytest
from kazoo.security import Permissions

from sparkscale import identity_setup
from sparkscale.apps import submit
from sparkscale.config import Config, load_config
from sparkscale.config.identities import DAEMON, IDENTITY_FILE_ENV, OPERATOR, Role, ensure_secret, identity_for
from sparkscale.localenv import environment
from sparkscale.localenv.environment import LocalEnvironment
from sparkscale.localenv.redis_auth import redis_auth_lines
from sparkscale.protocol.acls import acl_layout
from sparkscale.redis_acl import glob_escaped, redis_acl_rules
from tests.unit.fake_redis import RecordingRedis
from tests.unit.fakezk import FakeZk

AGENT = identity_for(Role.AGENT, "wc")


def test_each_role_gets_its_keys_and_commands():
    assert redis_acl_rules(OPERATOR, "ss:") == ["~ss:*", "&*", "+@all"]
    assert redis_acl_rules(DAEMON, "ss:") == ["~ss:*", "resetchannels", "+@all", "-@admin", "-@dangerous"]
    assert redis_acl_rules(AGENT, "ss:") == ["~ss:wc:*", "resetchannels", "+@all", "-@admin", "-@dangerous"]
    assert redis_acl_rules(AGENT, "a*b[") == ["~a\\*b\\[wc:*", "resetchannels", "+@all", "-@admin", "-@dangerous"]
    assert glob_escaped("x?y\\") == "x\\?y\\\\"


@pytest.fixture
def identity_cfg(tmp_path, monkeypatch) -> Config:
    monkeypatch.delenv(IDENTITY_FILE_ENV, raising=False)
    directory = tmp_path / "ids"
    return load_config(None, [f"cluster.run_dir={tmp_path / 'run'}", f"security.identity_dir={directory}",
                              "zookeeper.root=/ss", "redis.key_prefix=ss:"])


def test_the_embedded_redis_has_a_user_per_identity_and_no_default(identity_cfg):
    directory = identity_cfg.security.identity_dir
    for who in (DAEMON, OPERATOR, AGENT):
        ensure_secret(directory, who)
    lines = redis_auth_lines(identity_cfg.redis, [DAEMON, OPERATOR, AGENT], directory)
    password = (AGENT.secret_path(directory)).read_text().strip()
    assert lines[0] == "user default off"
    assert lines[3] == (f'user "sparkscale-agent-wc" "reset" "on" ">{password}" "~ss:wc:*" "resetchannels" '
                        '"+@all" "-@admin" "-@dangerous"')
    assert [line.split()[1] for line in lines[1:]] == ['"sparkscale-daemon"', '"sparkscale-operator"',
                                                      '"sparkscale-agent-wc"']
    # LocalEnvironment names only identities whose secrets exist (`status` may run before `up`).
    conf = LocalEnvironment(identity_cfg)._redis_conf()
    assert "sparkscale-agent-wc" in conf and "user default off" in conf and "requirepass" not in conf


class FakeClient(FakeZk):
    def start(self, timeout: float = 0) -> None: ...
    def stop(self) -> None: ...
    def close(self) -> None: ...


@pytest.fixture
def fakes(monkeypatch):
    zk, redis = FakeClient(), RecordingRedis()  # the ACL SETUSER commands sent, and run
    monkeypatch.setattr(identity_setup.zkconn, "client_as", lambda cfg, identity: zk)
    monkeypatch.setattr(identity_setup.zkconn, "client", lambda cfg: zk)
    monkeypatch.setattr(identity_setup, "connect_as", lambda cfg, identity: redis)
    return zk, redis


def as_operator(zk: FakeZk, cfg: Config) -> None:
    """The fake client authenticates as the operator, as zkconn.client_as(cfg, OPERATOR) would."""
    password = OPERATOR.secret_path(cfg.security.identity_dir).read_text().strip()
    zk.auth_data = {("digest", f"{OPERATOR.user}:{password}")}


def who(acl) -> dict[str, int]:
    return {entry.id.id.split(":")[0]: entry.perms for entry in acl}


def test_submit_makes_the_agent_identity_its_redis_user_and_the_apps_znodes(identity_cfg, fakes):
    zk, redis = fakes
    identity_setup.make_cluster_secrets(identity_cfg)
    as_operator(zk, identity_cfg)
    secret = identity_setup.provision_app(identity_cfg, "wc")
    assert secret == AGENT.secret_path(identity_cfg.security.identity_dir)
    assert stat.S_IMODE(os.stat(secret).st_mode) == 0o600
    [setuser] = redis.commands
    assert setuser[:5] == ("ACL", "SETUSER", "sparkscale-agent-wc", "reset", "on")
    assert setuser[6:] == ("~ss:wc:*", "resetchannels", "+@all", "-@admin", "-@dangerous")
    layout = acl_layout("/ss", "wc", identity_setup._role_ids(identity_cfg, AGENT))
    assert {path: zk.nodes[path].acl for path in layout} == layout
    assert who(zk.nodes["/ss/apps/wc/commands"].acl)["sparkscale-agent-wc"] == Permissions.READ | Permissions.DELETE
    # Submitted again (a restart): the same secret, ACLs set again on what exists.
    zk.nodes["/ss/apps/wc/leader"].acl = None
    assert identity_setup.provision_app(identity_cfg, "wc") == secret
    assert zk.nodes["/ss/apps/wc/leader"].acl == layout["/ss/apps/wc/leader"]


def test_cluster_up_locks_the_root_to_the_daemon_and_operator(identity_cfg, fakes):
    zk, redis = fakes
    identity_setup.make_cluster_secrets(identity_cfg)
    as_operator(zk, identity_cfg)
    ensure_secret(identity_cfg.security.identity_dir, AGENT)  # an app submitted before a restart
    identity_setup.secure_cluster(identity_cfg)
    assert who(zk.nodes["/ss"].acl) == who(zk.nodes["/ss/apps"].acl) == {
        "sparkscale-daemon": Permissions.ALL, "sparkscale-operator": Permissions.ALL}
    assert "sparkscale-agent-wc" in who(zk.nodes["/ss/apps/wc/acks"].acl)
    assert [c[2] for c in redis.commands] == ["sparkscale-daemon", "sparkscale-agent-wc"]


def test_without_identities_submit_makes_nothing_and_cluster_up_locks_only_with_auth(tmp_path, fakes, monkeypatch):
    zk, redis = fakes
    cfg = load_config(None, ["zookeeper.root=/ss"])
    assert identity_setup.provision_app(cfg, "wc") is None
    identity_setup.secure_cluster(cfg)
    assert "/ss" not in zk.nodes and not redis.commands
    monkeypatch.setenv("SPARKSCALE_ZOOKEEPER_AUTH", "sparky:pw")
    zk.auth_data = {("digest", "sparky:pw")}
    identity_setup.secure_cluster(cfg)  # the single identity: the root locked now, not once a daemon runs
    assert who(zk.nodes["/ss"].acl) == {"sparky": Permissions.ALL}


def test_cluster_up_makes_secrets_first_and_secures_before_the_workers_start(identity_cfg, monkeypatch):
    order: list[str] = []
    monkeypatch.setattr(environment, "check_tools", lambda *a, **k: None)
    monkeypatch.setattr(environment, "check_addresses", lambda hosts: None)
    monkeypatch.setattr(environment, "make_cluster_secrets", lambda cfg: order.append("secrets"))
    monkeypatch.setattr(environment, "secure_cluster", lambda cfg: order.append("secure"))
    monkeypatch.setattr(LocalEnvironment, "specs", lambda self, tools: [
        SimpleNamespace(name=n) for n in ("zookeeper", "redis", "spark-master", "spark-worker-1")])
    monkeypatch.setattr(LocalEnvironment, "_ensure_started", lambda self, spec: order.append(spec.name))
    monkeypatch.setattr(LocalEnvironment, "_wait_answers", lambda self, spec, deadline: None)
    monkeypatch.setattr(LocalEnvironment, "status", lambda self: [])
    LocalEnvironment(identity_cfg).up()
    assert order == ["secrets", "zookeeper", "redis", "spark-master", "secure", "spark-worker-1"]


def test_the_driver_is_given_only_its_own_secret(identity_cfg, monkeypatch, tmp_path):
    seen: dict = {}
    secret = tmp_path / "agent-wc.secret"
    monkeypatch.setattr(submit, "provision_app", lambda cfg, app: secret)
    monkeypatch.setattr(submit, "connect_as", lambda cfg, identity: SimpleNamespace(close=lambda: None))
    monkeypatch.setattr(submit, "with_stored_shape", lambda app, client, prefix: app)
    monkeypatch.setattr(submit, "check_tools", lambda *a: SimpleNamespace(spark_home=tmp_path))
    monkeypatch.setattr(submit, "submit_command", lambda *a: ["spark-submit"])
    monkeypatch.setattr(submit.subprocess, "Popen", lambda argv, **kw: seen.update(kw) or "proc")
    assert submit.launch_driver(identity_cfg, "wordcount", None, []) == "proc"
    assert seen["env"][IDENTITY_FILE_ENV] == str(secret)
    assert not any(str(identity_cfg.security.identity_dir) in value for value in seen["env"].values())
