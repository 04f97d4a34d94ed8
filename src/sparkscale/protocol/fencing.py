"""Who may command an app's agent and write its journal: the live holder of the app's leader lock.

The lock is kazoo's Lock recipe under `leader_path(root, app)`: ephemeral sequential znodes named
`<uuid>__lock__NNNNNNNNNN`; the lowest sequence holds the lock and its sequence number is the
leader's epoch. An epoch a command merely *claims* proves nothing (anyone who can write a znode can
claim 2^31), so the agent and the journal read the live holder here, from ZooKeeper, when they act.
Both the daemon and the agent use this module (docs/internals.md, "Fencing").
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError, NoNodeError

from sparkscale.protocol.acls import acl_names, control_users, role_identities_on
from sparkscale.protocol.znodes import leader_path

# kazoo's Lock recipe: "__lock__" then the 10-digit sequence (negative once past 2^31, as kazoo reads it).
_LOCK_NODE = re.compile(r"__lock__(-?\d{10})$")
READ_ATTEMPTS = 3  # a holder that vanishes between the listing and its stat: look again


def lock_sequence(name: str) -> int | None:
    """The sequence number of a lock contender's znode name (the epoch it would lead with), or None."""
    match = _LOCK_NODE.search(name)
    return int(match.group(1)) if match else None


def holder_node(names: Iterable[str]) -> str | None:
    """The contender that holds the lock: the lowest sequence among kazoo Lock znode names."""
    contenders = [(seq, name) for name in names if (seq := lock_sequence(name)) is not None]
    return min(contenders)[1] if contenders else None


def holder_epoch(names: Iterable[str]) -> int | None:
    """The live leader's epoch given the lock's children (None: nobody holds the lock)."""
    node = holder_node(names)
    return None if node is None else lock_sequence(node)


@dataclass(frozen=True)
class LiveLock:
    """The lock znode that holds an app's leader lock right now."""

    path: str
    epoch: int
    owner: int  # the ZooKeeper session that created it (stat.ephemeralOwner)
    version: int  # its data version, for a transaction's check


def read_live_lock(zk: KazooClient, root: str, app: str) -> LiveLock | None:
    """The current holder of `app`'s leader lock as ZooKeeper says now; None if nobody holds it.
    A client of a role identity (protocol/acls.py) counts only lock nodes the daemon or the operator
    owns by their ACL (`trusted_holder`)."""
    if role_identities_on(zk):
        return trusted_holder(zk, root, app, control_users())
    parent = leader_path(root, app)
    for _ in range(READ_ATTEMPTS):
        try:
            node = holder_node(zk.get_children(parent))
        except NoNodeError:
            return None  # no daemon ever bid for this app
        if node is None:
            return None
        stat = zk.exists(f"{parent}/{node}")
        if stat is None:
            continue  # released between the two reads: the next contender may hold it now
        epoch = lock_sequence(node)
        assert epoch is not None
        return LiveLock(f"{parent}/{node}", epoch, stat.ephemeralOwner, stat.version)
    return None


def trusted_holder(zk: KazooClient, root: str, app: str, users: frozenset[str]) -> LiveLock | None:
    """The lowest-sequence lock node whose ACL gives ALL to a digest identity of `users` (issue 32,
    "Fencing"): a node anyone else made, even the lowest, is ignored, so it can neither command the
    agent nor hide the real leader. None: no such node."""
    parent = leader_path(root, app)
    try:
        names = zk.get_children(parent)
    except NoNodeError:
        return None
    for epoch, node in sorted((seq, name) for name in names if (seq := lock_sequence(name)) is not None):
        try:
            acls, stat = zk.get_acls(f"{parent}/{node}")
        except NoNodeError:
            continue  # released meanwhile: the next contender may hold it now
        except NoAuthError:
            continue  # one we may not even read: not the daemon's (it gives the agent READ)
        if acl_names(acls, users):
            return LiveLock(f"{parent}/{node}", epoch, stat.ephemeralOwner, stat.version)
    return None


def refusal(epoch: int, highest: int, live: LiveLock | None, sender: int) -> str | None:
    """Why a command claiming `epoch`, written by ZooKeeper session `sender`, is not from the leader
    (None: it is). `highest` is the highest epoch the agent accepted before: an older one is refused
    as stale first, so a deposed leader's command says so."""
    if epoch < highest:
        return f"stale epoch {epoch} < {highest}"
    if live is None:
        return "no leader holds the lock"
    if epoch != live.epoch:
        return f"not the current leader: epoch {epoch}, live lock epoch {live.epoch}"
    if sender != live.owner:
        return (f"not the current leader: written by session {sender:#x}, the lock of epoch {live.epoch} "
                f"is held by session {live.owner:#x}")
    return None
