"""Commands and acks: the ZooKeeper control channel between the daemon and the in-driver agent.

Both ends use this module so that the znode names and the JSON shapes (docs/internals.md) are
written down once: commands are sequential znodes `R/apps/{app}/commands/cmd-NNNNNNNNNN` with
`{"type", "args", "epoch", "issued_at"}`; the agent answers each with `R/apps/{app}/acks/<same name>`
holding `{"ok", "detail", "done_at"}`.
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from sparkscale.protocol.znodes import acks_path, commands_path

log = structlog.get_logger(__name__)

COMMAND_PREFIX = "cmd-"
_COMMAND_NAME = re.compile(r"cmd-(\d+)")


class CommandFormatError(ValueError):
    """A command znode whose name or JSON is not a command; the agent acks it `ok: false`."""


class AckTimeout(TimeoutError):
    """No ack arrived in time (the agent is down, busy with a long command, or fenced off)."""


def command_seq(name: str) -> int:
    """The sequence number ZooKeeper appended to a command znode's name."""
    match = _COMMAND_NAME.fullmatch(name)
    if match is None:
        raise CommandFormatError(f"{name!r} is not a command znode name (expected cmd-NNNNNNNNNN)")
    return int(match.group(1))


# -- messages -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Command:
    """One command from the acting daemon; `epoch` is its leader epoch, used for fencing."""

    type: str
    args: dict[str, Any] = field(default_factory=dict)
    epoch: int = 0
    issued_at: float = 0.0
    name: str = ""  # the znode name, known once written

    @property
    def seq(self) -> int:
        return command_seq(self.name)

    def to_json(self) -> bytes:
        body = {"type": self.type, "args": self.args, "epoch": self.epoch, "issued_at": self.issued_at}
        return json.dumps(body).encode()

    @classmethod
    def from_znode(cls, name: str, data: bytes) -> Command:
        """Parse a command znode; raise CommandFormatError saying what is wrong with it."""
        try:
            body = json.loads(data.decode() if data else "")
        except (UnicodeDecodeError, ValueError) as exc:
            raise CommandFormatError(f"command data is not JSON: {exc}") from None
        if not isinstance(body, dict):
            raise CommandFormatError("command data is not a JSON object")
        kind, args, epoch = body.get("type"), body.get("args", {}), body.get("epoch")
        if not isinstance(kind, str) or not kind:
            raise CommandFormatError("command has no 'type'")
        if args is None:
            args = {}
        if not isinstance(args, dict):
            raise CommandFormatError("command 'args' is not a JSON object")
        # bool is an int in Python; an epoch of `true` is a bug in the sender, not epoch 1.
        if not isinstance(epoch, int) or isinstance(epoch, bool):
            raise CommandFormatError(f"command 'epoch' must be an integer (got {epoch!r})")
        issued_at = body.get("issued_at", 0.0)
        if not isinstance(issued_at, (int, float)) or isinstance(issued_at, bool):
            issued_at = 0.0
        return cls(type=kind, args=args, epoch=epoch, issued_at=float(issued_at), name=name)


@dataclass(frozen=True)
class Ack:
    """The agent's outcome of one command. `detail` is a reason (str) or a JSON-able result."""

    ok: bool
    detail: Any
    done_at: float

    def to_json(self) -> bytes:
        return json.dumps({"ok": self.ok, "detail": self.detail, "done_at": self.done_at}, default=str).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Ack:
        body = json.loads(data.decode())
        return cls(ok=bool(body["ok"]), detail=body.get("detail"), done_at=float(body.get("done_at", 0.0)))


# -- client side (daemon, tests) ------------------------------------------------------------------


def send_command(
    zk_client: KazooClient, root: str, app: str, type: str, args: dict[str, Any] | None, epoch: int
) -> str:
    """Write one command as a sequential znode; return its name (`cmd-NNNNNNNNNN`) for `wait_ack`."""
    command = Command(type=type, args=dict(args or {}), epoch=int(epoch), issued_at=time.time())
    zk_client.ensure_path(acks_path(root, app))
    path = zk_client.create(
        f"{commands_path(root, app)}/{COMMAND_PREFIX}", command.to_json(), sequence=True, makepath=True
    )
    name = path.rsplit("/", 1)[1]
    log.info("control.command_sent", app=app, command=name, type=type, args=command.args, epoch=epoch)
    return name


def wait_for_znode(zk_client: KazooClient, path: str, timeout_s: float) -> bytes | None:
    """The data of `path` once it exists, or None after `timeout_s`."""
    changed = threading.Event()
    deadline = time.monotonic() + timeout_s
    while True:
        changed.clear()
        # The exists-watch fires when the node is created, so no polling is needed; the bounded
        # wait below only guards against a watch lost with a ZooKeeper session.
        if zk_client.exists(path, watch=lambda _event: changed.set()) is not None:
            try:
                data, _stat = zk_client.get(path)
            except NoNodeError:  # removed between exists and get (cleanup): keep waiting
                continue
            return data
        remaining_s = deadline - time.monotonic()
        if remaining_s <= 0:
            return None
        changed.wait(min(remaining_s, 1.0))


def wait_ack(zk_client: KazooClient, root: str, app: str, cmd_name: str, timeout_s: float) -> Ack:
    """Block until the agent acks `cmd_name`; raise AckTimeout after `timeout_s`."""
    data = wait_for_znode(zk_client, f"{acks_path(root, app)}/{cmd_name}", timeout_s)
    if data is None:
        raise AckTimeout(f"no ack for {app}/{cmd_name} within {timeout_s:.1f} s")
    ack = Ack.from_json(data)
    log.info("control.ack_received", app=app, command=cmd_name, ok=ack.ok, detail=ack.detail)
    return ack
