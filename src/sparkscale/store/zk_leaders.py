"""Who leads each app, read from its leader lock in ZooKeeper (protocol/znodes.py `leader_path`;
the lock's sequence is the leader's epoch, protocol/fencing.py)."""

from __future__ import annotations

from kazoo.client import KazooClient
from kazoo.recipe.lock import Lock

from sparkscale.protocol.fencing import LiveLock, read_live_lock
from sparkscale.protocol.znodes import leader_path


class ZkLeaders:
    def __init__(self, zk: KazooClient, root: str) -> None:
        self.zk = zk
        self.root = root

    def current_leader(self, app: str) -> str | None:
        """Who leads `app` (read-only; for `sparkscale status`)."""
        path = leader_path(self.root, app)
        if self.zk.exists(path) is None:
            return None
        contenders = Lock(self.zk, path).contenders()
        return str(contenders[0]) if contenders else None

    def live_lock(self, app: str) -> LiveLock | None:
        return read_live_lock(self.zk, self.root, app)
