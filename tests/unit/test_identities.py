"""One identity per role (issue 32): names and secret files, the `security` section, the root that
must not be /, and each process's clients connecting as its role (no server here: the clients are
constructed, never started; redis.Redis is captured)."""

from __future__ import annotations

import os
import stat

import pytest
from kazoo.security import OPEN_ACL_UNSAFE, Permissions

from sparkscale import redisconn, zkconn
from sparkscale.config import Config, ConfigError, ZooKeeperConfig, load_config
from sparkscale.config.identities import (
    DAEMON,
    IDENTITY_FILE_ENV,
    OPERATOR,
    Credentials,
    Role,
    credentials_for,
    digest_user,
    ensure_secret,
    identity_for,
    process_identity,
    set_process_identity,
)
from sparkscale.config.secrets import check_secrets, role_credentials
from sparkscale.protocol.acls import acl_layout
from tests.unit.identity_world import AGENT_USER, APP, PASSWORDS, ROOT, world


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    monkeypatch.delenv(IDENTITY_FILE_ENV, raising=False)
    monkeypatch.delenv("SPARKSCALE_ZOOKEEPER_AUTH", raising=False)
    monkeypatch.delenv("SPARKSCALE_REDIS_PASSWORD", raising=False)
    saved = process_identity()
    yield
    set_process_identity(saved)


@pytest.fixture
def identity_dir(tmp_path):
    directory = tmp_path / "ids"
    for who in (DAEMON, OPERATOR, identity_for(Role.AGENT, "wc")):
        ensure_secret(directory, who)
    return directory


def cfg_with(identity_dir) -> Config:
    return Config(security={"identity_dir": str(identity_dir)})


def test_each_role_has_its_name_user_and_secret_file(tmp_path):
    agent = identity_for("agent", "wc")
    assert (DAEMON.name, DAEMON.user) == ("daemon", "sparkscale-daemon")
    assert (OPERATOR.name, OPERATOR.user) == ("operator", "sparkscale-operator")
    assert (agent.name, agent.user) == ("agent-wc", "sparkscale-agent-wc")
    assert agent.secret_path(tmp_path) == tmp_path / "agent-wc.secret"
    with pytest.raises(ValueError, match="the agent identity needs app name"):
        identity_for(Role.AGENT)
    with pytest.raises(ValueError, match="the daemon identity takes no app name"):
        identity_for(Role.DAEMON, "wc")
    with pytest.raises(ValueError, match="cannot name an identity"):
        identity_for(Role.AGENT, "a b/c")


def test_secrets_are_made_private_random_and_kept(tmp_path):
    directory = tmp_path / "ids"
    path = ensure_secret(directory, DAEMON)
    assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    first = path.read_text()
    assert len(first.strip()) >= 40  # token_urlsafe(32): 43 characters
    assert ensure_secret(directory, DAEMON) == path and path.read_text() == first  # kept
    assert ensure_secret(directory, OPERATOR).read_text() != first
    os.chmod(path, 0o644)
    with pytest.raises(ValueError, match="open to group or others"):
        ensure_secret(directory, DAEMON)


def test_credentials_name_the_user_and_hide_the_password(identity_dir):
    creds = credentials_for(str(identity_dir), DAEMON)
    assert creds is not None and creds.user == "sparkscale-daemon"
    assert creds.password not in repr(creds)
    assert digest_user(creds.digest_id) == "sparkscale-daemon" and creds.password not in creds.digest_id
    assert credentials_for(None, DAEMON) is None  # identities off


def test_an_agent_reads_only_the_file_its_driver_was_given(identity_dir, tmp_path, monkeypatch):
    own = tmp_path / "own.secret"
    own.write_text("agent-password\n")
    own.chmod(0o600)
    monkeypatch.setenv(IDENTITY_FILE_ENV, str(own))
    agent = identity_for(Role.AGENT, "wc")
    creds = credentials_for(None, agent)  # no identity_dir in the driver's config: the file alone
    assert creds == Credentials(agent, "agent-password")
    assert credentials_for(str(identity_dir), DAEMON).password != "agent-password"  # others: the directory


