"""An in-memory stand-in for the few KazooClient calls the control channel, the agent's admission
check and the migration journal make: znodes with versions, sessions (ephemeral owners), sequential
names per parent, and multi-op transactions answered as ZooKeeper answers them (the failing op's
error, the others rolled back); and ACLs: kept per znode, and checked as ZooKeeper checks them
(CREATE and DELETE on the parent, READ and WRITE on the znode) against the digest identities the
client authenticated as (`auth_data`, as kazoo's), world entries open to all.

Watches as ZooKeeper sets them (`get`/`exists` a data watch, `get_children` a child watch, each
fired once), delivered at once or, with `hold_events`, when `deliver()` runs them (kazoo's event
thread); connection states told to the listeners (`change_state`), a lost session firing every
watch as kazoo does; and `ops`, every call made, for counting round trips."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooState
from kazoo.exceptions import (
    BadVersionError,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
    RuntimeInconsistency,
)
from kazoo.protocol.states import EventType, WatchedEvent, ZnodeStat
from kazoo.security import ACL, Permissions, make_digest_acl_credential


@dataclass
class Node:
    data: bytes
    version: int = 0
    owner: int = 0  # ephemeralOwner: 0 for a persistent znode
    ctime_ms: int = 0
    acl: list[ACL] | None = None  # None: open to all (kazoo's default without auth)


class FakeZk:
    def __init__(self, session: int = 0x1001, now_ms: int = 1_000_000):
        self.nodes: dict[str, Node] = {"/": Node(b"")}
        self.session = session
        self.auth_data: set[tuple[str, str]] = set()  # ("digest", "user:password") as kazoo keeps it
        self.default_acl: list[ACL] | None = None
        self.now_ms = now_ms
        self._seq: dict[str, int] = {}
        self.writes: list[tuple[str, bytes]] = []  # every data write (set, create), in order
        self.ops: list[tuple[str, str]] = []  # every call, (operation, path), in order
        self.state = KazooState.CONNECTED
        self.listeners: list[Callable[[str], object]] = []
        self.data_watches: dict[str, list[Callable[[WatchedEvent], object]]] = {}
        self.child_watches: dict[str, list[Callable[[WatchedEvent], object]]] = {}
        self.hold_events = False  # True: fired watches wait for `deliver()`
        self.held: list[tuple[Callable[[WatchedEvent], object], WatchedEvent]] = []

    # -- watches and connection states ------------------------------------------------------------

    @property
    def connected(self) -> bool:
        return self.state == KazooState.CONNECTED

    @connected.setter
    def connected(self, up: bool) -> None:
        self.state = KazooState.CONNECTED if up else KazooState.SUSPENDED

    def add_listener(self, listener: Callable[[str], object]) -> None:
        self.listeners.append(listener)

    def change_state(self, state: str) -> None:
        """The connection goes `state`: the listeners are told; a lost session fires every watch."""
        self.state = state
        for listener in list(self.listeners):
            listener(state)
        if state == KazooState.LOST:
            watches = [w for ws in (*self.data_watches.values(), *self.child_watches.values()) for w in ws]
            self.data_watches, self.child_watches = {}, {}
            for watch in watches:
                self._dispatch(watch, WatchedEvent(EventType.NONE, state, None))

    def ChildrenWatch(self, path: str, func: Callable[[list[str]], object]) -> None:  # noqa: N802 (kazoo's name)
        """kazoo's recipe: `func(children)` now, then after each change of the list."""
        def fired(_event: WatchedEvent) -> None:
            if path in self.nodes:
                func(self.get_children(path, watch=fired))

        func(self.get_children(path, watch=fired))

    def reads(self) -> list[tuple[str, str]]:
        return [op for op in self.ops if op[0] in ("get", "get_children", "exists")]

    def deliver(self) -> None:
        held, self.held = self.held, []
        for watch, event in held:
            watch(event)

    def _watch(self, watches: dict[str, list[Callable[[WatchedEvent], object]]], path: str, watch: Any) -> None:
        if watch is not None and watch not in watches.setdefault(path, []):
            watches[path].append(watch)

    def _fire(self, watches: dict[str, list[Callable[[WatchedEvent], object]]], path: str, kind: str) -> None:
        for watch in watches.pop(path, []):
            self._dispatch(watch, WatchedEvent(kind, self.state, path))

    def _dispatch(self, watch: Callable[[WatchedEvent], object], event: WatchedEvent) -> None:
        if self.hold_events:
            self.held.append((watch, event))
        else:
            watch(event)

    def _changed(self, path: str, kind: str) -> None:
        self._fire(self.data_watches, path, kind)
        if kind == EventType.DELETED:
            self._fire(self.child_watches, path, kind)
        if kind in (EventType.CREATED, EventType.DELETED):
            self._fire(self.child_watches, path.rsplit("/", 1)[0] or "/", EventType.CHILD)

    # -- sessions ---------------------------------------------------------------------------------

    @property
    def client_id(self) -> tuple[int, bytes]:
        return (self.session, b"")

    def as_session(self, session: int) -> FakeZk:
        """Another client of the same ensemble (its own session, the same znodes)."""
        other = FakeZk.__new__(FakeZk)
        other.__dict__.update(self.__dict__)
        other.session = session
        return other

    def as_identity(self, session: int, user: str, password: str, default_acl: list[ACL] | None = None) -> FakeZk:
        """Another client, authenticated as the digest identity `user` (and creating with `default_acl`)."""
        other = self.as_session(session)
        other.auth_data = {("digest", f"{user}:{password}")}
        other.default_acl = default_acl
        return other

    def _allowed(self, path: str, perm: int) -> None:
        node = self.nodes.get(path)
        if node is None or node.acl is None:
            return
        ids = {make_digest_acl_credential(*cred.split(":", 1)) for scheme, cred in self.auth_data if scheme == "digest"}
        for entry in node.acl:
            named = entry.id.scheme == "world" or (entry.id.scheme == "digest" and entry.id.id in ids)
            if entry.perms & perm and named:
                return
        raise NoAuthError(path)

    def expire(self, session: int) -> None:
        """The session ends: its ephemeral znodes go."""
        for path in [p for p, n in self.nodes.items() if n.owner == session]:
            del self.nodes[path]

    # -- reads ------------------------------------------------------------------------------------

    def _stat(self, node: Node, path: str) -> ZnodeStat:
        children = len(self._children(path))
        return ZnodeStat(0, 0, node.ctime_ms, node.ctime_ms, node.version, 0, 0, node.owner, len(node.data),
                         children, 0)

    def _children(self, path: str) -> list[str]:
        prefix = path.rstrip("/") + "/"
        return [p[len(prefix):] for p in self.nodes if p.startswith(prefix) and "/" not in p[len(prefix):]]

    def exists(self, path: str, watch: Any = None) -> ZnodeStat | None:
        self.ops.append(("exists", path))
        self._watch(self.data_watches, path, watch)
        node = self.nodes.get(path)
        return None if node is None else self._stat(node, path)

    def get(self, path: str, watch: Any = None) -> tuple[bytes, ZnodeStat]:
        self.ops.append(("get", path))
        if path not in self.nodes:
            raise NoNodeError(path)
        self._allowed(path, Permissions.READ)
        self._watch(self.data_watches, path, watch)
        node = self.nodes[path]
        return node.data, self._stat(node, path)

    def get_children(self, path: str, watch: Any = None) -> list[str]:
        self.ops.append(("get_children", path))
        if path not in self.nodes:
            raise NoNodeError(path)
        self._allowed(path, Permissions.READ)
        self._watch(self.child_watches, path, watch)
        return sorted(self._children(path))

    def get_acls(self, path: str) -> tuple[list[ACL], ZnodeStat]:
        """As ZooKeeper 3.5+: READ or ADMIN on the znode is needed."""
        if path not in self.nodes:
            raise NoNodeError(path)
        self._allowed(path, Permissions.READ | Permissions.ADMIN)
        node = self.nodes[path]
        return list(node.acl if node.acl is not None else []), self._stat(node, path)

    def set_acls(self, path: str, acls: list[ACL], version: int = -1) -> ZnodeStat:
        if path not in self.nodes:
            raise NoNodeError(path)
        self._allowed(path, Permissions.ADMIN)
        self.nodes[path].acl = list(acls)
        return self._stat(self.nodes[path], path)

    # -- writes -----------------------------------------------------------------------------------

    def ensure_path(self, path: str, acl: list[ACL] | None = None) -> None:
        self.ops.append(("ensure_path", path))
        parts = [p for p in path.split("/") if p]
        for i in range(1, len(parts) + 1):
            sub = "/" + "/".join(parts[:i])
            if sub not in self.nodes:
                self._allowed(sub.rsplit("/", 1)[0] or "/", Permissions.CREATE)
                self.nodes[sub] = Node(b"", ctime_ms=self.now_ms, acl=acl or self.default_acl)
                self._changed(sub, EventType.CREATED)

    def create(self, path: str, value: bytes = b"", acl: Any = None, ephemeral: bool = False,
               sequence: bool = False, makepath: bool = False) -> str:
        self.ops.append(("create", path))
        parent = path.rsplit("/", 1)[0] or "/"
        if parent not in self.nodes:
            if not makepath:
                raise NoNodeError(parent)
            self.ensure_path(parent)
        if sequence:
            n = self._seq.get(parent, 0)
            self._seq[parent] = n + 1
            path = f"{path}{n:010d}"
        if path in self.nodes:
            raise NodeExistsError(path)
        self._allowed(parent, Permissions.CREATE)
        self.nodes[path] = Node(value, 0, self.session if ephemeral else 0, self.now_ms, acl or self.default_acl)
        self.writes.append((path, value))
        self._changed(path, EventType.CREATED)
        return path

    def set(self, path: str, value: bytes, version: int = -1) -> ZnodeStat:
        self.ops.append(("set", path))
        if path not in self.nodes:
            raise NoNodeError(path)
        node = self.nodes[path]
        self._allowed(path, Permissions.WRITE)
        if version not in (-1, node.version):
            raise BadVersionError(path)
        node.data, node.version = value, node.version + 1
        self.writes.append((path, value))
        self._changed(path, EventType.CHANGED)
        return self._stat(node, path)

    def delete(self, path: str, version: int = -1, recursive: bool = False) -> bool:
        self.ops.append(("delete", path))
        if path not in self.nodes:
            raise NoNodeError(path)
        self._allowed(path.rsplit("/", 1)[0] or "/", Permissions.DELETE)
        del self.nodes[path]
        self._changed(path, EventType.DELETED)
        return True

    def transaction(self) -> FakeTransaction:
        return FakeTransaction(self)


