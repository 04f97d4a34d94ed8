"""Leadership: exactly one process acts for an application at a time.

A kazoo Lock per app at `<root>/apps/<app>/leader`. Its holder is the leader; every command it
writes carries the lock znode's sequence number as its *epoch*. The agent runs a command only if its
epoch is the live lock holder's and its znode was written by the holder's session (it reads the
lock when it handles the command, protocol.fencing), and journal writes check the writer's lock
znode in the same transaction: a paused old leader that wakes up after a takeover cannot act.

Acquisition is non-blocking, tried once per cycle: standbys keep running their monitors and try
again next cycle. A suspended or lost ZooKeeper connection ends leadership at once (the session,
and with it the lock's ephemeral znode, may be gone; acting on a maybe-lost lock is what fencing
exists to prevent, and we do not rely on fencing alone).
"""

from __future__ import annotations

import os
import socket
import threading

import structlog
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException
from kazoo.recipe.lock import Lock

from sparkscale import zkconn
from sparkscale.config import Config
from sparkscale.config.identities import DAEMON
from sparkscale.protocol.fencing import lock_sequence
from sparkscale.protocol.znodes import leader_path
from sparkscale.store.zk_leaders import ZkLeaders

log = structlog.get_logger(__name__)


def default_identity() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"



def lock_epoch(node_name: str) -> int:
    """The sequence number kazoo's lock recipe appended to the znode name (10 digits); the agent
    reads the live holder's the same way (protocol.fencing)."""
    epoch = lock_sequence(node_name)
    if epoch is None:
        raise ValueError(f"{node_name!r} is not a kazoo lock znode name")
    return epoch


class LeaderElection:
    """This process's bid for one app's leader lock."""

    def __init__(self, zk: KazooClient, root: str, app: str, identity: str):
        self.zk = zk
        self.root = root
        self.app = app
        self.identity = identity
        self.path = leader_path(root, app)
        self._mutex = threading.Lock()
        self._lock = Lock(zk, self.path, identifier=identity)
        self._held = False
        self.epoch: int | None = None
        zk.add_listener(self._on_state)

    @property
    def is_leader(self) -> bool:
        """Held, and the ZooKeeper connection is up right now."""
        return self._held and self.zk.state == KazooState.CONNECTED

    def try_acquire(self) -> bool:
        """Become the leader if nobody is; True when this process leads (now or already)."""
        with self._mutex:
            if self._held:
                return self.is_leader
            if self.zk.state != KazooState.CONNECTED:
                return False
            return self._acquire(blocking=False, timeout_s=None)

    def acquire(self, timeout_s: float) -> bool:
        """Blocking acquisition (for one-shot commands that act without a daemon)."""
        with self._mutex:
            return self._acquire(blocking=True, timeout_s=timeout_s)

    def _acquire(self, blocking: bool, timeout_s: float | None) -> bool:
        try:
            got = self._lock.acquire(blocking=blocking, timeout=timeout_s)
        except KazooException as exc:  # includes LockTimeout
            log.warning("leader.acquire_failed", app=self.app, error=repr(exc))
            return False
        if got:
            self._held = True
            self.epoch = lock_epoch(self._lock.node)
            log.info("leader.acquired", app=self.app, identity=self.identity, epoch=self.epoch)
        return bool(got)

    def release(self) -> None:
        with self._mutex:
            if not self._held:
                return
            self._held = False
            try:
                self._lock.release()
            except KazooException as exc:
                log.warning("leader.release_failed", app=self.app, error=repr(exc))
            log.info("leader.released", app=self.app, identity=self.identity, epoch=self.epoch)

    def leader(self) -> str | None:
        """The identity of the current leader (any process), None if nobody holds the lock."""
        try:
            contenders = self._lock.contenders()
        except KazooException:
            return None
        return contenders[0] if contenders else None

    def _on_state(self, state: str) -> bool | None:
        # Called on kazoo's event thread: no blocking ZooKeeper calls here.
        if state == KazooState.LOST:
            was = self._held
            self._held = False
            self.epoch = None
            # The session and its ephemeral lock node are gone; the next bid needs a fresh recipe.
            self._lock = Lock(self.zk, self.path, identifier=self.identity)
            if was:
                log.warning("leader.lost", app=self.app, reason="zookeeper session lost", action="stop acting")
        elif state == KazooState.SUSPENDED and self._held:
            log.warning("leader.suspended", app=self.app, reason="zookeeper connection lost", action="not acting")
        elif state == KazooState.CONNECTED and self._held:
            log.info("leader.resumed", app=self.app, epoch=self.epoch)
        return None


def current_leader(zk: KazooClient, root: str, app: str) -> str | None:
    """Who leads `app` (read-only; for `sparkscale status`)."""
    return ZkLeaders(zk, root).current_leader(app)


def zk_client(cfg: Config) -> KazooClient:
    """A client that keeps reconnecting forever with back-off (the daemon waits out ZooKeeper), as
    the daemon identity; with the single `zookeeper.auth_file` identity it locks the root to it once
    connected (zkconn; with identities, `cluster up` set the root's ACLs per role)."""
    zk = zkconn.client_as(cfg, DAEMON,
                          connection_retry={"max_tries": -1, "delay": 0.5, "max_delay": 10.0, "backoff": 2})
    if cfg.security.identity_dir is None:
        zkconn.lock_root_on_connect(zk, cfg.zookeeper)
    return zk
