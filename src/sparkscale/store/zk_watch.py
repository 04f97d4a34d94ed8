"""Znodes a cycle reads every time but that rarely change (an app's migration journal, its request
list), kept in memory while a ZooKeeper watch vouches for them, so that an ordinary cycle asks
ZooKeeper nothing.

A `ZnodeWatch` reads its znode with a one-shot watch and serves the value it read until any of:

- the watch fires (the znode changed, or was created or deleted; kazoo also fires every watch when
  the session is lost);
- the connection is suspended or the session lost (a listener on the client: the watch may be gone,
  and changes made meanwhile may not have been told);
- this process writes the znode (`forget(zk, path)`): the watch's event for the write reaches the
  client before the write's reply, but kazoo runs it on its event thread, maybe after the writer
  reads the value again.

Then the next `get` reads ZooKeeper again and sets a new watch. ZooKeeper tells a client of a change
before that client can read the changed data, so a kept value is never older than what a read would
return, but for the time kazoo takes to hand the event to its event thread. A read that a change
(or a loss) overtakes is returned but not kept (its generation moved on meanwhile).

kazoo's DataWatch and ChildrenWatch re-read after a reconnection but call back only when the value
changed, so a cache filled by their callbacks could not tell "unchanged" from "not watched"; a
one-shot watch set again by the cycle's own read can.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Generic, TypeVar, cast

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import NoNodeError

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
Watcher = Callable[[object], None]  # what kazoo calls when a watch fires (with its WatchedEvent)


class ZnodeWatch(Generic[T_co]):
    """One znode's value as `read(watcher)` gives it (a read that sets `watcher` on the znode)."""

    def __init__(self, read: Callable[[Watcher], T_co]) -> None:
        self._read = read
        self._lock = threading.Lock()
        self._generation = 0  # moves on each time the kept value stops being vouched for
        self._kept: tuple[T_co] | None = None  # None: nothing kept, the next `get` reads ZooKeeper

    @property
    def holds(self) -> bool:
        """Whether the next `get` is answered from memory."""
        with self._lock:
            return self._kept is not None

    def get(self) -> T_co:
        with self._lock:
            if self._kept is not None:
                return self._kept[0]
            generation = self._generation
        value = self._read(self._fired)
        with self._lock:
            if self._generation == generation:  # nothing happened since the read began: the watch vouches
                self._kept = (value,)
        return value

    def forget(self) -> None:
        with self._lock:
            self._generation += 1
            self._kept = None

    def _fired(self, _event: object) -> None:
        self.forget()


class _ClientWatches:
    """One client's watches by path, all forgotten when its connection is suspended or lost."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by_path: dict[str, ZnodeWatch[object]] = {}

    def on_state(self, state: str) -> None:
        # Called on kazoo's connection thread: no ZooKeeper call here, only flags.
        if state in (KazooState.SUSPENDED, KazooState.LOST):
            with self.lock:
                watches = list(self.by_path.values())
            for watch in watches:
                watch.forget()


_CLIENTS: weakref.WeakKeyDictionary[KazooClient, _ClientWatches] = weakref.WeakKeyDictionary()
_CLIENTS_LOCK = threading.Lock()


def _client(zk: KazooClient) -> _ClientWatches:
    with _CLIENTS_LOCK:
        watches = _CLIENTS.get(zk)
        if watches is None:
            watches = _CLIENTS[zk] = _ClientWatches()
            zk.add_listener(watches.on_state)
    return watches


def read_existing(zk: KazooClient, read: Callable[..., T], path: str, watcher: Watcher | None) -> T | None:
    """`read(path, watch=watcher)` (zk.get, zk.get_children); None when the znode does not exist.
    ZooKeeper sets no read's watch on a missing znode: `watcher` is then set on its creation, and a
    znode created between the two calls is read again."""
    while True:
        try:
            return read(path, watch=watcher)
        except NoNodeError:
            if watcher is None or zk.exists(path, watch=watcher) is None:
                return None


def watched(zk: KazooClient, path: str, read: Callable[[Watcher], T]) -> ZnodeWatch[T]:
    """The client's watch of `path` (one per client and path, made on first use with `read`)."""
    watches = _client(zk)
    with watches.lock:
        watch = watches.by_path.get(path)
        if watch is None:
            watch = watches.by_path[path] = ZnodeWatch(read)
    return cast(ZnodeWatch[T], watch)  # one `read` per path: what it reads is what it was made with


def forget(zk: KazooClient, path: str) -> None:
    """This process changed `path` through `zk` (or is told it did): the next read asks ZooKeeper."""
    with _CLIENTS_LOCK:
        watches = _CLIENTS.get(zk)
    if watches is None:
        return
    with watches.lock:
        watch = watches.by_path.get(path)
    if watch is not None:
        watch.forget()
