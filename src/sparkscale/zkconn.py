"""One way to open a ZooKeeper client from the config (the twin of redisconn.py), so digest auth and
the ACL of what sparkscale creates are never forgotten; and the daemon's locking of the root.

With `zookeeper.auth_file` (or $SPARKSCALE_ZOOKEEPER_AUTH) every client authenticates as that
digest identity and creates its znodes with an ACL that gives it everything and nobody else
anything (no world entry). The daemon then sets that ACL on the root and on every znode under it
when it first connects, so znodes made earlier without auth are locked too. Without auth, clients
are exactly as before (world access, kazoo's defaults).

With `security.identity_dir` (config/identities.py) each process connects as its role instead (`client_as`):
the daemon and the operator create every znode with the ACL protocol/acls.py gives its path; an
agent creates its own with `protocol.acls.agent_acl` (`adopt_agent_acl`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
from kazoo.client import KazooClient, KazooState, TransactionRequest
from kazoo.exceptions import KazooException, NoAuthError, NoNodeError
from kazoo.protocol.serialization import Auth
from kazoo.security import ACL, make_digest_acl

from sparkscale.config import Config, ConfigError, ConfigProblem, ZooKeeperConfig
from sparkscale.config.identities import DAEMON, OPERATOR, Credentials, Identity, Role, credentials_for, identity_for
from sparkscale.config.secrets import role_credentials, zookeeper_auth
from sparkscale.protocol.acls import RoleIds, acl_for_path, agent_acl, app_of, parse_readers
from sparkscale.protocol.znodes import app_path

AclPolicy = Callable[[str], list[ACL]]  # the ACL of a znode created at a path

log = structlog.get_logger(__name__)


class _NoAuthRequests(logging.Filter):
    """kazoo logs every request it sends at DEBUG, the digest `Auth(..., auth='user:password')` too."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        return not any(isinstance(arg, Auth) for arg in args)


# A child of "kazoo": the level logsetup gives kazoo applies; the filter drops the Auth request.
_KAZOO_LOG = logging.getLogger("kazoo.client.sparkscale")
_KAZOO_LOG.addFilter(_NoAuthRequests())


def digest_acl(user: str, password: str) -> list[ACL]:
    """Every permission for the digest identity `user`, none for anyone else."""
    return [make_digest_acl(user, password, all=True)]


def client_kwargs(cfg: ZooKeeperConfig, identity: Credentials | None = None) -> dict[str, Any]:
    """KazooClient's auth arguments for the config, or for `identity` if given: none without auth
    (reads the secret now)."""
    pair = (identity.user, identity.password) if identity is not None else zookeeper_auth(cfg)
    if pair is None:
        return {}
    user, password = pair
    return {"auth_data": [("digest", f"{user}:{password}")], "default_acl": digest_acl(user, password),
            "logger": _KAZOO_LOG}


def _tls_kwargs(cfg: ZooKeeperConfig) -> dict[str, Any]:
    """KazooClient's TLS arguments for `zookeeper.tls`: none without it. The server's certificate is
    always verified (against ca_file, else the system's CAs), and its name too: a certificate from
    the same CA issued to a client must not pass for the server."""
    if not cfg.tls:
        return {}
    files = {"ca": cfg.ca_file, "certfile": cfg.cert_file, "keyfile": cfg.key_file}
    return {"use_ssl": True, "verify_certs": True, "check_hostname": True,
            **{name: str(Path(path).expanduser()) for name, path in files.items() if path is not None}}


