"""The one ZooKeeper client factory: digest auth and an ACL for that identity alone when configured,
kazoo's defaults when not; and the daemon's locking of the root, against an in-memory tree."""

from __future__ import annotations

import logging

import pytest
from kazoo.client import KazooState
from kazoo.exceptions import ConnectionLoss, NoAuthError, NoNodeError
from kazoo.protocol.serialization import Auth
from kazoo.security import OPEN_ACL_UNSAFE, Permissions, make_digest_acl

from sparkscale import zkconn
from sparkscale.config import Config, ZooKeeperConfig
from sparkscale.config.secrets import ZOOKEEPER_AUTH_ENV
from sparkscale.daemon.leader import zk_client


@pytest.fixture
def auth_cfg(tmp_path, monkeypatch) -> ZooKeeperConfig:
    monkeypatch.delenv(ZOOKEEPER_AUTH_ENV, raising=False)
    path = tmp_path / "zk-auth"
    path.write_text("sparky:pa55word\n")
    path.chmod(0o600)
    return ZooKeeperConfig(auth_file=str(path), root="/ss")


@pytest.fixture(autouse=True)
def no_env(monkeypatch):
    monkeypatch.delenv(ZOOKEEPER_AUTH_ENV, raising=False)


def test_the_acl_gives_everything_to_the_identity_and_nothing_to_the_world():
    [acl] = zkconn.digest_acl("sparky", "pa55word")
    assert acl == make_digest_acl("sparky", "pa55word", all=True)
    assert acl.perms == Permissions.ALL and acl.id.scheme == "digest"
    assert acl.id.id.startswith("sparky:") and "pa55word" not in acl.id.id


def test_without_auth_the_client_is_as_before():
    cfg = ZooKeeperConfig()
    assert zkconn.client_kwargs(cfg) == {}
    zk = zkconn.client(cfg)
    assert not zk.auth_data and zk.default_acl is None
    assert zk_client(Config(zookeeper=cfg)).default_acl is None  # the daemon's, with no listener that locks the root
    assert zkconn.lock_root_on_connect(zk, cfg) is None


def test_with_auth_every_client_authenticates_and_creates_locked_znodes(auth_cfg):
    zk = zkconn.client(auth_cfg)  # constructed, never started: no server here
    assert list(zk.auth_data) == [("digest", "sparky:pa55word")]
    assert zk.default_acl == zkconn.digest_acl("sparky", "pa55word")


def test_the_env_identity_works_like_the_file(monkeypatch):
    monkeypatch.setenv(ZOOKEEPER_AUTH_ENV, "envuser:envpass")
    assert set(zkconn.client(ZooKeeperConfig()).auth_data) == {("digest", "envuser:envpass")}


def test_kazoos_debug_line_of_the_auth_request_is_dropped(caplog):
    logger = zkconn._KAZOO_LOG
    with caplog.at_level(logging.DEBUG, logger=logger.name):
        logger.setLevel(logging.DEBUG)
        try:
            logger.debug("Sending request(xid=%s): %s", -4, Auth(0, "digest", "sparky:pa55word"))
            logger.debug("Sending request(xid=%s): %s", 1, "GetChildren(...)")
        finally:
            logger.setLevel(logging.NOTSET)
    assert "pa55word" not in caplog.text and "GetChildren" in caplog.text


class FakeZk:
    """Just what securing needs: znodes with ACLs, some owned by another identity."""

    def __init__(self, paths: list[str], foreign: tuple[str, ...] = ()):
        self.acls = {p: list(OPEN_ACL_UNSAFE) for p in ["/", *paths]}
        self.foreign = set(foreign)
        self.vanish: set[str] = set()

    def ensure_path(self, path: str, acl=None) -> None:
        parts = path.strip("/").split("/")
        for i in range(1, len(parts) + 1):
            self.acls.setdefault("/" + "/".join(parts[:i]), list(acl or OPEN_ACL_UNSAFE))

    def set_acls(self, path: str, acls, version: int = -1) -> None:
        if path not in self.acls or path in self.vanish:
            raise NoNodeError()
        if path in self.foreign:
            raise NoAuthError()
        self.acls[path] = list(acls)

    def get_children(self, path: str) -> list[str]:
        base = path.rstrip("/")
        return [p[len(base) + 1:] for p in self.acls if p != path and p.rsplit("/", 1)[0] == base]


ACL = zkconn.digest_acl("sparky", "pa55word")


def test_securing_creates_an_absent_root_with_the_acl():
    zk = FakeZk([])
    assert zkconn.secure_tree(zk, "/a/ss", ACL) == zkconn.Secured(1)
    assert zk.acls["/a/ss"] == ACL and zk.acls["/a"] == ACL and zk.acls["/"] == OPEN_ACL_UNSAFE


def test_securing_locks_every_existing_znode_under_the_root_and_nothing_else():
    tree = ["/ss", "/ss/apps", "/ss/apps/wc", "/ss/apps/wc/commands", "/ss/apps/wc/commands/cmd-0000000001",
            "/ss/apps/wc/leader", "/other", "/ssx"]
    zk = FakeZk(tree, foreign=("/ss/apps/wc/leader",))
    zk.vanish.add("/ss/apps/wc/commands/cmd-0000000001")  # an ended session's znode, gone meanwhile
    secured = zkconn.secure_tree(zk, "/ss", ACL)
    assert secured == zkconn.Secured(4, ("/ss/apps/wc/leader",))
    assert all(zk.acls[p] == ACL for p in tree[:4])
    assert zk.acls["/other"] == zk.acls["/ssx"] == zk.acls["/"] == OPEN_ACL_UNSAFE


def test_securing_the_top_leaves_zookeepers_own_znodes_alone():
    zk = FakeZk(["/zookeeper", "/zookeeper/quota", "/ss"])
    assert zkconn.secure_tree(zk, "/", ACL).znodes == 2
    assert zk.acls["/zookeeper"] == OPEN_ACL_UNSAFE and zk.acls["/ss"] == ACL


class Handler:
    def spawn(self, func):
        func()


def test_the_daemon_locks_the_root_on_its_first_connection_and_retries_a_failed_try(auth_cfg):
    zk = FakeZk(["/ss", "/ss/apps"])
    zk.handler = Handler()
    locker = zkconn.RootLocker(zk, auth_cfg)
    failing = zk.set_acls
    zk.set_acls = lambda *a, **k: (_ for _ in ()).throw(ConnectionLoss())
    locker(KazooState.CONNECTED)
    assert not locker.done.is_set() and zk.acls["/ss"] == OPEN_ACL_UNSAFE
    zk.set_acls = failing
    locker(KazooState.SUSPENDED)
    assert not locker.done.is_set()
    locker(KazooState.CONNECTED)
    assert locker.done.is_set() and zk.acls["/ss"] == zk.acls["/ss/apps"] == ACL
    zk.acls["/ss/apps"] = list(OPEN_ACL_UNSAFE)
    locker(KazooState.CONNECTED)  # once per daemon: a reconnection does not walk the tree again
    assert zk.acls["/ss/apps"] == OPEN_ACL_UNSAFE


def test_the_daemons_client_gets_the_locker_only_with_auth(auth_cfg):
    zk = zk_client(Config(zookeeper=auth_cfg))
    assert any(isinstance(listener, zkconn.RootLocker) for listener in zk.state_listeners)
    assert zk.default_acl == ACL
