"""Making the identities and applying their permissions (issue 32, "One identity per role"):
`sparkscale cluster up` makes the daemon's and the operator's secrets and locks the ZooKeeper root
before it returns; `pipeline submit` (the driver's launch) makes the app's agent identity, its Redis
user and the app's znodes with their ACLs before the driver starts. Both run as the operator.

Who may do what is protocol/acls.py's (ZooKeeper) and redis_acl.py's (Redis); names and files,
config/identities.py's. Without `security.identity_dir`, only the old single identity's root locking is done.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError
from kazoo.security import ACL

from sparkscale import zkconn
from sparkscale.config import Config, ConfigError, ConfigProblem
from sparkscale.config.identities import (
    DAEMON,
    OPERATOR,
    Credentials,
    Identity,
    Role,
    ensure_secret,
    identity_for,
    read_credentials,
)
from sparkscale.config.secrets import zookeeper_auth
from sparkscale.protocol.acls import RoleIds, acl_layout, control_acl, readers_data
from sparkscale.protocol.znodes import app_path
from sparkscale.redis_acl import set_user
from sparkscale.redisconn import connect_as

log = structlog.get_logger(__name__)

START_TIMEOUT_S = 15.0


def make_cluster_secrets(cfg: Config) -> None:
    """The daemon's and the operator's secrets (kept if present); before Redis starts, whose config
    names their users (localenv/redis_auth.py)."""
    if cfg.security.identity_dir is not None:
        for identity in (DAEMON, OPERATOR):
            ensure_secret(cfg.security.identity_dir, identity)


def agent_identities(identity_dir: str) -> list[Identity]:
    """The agents whose secrets `identity_dir` holds (made by earlier submits)."""
    prefix = f"{Role.AGENT.value}-"
    found = []
    for path in sorted(Path(identity_dir).expanduser().glob(f"{prefix}*.secret")):
        try:
            found.append(identity_for(Role.AGENT, path.name[len(prefix):-len(".secret")]))
        except ValueError:
            continue  # not a name submit makes
    return found


def set_znode_acls(zk: KazooClient, layout: dict[str, list[ACL]]) -> None:
    """Create each znode of `layout` (parents first) with its ACL, or set it on one already there."""
    for path, acl in layout.items():
        zk.ensure_path(path.rsplit("/", 1)[0] or "/")
        try:
            zk.create(path, b"", acl=acl)
        except NodeExistsError:
            zk.set_acls(path, acl)


def set_app_layout(zk: KazooClient, root: str, app: str, ids: RoleIds) -> None:
    """An app's znodes with their ACLs, and in its directory's data who may read what its agent creates."""
    set_znode_acls(zk, acl_layout(root, app, ids))
    zk.set(app_path(root, app), readers_data(ids))


def _started(cfg: Config, zk: KazooClient) -> KazooClient:
    zk.start(timeout=min(START_TIMEOUT_S, cfg.cluster.start_timeout_s))
    return zk


def _credentials(cfg: Config, identity: Identity) -> Credentials:
    """From `security.identity_dir` (an agent's too: not a driver's own $SPARKSCALE_IDENTITY_FILE)."""
    assert cfg.security.identity_dir is not None
    try:
        return read_credentials(identity, identity.secret_path(cfg.security.identity_dir))
    except ValueError as exc:
        raise ConfigError([ConfigProblem(cfg.security.identity_dir, "security.identity_dir", str(exc))]) from None


def _role_ids(cfg: Config, agent: Identity | None = None) -> RoleIds:
    return RoleIds(_credentials(cfg, DAEMON).digest_id, _credentials(cfg, OPERATOR).digest_id,
                   None if agent is None else _credentials(cfg, agent).digest_id)


def secure_cluster(cfg: Config) -> None:
    """Right after ZooKeeper and Redis answer at `cluster up`: with identities, the root (and
    `root/apps`) for the daemon and the operator alone, every known app's layout, and the Redis
    users made again from the secrets (a Redis that was already running keeps its users otherwise);
    with the single `zookeeper.auth_file` identity, the whole root locked to it now (issue 32: not
    only once a daemon stays connected). Nothing without either."""
    root = cfg.zookeeper.root
    if cfg.security.identity_dir is None:
        if zookeeper_auth(cfg.zookeeper) is None:
            return
        zk = _started(cfg, zkconn.client(cfg.zookeeper))
        try:
            zkconn.secure_root(zk, cfg.zookeeper)
        finally:
            zk.stop()
            zk.close()
        return
    agents = agent_identities(cfg.security.identity_dir)
    zk = _started(cfg, zkconn.client_as(cfg, OPERATOR))
    try:
        control = control_acl(_role_ids(cfg))
        set_znode_acls(zk, {root: control, f"{root.rstrip('/')}/apps": control})
        for agent in agents:
            assert agent.app is not None
            set_app_layout(zk, root, agent.app, _role_ids(cfg, agent))
    finally:
        zk.stop()
        zk.close()
    _set_redis_users(cfg, [DAEMON, *agents])
    log.info("identities.secured", root=root, agents=[a.app for a in agents])


def _set_redis_users(cfg: Config, identities: Sequence[Identity]) -> None:
    client = connect_as(cfg, OPERATOR)
    try:
        for identity in identities:
            set_user(client, _credentials(cfg, identity), cfg.redis.key_prefix)
    finally:
        client.close()


def provision_app(cfg: Config, app: str) -> Path | None:
    """Before `app`'s driver starts: its agent's secret (kept if present), its Redis user and the
    app's znodes with their ACLs; the secret's path, the only one the driver is given (None:
    identities are off)."""
    if cfg.security.identity_dir is None:
        return None
    agent = identity_for(Role.AGENT, app)
    secret = ensure_secret(cfg.security.identity_dir, agent)
    _set_redis_users(cfg, [agent])
    zk = _started(cfg, zkconn.client_as(cfg, OPERATOR))
    try:
        set_app_layout(zk, cfg.zookeeper.root, app, _role_ids(cfg, agent))
    finally:
        zk.stop()
        zk.close()
    log.info("identities.app_provisioned", app=app, user=agent.user)
    return secret