class PolicyClient(KazooClient):  # type: ignore[misc]  # kazoo has no annotations
    """A KazooClient that creates each znode with the ACL `acl_for(path)` gives, parents made on the
    way (ensure_path, makepath) included; an explicit `acl=` to create still wins."""

    def __init__(self, acl_for: AclPolicy, **kwargs: Any):
        super().__init__(**kwargs)
        self.acl_for = acl_for

    def create_async(self, path: str, value: bytes = b"", acl: Sequence[ACL] | None = None,
                     ephemeral: bool = False, sequence: bool = False, makepath: bool = False,
                     include_data: bool = False) -> Any:
        chosen = self.acl_for(path) if acl is None else acl
        return super().create_async(path, value, acl=chosen, ephemeral=ephemeral, sequence=sequence,
                                    makepath=makepath, include_data=include_data)

    def ensure_path_async(self, path: str, acl: Sequence[ACL] | None = None) -> Any:
        # kazoo hands a created child's ACL to its parents: each component gets its own instead.
        return super().ensure_path_async(path, None)

    def transaction(self) -> TransactionRequest:
        return _PolicyTransaction(self)


class _PolicyTransaction(TransactionRequest):  # type: ignore[misc]  # kazoo has no annotations
    """A transaction's creates (the migration journal's first write) by the policy too."""

    def create(self, path: str, value: bytes = b"", acl: Sequence[ACL] | None = None, ephemeral: bool = False,
               sequence: bool = False) -> None:
        chosen = self.client.acl_for(path) if acl is None else acl
        super().create(path, value, acl=chosen, ephemeral=ephemeral, sequence=sequence)


def client(cfg: ZooKeeperConfig, identity: Credentials | None = None, acl_for: AclPolicy | None = None,
           **kwargs: Any) -> KazooClient:
    """A client (not started) for `zookeeper.hosts`, with the session timeout and the config's auth;
    with `identity`, authenticated as that identity instead, and with `acl_for`, creating every
    znode with the ACL it gives the path (else with `identity` alone having access)."""
    auth = {**client_kwargs(cfg, identity), **_tls_kwargs(cfg)}
    if acl_for is None:
        return KazooClient(hosts=cfg.hosts, timeout=cfg.session_timeout_s, **auth, **kwargs)
    auth.pop("default_acl", None)
    return PolicyClient(acl_for, hosts=cfg.hosts, timeout=cfg.session_timeout_s, **auth, **kwargs)


class ControlAcls:
    """The daemon's and the operator's ACL policy (protocol/acls.py): an app's agent is named once
    its secret exists in `identity_dir` (made by `pipeline submit`)."""

    def __init__(self, root: str, identity_dir: str, daemon_id: str, operator_id: str):
        self.root = root
        self.identity_dir = identity_dir
        self.daemon_id = daemon_id
        self.operator_id = operator_id
        self._agents: dict[str, str] = {}

    @classmethod
    def from_dir(cls, root: str, identity_dir: str) -> ControlAcls:
        ids = [credentials_for(identity_dir, who) for who in (DAEMON, OPERATOR)]
        assert ids[0] is not None and ids[1] is not None  # identity_dir is set
        return cls(root, identity_dir, ids[0].digest_id, ids[1].digest_id)

    def ids(self, app: str | None) -> RoleIds:
        agent = None
        if app is not None:
            agent = self._agents.get(app)
            if agent is None:
                try:
                    creds = credentials_for(self.identity_dir, identity_for(Role.AGENT, app))
                except ValueError:  # no secret yet (or an app name no identity can have)
                    creds = None
                if creds is not None:
                    agent = self._agents[app] = creds.digest_id
        return RoleIds(self.daemon_id, self.operator_id, agent)

    def __call__(self, path: str) -> list[ACL]:
        return acl_for_path(self.root, path, self.ids(app_of(self.root, path)))


def client_as(cfg: Config, identity: Identity, **kwargs: Any) -> KazooClient:
    """A client for a process of `identity`: `client(cfg.zookeeper)` when identities are off. The
    daemon and the operator create znodes by `ControlAcls`; an agent calls `adopt_agent_acl` once
    started. ConfigError when a secret is unusable."""
    creds = role_credentials(cfg, identity)
    if creds is None:
        return client(cfg.zookeeper, **kwargs)
    if identity.role is Role.AGENT or cfg.security.identity_dir is None:
        return client(cfg.zookeeper, identity=creds, **kwargs)
    try:
        acls = ControlAcls.from_dir(cfg.zookeeper.root, cfg.security.identity_dir)
    except ValueError as exc:
        raise ConfigError([ConfigProblem(cfg.security.identity_dir, "security.identity_dir", str(exc))]) from None
    return client(cfg.zookeeper, identity=creds, acl_for=acls, **kwargs)


