"""Which identity may do what to each znode under `zookeeper.root` (issue 32, "One identity per role";
names in config/identities.py, paths in protocol/znodes.py).

The daemon and the operator (the CLI, which takes an app's lock when no daemon leads) may do
everything. An app's agent may read its commands and the lock (to check who leads), delete the
commands it handled, create and delete its acks, and create its own znodes (`agent`, `agent_epoch`):
so only the daemon and the operator write commands and lock nodes, and only the agent writes acks.
ZooKeeper checks CREATE and DELETE on the parent, so a child's own ACL only governs reading,
rewriting and its ACL. The agent never reads the journal, requests or results: it has no entry there.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass

from kazoo.security import ACL, Id, Permissions

from sparkscale.config.identities import DAEMON, OPERATOR, USER_PREFIX, digest_user
from sparkscale.protocol import znodes

READ, WRITE, CREATE, DELETE, ADMIN, ALL = (Permissions.READ, Permissions.WRITE, Permissions.CREATE,
                                           Permissions.DELETE, Permissions.ADMIN, Permissions.ALL)


@dataclass(frozen=True)
class RoleIds:
    """The digest ids (`user:hash`, identities.Credentials.digest_id) ACLs name; `agent` is the
    app's agent's (None: not known yet, the agent gets no entry)."""

    daemon: str
    operator: str
    agent: str | None = None


def digest(perms: int, digest_id: str) -> ACL:
    return ACL(perms, Id("digest", digest_id))


def _acl(ids: RoleIds, agent_perms: int) -> list[ACL]:
    acl = [digest(ALL, ids.daemon), digest(ALL, ids.operator)]
    if ids.agent is not None and agent_perms:
        acl.append(digest(agent_perms, ids.agent))
    return acl


def control_acl(ids: RoleIds) -> list[ACL]:
    """Daemon-wide znodes: the daemon and the operator, nobody else."""
    return _acl(RoleIds(ids.daemon, ids.operator), 0)


def acl_layout(root: str, app: str, ids: RoleIds) -> dict[str, list[ACL]]:
    """Each fixed znode of `app` (and the root above it) with its ACL, parents first."""
    root = root.rstrip("/") or "/"
    return {
        root: control_acl(ids),
        f"{root.rstrip('/')}/apps": control_acl(ids),
        # READ: the agent learns the daemon's and operator's ids here (agent_acl); CREATE: its own znodes.
        znodes.app_path(root, app): _acl(ids, READ | CREATE),
        znodes.commands_path(root, app): _acl(ids, READ | DELETE),  # DELETE: pruning handled commands
        znodes.leader_path(root, app): _acl(ids, READ),
        znodes.acks_path(root, app): _acl(ids, READ | CREATE | DELETE),
        znodes.journal_path(root, app): _acl(ids, 0),
        znodes.requests_path(root, app): _acl(ids, 0),
        znodes.results_path(root, app): _acl(ids, 0),
    }


def _children_acl(root: str, app: str, ids: RoleIds) -> dict[str, list[ACL]]:
    """What the daemon and the operator create under an app's directories: commands and lock nodes
    the agent reads, requests and results it has no business with."""
    readable = _acl(ids, READ)
    return {
        znodes.commands_path(root, app): readable,
        znodes.leader_path(root, app): readable,
        znodes.requests_path(root, app): _acl(ids, 0),
        znodes.results_path(root, app): _acl(ids, 0),
    }


def app_of(root: str, path: str) -> str | None:
    """The app whose subtree `path` is in (None: the root or a daemon-wide znode)."""
    apps = f"{root.rstrip('/')}/apps/"
    if not path.startswith(apps):
        return None
    return path[len(apps):].split("/", 1)[0] or None


def acl_for_path(root: str, path: str, ids: RoleIds) -> list[ACL]:
    """The ACL a daemon or operator client gives a znode it creates at `path` (`ids.agent`: the
    agent of the app `path` belongs to, if any)."""
    app = app_of(root, path)
    if app is None:
        return control_acl(ids)
    fixed = acl_layout(root, app, ids)
    if path in fixed:
        return fixed[path]
    parent = path.rsplit("/", 1)[0]
    return _children_acl(root, app, ids).get(parent, control_acl(ids))


def agent_acl(agent_id: str, readers: Iterable[str]) -> list[ACL]:
    """The ACL of what the agent creates (acks, `agent`, `agent_epoch`): everything for itself, READ
    for each digest id in `readers` (the daemon's and the operator's, from its app directory's data,
    which only they can write: so the agent needs no one else's secret)."""
    return [digest(ALL, agent_id), *(digest(READ, other) for other in sorted(set(readers) - {agent_id}))]


# A digest id as ZooKeeper keeps it: `user:base64(sha1(user:password))`.
_DIGEST_ID = re.compile(rf"{re.escape(USER_PREFIX)}[A-Za-z0-9._-]{{1,200}}:[A-Za-z0-9+/]{{27}}=")
MAX_READERS = 8


def readers_data(ids: RoleIds) -> bytes:
    """The app directory's data: the digest ids that may read what the agent creates. In the data and
    not read from the directory's ACL because ZooKeeper shows a digest id's hash as `x` to a client
    without ADMIN on the znode (the agent has none there)."""
    return json.dumps({"readers": [ids.daemon, ids.operator]}).encode()


def parse_readers(data: bytes) -> list[str] | None:
    """The digest ids in an app directory's data (None: not a list of at most MAX_READERS ids)."""
    try:
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    readers = document.get("readers") if isinstance(document, dict) else None
    if (not isinstance(readers, list) or not 0 < len(readers) <= MAX_READERS
            or not all(isinstance(r, str) and _DIGEST_ID.fullmatch(r) for r in readers)):
        return None
    return readers


def acl_names(acls: Iterable[ACL], users: Iterable[str], perms: int = ALL) -> bool:
    """Whether `acls` gives `perms` (all of them) to a digest identity whose user is in `users`."""
    wanted = set(users)
    return any(acl.id.scheme == "digest" and digest_user(acl.id.id) in wanted and acl.perms & perms == perms
               for acl in acls)


def client_users(zk: object) -> frozenset[str]:
    """The digest users a client authenticates as (kazoo's `auth_data`; none for a client without)."""
    auth = getattr(zk, "auth_data", None) or ()
    return frozenset(digest_user(credential) for scheme, credential in auth if scheme == "digest")


def control_users() -> frozenset[str]:
    """Who may lead: a lock node or command counts only if one of these has ALL on it."""
    return frozenset({DAEMON.user, OPERATOR.user})


def role_identities_on(zk: object) -> bool:
    """Whether this client is one of the role identities (security.identity_dir): then the rules
    above are in force, and fencing and acks are checked by ACL too (protocol/fencing.py, commands.py)."""
    return any(user.startswith(USER_PREFIX) for user in client_users(zk))
