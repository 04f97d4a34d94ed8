"""An in-memory stand-in for the few KazooClient calls the control channel, the agent's admission
check and the migration journal make: znodes with versions, sessions (ephemeral owners), sequential
names per parent, and multi-op transactions answered as ZooKeeper answers them (the failing op's
error, the others rolled back)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
    RuntimeInconsistency,
)
from kazoo.protocol.states import ZnodeStat


@dataclass
class Node:
    data: bytes
    version: int = 0
    owner: int = 0  # ephemeralOwner: 0 for a persistent znode
    ctime_ms: int = 0


class FakeZk:
    def __init__(self, session: int = 0x1001, now_ms: int = 1_000_000):
        self.nodes: dict[str, Node] = {"/": Node(b"")}
        self.session = session
        self.now_ms = now_ms
        self._seq: dict[str, int] = {}
        self.writes: list[tuple[str, bytes]] = []  # every data write (set, create), in order

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
        node = self.nodes.get(path)
        return None if node is None else self._stat(node, path)

    def get(self, path: str, watch: Any = None) -> tuple[bytes, ZnodeStat]:
        if path not in self.nodes:
            raise NoNodeError(path)
        node = self.nodes[path]
        return node.data, self._stat(node, path)

    def get_children(self, path: str, watch: Any = None) -> list[str]:
        if path not in self.nodes:
            raise NoNodeError(path)
        return sorted(self._children(path))

    # -- writes -----------------------------------------------------------------------------------

    def ensure_path(self, path: str) -> None:
        parts = [p for p in path.split("/") if p]
        for i in range(1, len(parts) + 1):
            self.nodes.setdefault("/" + "/".join(parts[:i]), Node(b"", ctime_ms=self.now_ms))

    def create(self, path: str, value: bytes = b"", acl: Any = None, ephemeral: bool = False,
               sequence: bool = False, makepath: bool = False) -> str:
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
        self.nodes[path] = Node(value, 0, self.session if ephemeral else 0, self.now_ms)
        self.writes.append((path, value))
        return path

    def set(self, path: str, value: bytes, version: int = -1) -> ZnodeStat:
        if path not in self.nodes:
            raise NoNodeError(path)
        node = self.nodes[path]
        if version not in (-1, node.version):
            raise BadVersionError(path)
        node.data, node.version = value, node.version + 1
        self.writes.append((path, value))
        return self._stat(node, path)

    def delete(self, path: str, version: int = -1, recursive: bool = False) -> bool:
        if path not in self.nodes:
            raise NoNodeError(path)
        del self.nodes[path]
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