def adopt_agent_acl(zk: KazooClient, root: str, app: str, agent: Credentials) -> list[ACL]:
    """An agent's client (started): create from now on with `agent_acl`, the daemon and operator
    read from the app directory's data (written by `pipeline submit`). Returns that ACL."""
    try:
        data, _stat = zk.get(app_path(root, app))
    except (NoNodeError, NoAuthError):
        data = None
    readers = None if data is None else parse_readers(data)
    if readers is None:
        raise ConfigError([ConfigProblem(
            "security.identity_dir", app_path(root, app),
            f"{agent.user} cannot read its app's znode or it names no readers: start the app with "
            "`sparkscale pipeline submit`, which makes it with its ACLs")]) from None
    acl = agent_acl(agent.digest_id, readers)
    zk.default_acl = acl
    return acl


@dataclass(frozen=True)
class Secured:
    """What `secure_tree` did: znodes given the ACL, and those ZooKeeper refused (owned by another identity)."""

    znodes: int
    refused: tuple[str, ...] = ()


def secure_tree(zk: KazooClient, root: str, acl: Sequence[ACL]) -> Secured:
    """Create `root` with `acl` if absent, then set `acl` on it and on every znode under it, parents
    before children (so a locked parent never hides a child). ZooKeeper's own `/zookeeper` is left
    alone when the root is `/`; a znode that vanishes meanwhile (an ended session's) is skipped."""
    acl = list(acl)
    zk.ensure_path(root, acl=acl)
    secured, refused = 0, []
    stack = [root]
    while stack:
        path = stack.pop()
        try:
            zk.set_acls(path, acl)
            children = zk.get_children(path)
        except NoNodeError:
            continue
        except NoAuthError:
            refused.append(path)
            continue
        secured += 1
        base = path.rstrip("/")
        stack.extend(f"{base}/{child}" for child in sorted(children, reverse=True)
                     if not (path == "/" and child == "zookeeper"))
    return Secured(secured, tuple(refused))


def secure_root(zk: KazooClient, cfg: ZooKeeperConfig) -> Secured | None:
    """Lock `zookeeper.root` to the config's identity (None: no auth configured, nothing done)."""
    identity = zookeeper_auth(cfg)
    if identity is None:
        return None
    secured = secure_tree(zk, cfg.root, digest_acl(*identity))
    if secured.refused:
        log.error("zookeeper.secure_refused", root=cfg.root, znodes=list(secured.refused),
                  reason="owned by another identity; not locked to this one", action="fix their ACL by hand")
    log.info("zookeeper.secured", root=cfg.root, znodes=secured.znodes, refused=len(secured.refused))
    return secured


class RootLocker:
    """A kazoo listener: on the first CONNECTED, secure the root off kazoo's event thread (where no
    ZooKeeper call may block); tried again on the next connection if it failed."""

    def __init__(self, zk: KazooClient, cfg: ZooKeeperConfig):
        self.zk = zk
        self.cfg = cfg
        self.done = threading.Event()
        self._running = threading.Lock()

    def __call__(self, state: str) -> None:
        if state == KazooState.CONNECTED and not self.done.is_set() and self._running.acquire(blocking=False):
            self.zk.handler.spawn(self._run)

    def _run(self) -> None:
        try:
            secure_root(self.zk, self.cfg)
            self.done.set()
        except (KazooException, ConfigError) as exc:
            log.warning("zookeeper.secure_failed", root=self.cfg.root, error=repr(exc), retry="on the next connection")
        finally:
            self._running.release()


def lock_root_on_connect(zk: KazooClient, cfg: ZooKeeperConfig) -> RootLocker | None:
    """The daemon's side: secure the root whenever its client first connects (no-op without auth)."""
    if zookeeper_auth(cfg) is None:
        return None
    locker = RootLocker(zk, cfg)
    zk.add_listener(locker)
    return locker