def test_the_security_section_defaults_to_off_and_rejects_unknown_keys(tmp_path):
    assert Config().security.identity_dir is None
    path = tmp_path / "c.yaml"
    path.write_text("security:\n  identity_dir: /srv/ids\n")
    assert load_config(str(path)).security.identity_dir == "/srv/ids"
    path.write_text("security:\n  identity_file: /srv/ids\n")
    with pytest.raises(ConfigError, match=r"security\.identity_file"):
        load_config(str(path))


def test_the_root_must_not_be_slash():
    with pytest.raises(ValueError, match="the root must not be /: securing it would lock the whole ensemble"):
        ZooKeeperConfig(root="/")
    with pytest.raises(ValueError, match="absolute znode path"):
        ZooKeeperConfig(root="/sparkscale/")
    assert ZooKeeperConfig(root="/a/sparkscale").root == "/a/sparkscale"


def test_a_missing_or_open_secret_is_a_config_error_naming_the_key(identity_dir):
    cfg = cfg_with(identity_dir)
    check_secrets(cfg, "c.yaml", DAEMON)  # present and private
    (identity_dir / "operator.secret").chmod(0o640)
    with pytest.raises(ConfigError, match=r"security.identity_dir: secret file .*operator.secret is open"):
        check_secrets(cfg, "c.yaml", OPERATOR)
    with pytest.raises(ConfigError, match=r"security.identity_dir: secret file .*agent-x.secret does not exist"):
        role_credentials(cfg, identity_for(Role.AGENT, "x"))


@pytest.fixture
def captured(monkeypatch) -> list[dict]:
    calls: list[dict] = []
    monkeypatch.setattr(redisconn.redis, "Redis", lambda **kwargs: calls.append(kwargs) or kwargs)
    return calls


def test_redis_clients_connect_as_their_role(identity_dir, captured):
    cfg = cfg_with(identity_dir)
    redisconn.connect_as(cfg, DAEMON)
    redisconn.connect_as(cfg, identity_for(Role.AGENT, "wc"))
    set_process_identity(OPERATOR)
    redisconn.connect_as(cfg)  # this process's: the CLI's
    users = [kwargs["username"] for kwargs in captured]
    assert users == ["sparkscale-daemon", "sparkscale-agent-wc", "sparkscale-operator"]
    assert captured[0]["password"] == (identity_dir / "daemon.secret").read_text().strip()
    auth = redisconn.auth_as(cfg, identity_for(Role.AGENT, "wc"))  # executors' options
    assert auth.as_options()["username"] == "sparkscale-agent-wc"


def test_without_identities_connect_as_is_todays_connect(captured):
    redisconn.connect_as(Config(), DAEMON)
    assert "username" not in captured[0] and "password" not in captured[0]
    assert redisconn.auth_as(Config()) == redisconn.NO_AUTH


def test_zookeeper_clients_authenticate_as_their_role(identity_dir):
    cfg = cfg_with(identity_dir)
    daemon = zkconn.client_as(cfg, DAEMON)
    assert [user.split(":")[0] for _scheme, user in daemon.auth_data] == ["sparkscale-daemon"]
    assert isinstance(daemon, zkconn.PolicyClient)
    agent = zkconn.client_as(cfg, identity_for(Role.AGENT, "wc"))
    assert [user.split(":")[0] for _scheme, user in agent.auth_data] == ["sparkscale-agent-wc"]
    assert not isinstance(agent, zkconn.PolicyClient)
    plain = zkconn.client_as(Config(), DAEMON)  # identities off: as before
    assert not plain.auth_data and plain.default_acl is None


