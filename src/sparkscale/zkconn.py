"""One way to open a ZooKeeper client from the config (the twin of redisconn.py), so digest auth and
the ACL of what sparkscale creates are never forgotten; and the daemon's locking of the root.

With `zookeeper.auth_file` (or $SPARKSCALE_ZOOKEEPER_AUTH) every client authenticates as that
digest identity and creates its znodes with an ACL that gives it everything and nobody else
anything (no world entry). The daemon then sets that ACL on the root and on every znode under it
when it first connects, so znodes made earlier without auth are locked too. Without auth, clients
are exactly as before (world access, kazoo's defaults).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException, NoAuthError, NoNodeError
from kazoo.protocol.serialization import Auth
from kazoo.security import ACL, make_digest_acl

from sparkscale.config import ConfigError, ZooKeeperConfig
from sparkscale.config.secrets import zookeeper_auth

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


def client_kwargs(cfg: ZooKeeperConfig) -> dict[str, Any]:
    """KazooClient's auth arguments for the config: none without auth (reads the secret now)."""
    identity = zookeeper_auth(cfg)
    if identity is None:
        return {}
    user, password = identity
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


def client(cfg: ZooKeeperConfig, **kwargs: Any) -> KazooClient:
    """A client (not started) for `zookeeper.hosts`, with the session timeout and the config's auth."""
    return KazooClient(hosts=cfg.hosts, timeout=cfg.session_timeout_s, **client_kwargs(cfg), **_tls_kwargs(cfg),
                       **kwargs)


@dataclass(frozen=True)
class Secured:
    """What `secure_tree` did: znodes given the ACL, and those ZooKeeper refused (owned by another identity)."""

    znodes: int
    refused: tuple[str, ...] = ()


def secure_tree(zk: Any, root: str, acl: Sequence[ACL]) -> Secured:
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


def secure_root(zk: Any, cfg: ZooKeeperConfig) -> Secured | None:
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

    def __init__(self, zk: Any, cfg: ZooKeeperConfig):
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