class FakeTransaction:
    def __init__(self, zk: FakeZk):
        self.zk = zk
        self.ops: list[tuple[str, tuple[Any, ...]]] = []

    def check(self, path: str, version: int) -> None:
        self.ops.append(("check", (path, version)))

    def create(self, path: str, value: bytes = b"") -> None:
        self.ops.append(("create", (path, value)))

    def set_data(self, path: str, value: bytes, version: int = -1) -> None:
        self.ops.append(("set_data", (path, value, version)))

    def commit(self) -> list[Any]:
        """All or nothing: the first failing op answers its error, the ops before it RolledBackError
        and those after it RuntimeInconsistency (as ZooKeeper's multi does)."""
        for index, (kind, args) in enumerate(self.ops):
            error = self._fails(kind, args)
            if error is not None:
                return ([RolledBackError()] * index + [error]
                        + [RuntimeInconsistency()] * (len(self.ops) - index - 1))
        results: list[Any] = []
        for kind, args in self.ops:
            if kind == "check":
                results.append(True)
            elif kind == "create":
                results.append(self.zk.create(args[0], args[1]))
            else:
                results.append(self.zk.set(*args))
        return results

    def _fails(self, kind: str, args: tuple[Any, ...]) -> Exception | None:
        path = args[0]
        node = self.zk.nodes.get(path)
        if kind == "create":
            return NodeExistsError() if node is not None else None
        if node is None:
            return NoNodeError()
        version = args[1] if kind == "check" else args[2]
        return BadVersionError() if version not in (-1, node.version) else None


def hold_lock(zk: FakeZk, root: str, app: str, epoch: int, session: int | None = None) -> str:
    """A kazoo Lock znode at sequence `epoch` under the app's leader path, owned by `session` (the
    client's own by default); its path."""
    from sparkscale.protocol.znodes import leader_path

    parent = leader_path(root, app)
    zk.ensure_path(parent)
    path = f"{parent}/0123456789abcdef__lock__{epoch:010d}"
    zk.nodes[path] = Node(b"daemon", 0, zk.session if session is None else session, zk.now_ms)
    return path