def test_the_control_clients_acl_follows_the_layout(identity_dir):
    cfg = cfg_with(identity_dir)
    acls = zkconn.ControlAcls.from_dir(cfg.zookeeper.root, str(identity_dir))
    ids = acls.ids("wc")
    assert ids.agent is not None and acls.ids("unknown").agent is None  # no secret yet: no entry
    layout = acl_layout("/sparkscale", "wc", ids)
    assert acls("/sparkscale/apps/wc/commands") == layout["/sparkscale/apps/wc/commands"]
    command = acls("/sparkscale/apps/wc/commands/cmd-")
    assert {(acl.id.id.split(":")[0], acl.perms) for acl in command} == {
        ("sparkscale-daemon", Permissions.ALL), ("sparkscale-operator", Permissions.ALL),
        ("sparkscale-agent-wc", Permissions.READ)}
    assert OPEN_ACL_UNSAFE[0] not in acls("/sparkscale/cluster")


class RecordingPolicyClient(zkconn.PolicyClient):
    """Records what kazoo would send instead of sending it."""

    def __init__(self, acl_for, **kwargs):
        super().__init__(acl_for, **kwargs)
        self.sent: list[tuple[str, object]] = []

    def _create_async_inner(self, path, value, acl, flags, trailing=False, include_data=False):
        self.sent.append((path, acl))
        result = self.handler.async_result()
        result.set(path)
        return result

    def exists_async(self, path, watch=None):
        result = self.handler.async_result()
        result.set(None if path not in ("/", "/ss") else object())
        return result


def test_parents_made_on_the_way_get_their_own_acl():
    client = RecordingPolicyClient(lambda path: [(path,)], hosts="127.0.0.1:1")
    client.ensure_path("/ss/apps/wc")
    assert client.sent == [("/ss/apps", [("/ss/apps",)]), ("/ss/apps/wc", [("/ss/apps/wc",)])]
    client.sent.clear()
    client.create("/ss/apps/wc/acks/cmd-1", b"x")
    client.create("/ss/x", b"x", acl=list(OPEN_ACL_UNSAFE))  # an explicit ACL still wins
    assert client.sent == [("/ss/apps/wc/acks/cmd-1", [("/ss/apps/wc/acks/cmd-1",)]), ("/ss/x", list(OPEN_ACL_UNSAFE))]


def test_a_transactions_creates_follow_the_policy_too():
    client = zkconn.PolicyClient(lambda path: [(path,)], hosts="127.0.0.1:1")
    t = client.transaction()
    t.create("/ss/apps/wc/migration", b"{}")
    t.create("/ss/x", b"", acl=list(OPEN_ACL_UNSAFE))
    assert [op.acl for op in t.operations] == [[("/ss/apps/wc/migration",)], list(OPEN_ACL_UNSAFE)]


def test_an_agent_takes_the_daemon_and_operator_from_its_app_directory():
    w = world()
    agent = Credentials(identity_for(Role.AGENT, APP), PASSWORDS[AGENT_USER])
    acl = zkconn.adopt_agent_acl(w.agent, ROOT, APP, agent)
    assert w.agent.default_acl == acl
    assert {(a.id.id.split(":")[0], a.perms) for a in acl} == {(AGENT_USER, Permissions.ALL),
                                                               ("sparkscale-daemon", Permissions.READ),
                                                               ("sparkscale-operator", Permissions.READ)}
    with pytest.raises(ConfigError, match=r"start the app with `sparkscale pipeline submit`"):
        zkconn.adopt_agent_acl(w.agent, ROOT, "other", agent)


def test_commands_check_their_secret_once_cluster_up_made_the_directory(tmp_path):
    from click.testing import CliRunner

    from sparkscale.cli import main

    directory = tmp_path / "ids"
    config = tmp_path / "c.yaml"
    config.write_text(f"security:\n  identity_dir: {directory}\n")
    args = ["check-config", str(config)]
    assert CliRunner().invoke(main, args).exit_code == 0  # before `cluster up`: nothing to check yet
    directory.mkdir(mode=0o700)
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2 and "operator.secret does not exist" in result.output
    ensure_secret(directory, OPERATOR)
    assert CliRunner().invoke(main, args).exit_code == 0
