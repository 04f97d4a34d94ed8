"""Commands and acks: the ZooKeeper control channel between the daemon and the in-driver agent.

Both ends use this module so that the znode names and the JSON shapes (docs/internals.md) are
written down once: commands are ephemeral sequential znodes `R/apps/{app}/commands/cmd-NNNNNNNNNN`
with `{"type", "args", "epoch", "issued_at", "expires_at"}`, written in the sender's session (the
agent checks it is the leader lock holder's: protocol.fencing); the agent answers each with
`R/apps/{app}/acks/<same name>` holding `{"ok", "detail", "done_at"}`. The sender deletes both once
answered (the command alone when no answer came in time); `prune_channel` bounds what is left.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Annotated, Any

import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoAuthError, NoNodeError
from pydantic import Field, GetCoreSchemaHandler, JsonValue
from pydantic_core import CoreSchema

from sparkscale.config.identities import Role, identity_for
from sparkscale.model.codec import NAME, Check, Codec, Json, between, reshaped, whole, without_nulls
from sparkscale.model.fields import FieldError, get, is_number, object_at
from sparkscale.protocol.acls import acl_names, role_identities_on
from sparkscale.protocol.znodes import acks_path, commands_path

log = structlog.get_logger(__name__)

COMMAND_PREFIX = "cmd-"
_COMMAND_NAME = re.compile(r"cmd-(\d+)")
# How long a command may wait for the agent when its sender does not say (its ack timeout), and for
# commands written before `expires_at` existed (from their `issued_at`).
DEFAULT_COMMAND_TTL_S = 300.0
# Tolerated difference between the sender's clock and the agent's (both should run NTP).
EXPIRY_GRACE_S = 5.0


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


class CommandName(StrEnum):
    """The commands the agent carries out (agent/loop.py's handlers). A command of another type is
    still read, and refused by the agent naming the ones it knows."""

    SET_EXECUTORS = "set_executors"
    DECOMMISSION = "decommission"
    PAUSE_SOURCES = "pause_sources"
    RESUME_SOURCES = "resume_sources"
    STOP_QUERY = "stop_query"
    ABORT_QUERY = "abort_query"
    REPARTITION = "repartition"
    START_QUERY = "start_query"
    REPORT = "report"


def _issued_at(value: object) -> float:
    """A sender's clock reading; one that is no number reads as 0.0 (unknown), not as an error."""
    return value if isinstance(value, int | float) and is_number(value) else 0.0


@dataclass(frozen=True)
class Command:
    """One command from the acting daemon; `epoch` is its leader epoch, used for fencing. Written
    as `{type, args, epoch, issued_at}` and `expires_at` when set; `name` is the znode's."""

    type: Annotated[str, NAME]
    args: dict[str, Json] = field(default_factory=dict)
    epoch: Annotated[int, whole(0)] = 0
    issued_at: Annotated[float, Check(_issued_at)] = 0.0
    name: Annotated[str, Field(exclude=True)] = ""  # the znode name, known once written
    expires_at: Annotated[float, between()] | None = None  # issued_at + the sender's ack timeout

    @classmethod
    def __get_pydantic_core_schema__(cls, source: object, handler: GetCoreSchemaHandler) -> CoreSchema:
        return reshaped(handler, source, _command_in, _command_out)

    @property
    def seq(self) -> int:
        return command_seq(self.name)

    @property
    def deadline(self) -> float | None:
        """When the command goes stale: `expires_at`; for an older sender's command without it,
        `issued_at` + DEFAULT_COMMAND_TTL_S; None (never) when it carries neither."""
        if self.expires_at is not None:
            return self.expires_at
        return self.issued_at + DEFAULT_COMMAND_TTL_S if self.issued_at > 0 else None

    def overdue_s(self, now: float, grace_s: float = EXPIRY_GRACE_S) -> float | None:
        """Seconds since the command went stale (beyond `grace_s` of clock difference), None if live."""
        deadline = self.deadline
        if deadline is None or now <= deadline + grace_s:
            return None
        return now - deadline

    def to_json(self) -> bytes:
        return COMMAND_JSON.dumps(self).encode()

    @classmethod
    def from_znode(cls, name: str, data: bytes) -> Command:
        """Parse a command znode; raise CommandFormatError saying what is wrong with it (the field)."""
        try:
            return replace(COMMAND_JSON.loads(data or b""), name=name)
        except FieldError as exc:
            raise CommandFormatError(f"command {exc.path}: {exc.problem}" if exc.path else f"command: {exc}") from None


def _command_in(value: object) -> dict[str, JsonValue]:
    """`epoch` is required (a sender without one is a bug, not epoch 0); null `args` are none."""
    obj = without_nulls(object_at(value, ""), ("args",))
    get(obj, "type", "")
    get(obj, "epoch", "")
    return {k: v for k, v in obj.items() if k != "name"}


def _command_out(data: dict[str, Any]) -> dict[str, JsonValue]:
    return {k: v for k, v in data.items() if k != "expires_at" or v is not None}


@dataclass(frozen=True)
class Ack:
    """The agent's outcome of one command. `detail` is a reason (str) or a JSON-able result (what is
    not JSON is written as its string)."""

    ok: bool
    detail: Json
    done_at: float = 0.0

    @classmethod
    def __get_pydantic_core_schema__(cls, source: object, handler: GetCoreSchemaHandler) -> CoreSchema:
        return reshaped(handler, source, lambda v: {"detail": None, **object_at(v, "")})

    def to_json(self) -> bytes:
        return ACK_JSON.dumps(self).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Ack:
        return ACK_JSON.loads(data)


COMMAND_JSON: Codec[Command] = Codec(Command)
ACK_JSON: Codec[Ack] = Codec(Ack, label="ack")


# -- client side (daemon, tests) ------------------------------------------------------------------


def send_command(
    zk_client: KazooClient, root: str, app: str, type: str, args: dict[str, Any] | None, epoch: int,
    ttl_s: float = DEFAULT_COMMAND_TTL_S,
) -> str:
    """Write one command; return its name (`cmd-NNNNNNNNNN`) for `wait_ack`. `ttl_s` is how long the
    sender waits for the ack: the agent skips the command once it is older. The znode is ephemeral,
    in the sender's session: the agent runs it only if that session holds the app's leader lock,
    and it goes with the session."""
    now = time.time()
    command = Command(type=type, args=dict(args or {}), epoch=int(epoch), issued_at=now, expires_at=now + ttl_s)
    zk_client.ensure_path(acks_path(root, app))
    path = zk_client.create(
        f"{commands_path(root, app)}/{COMMAND_PREFIX}", command.to_json(), ephemeral=True, sequence=True,
        makepath=True,
    )
    name: str = path.rsplit("/", 1)[1]
    log.info("control.command_sent", app=app, command=name, type=type, args=command.args, epoch=epoch,
             ttl_s=ttl_s)
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
                data: bytes = zk_client.get(path)[0]
            except NoNodeError:  # removed between exists and get (cleanup): keep waiting
                continue
            return data
        remaining_s = deadline - time.monotonic()
        if remaining_s <= 0:
            return None
        changed.wait(min(remaining_s, 1.0))


def wait_ack(zk_client: KazooClient, root: str, app: str, cmd_name: str, timeout_s: float) -> Ack:
    """Block until the agent acks `cmd_name`, then delete the command and its ack; raise AckTimeout
    after `timeout_s`, having withdrawn the command so that no later agent runs it."""
    ack_path = f"{acks_path(root, app)}/{cmd_name}"
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            data = wait_for_znode(zk_client, ack_path, max(deadline - time.monotonic(), 0.0))
        except NoAuthError:
            data = b""  # there, but unreadable to the sender: not the agent's, which lets it read
        if data is None or trusted_ack(zk_client, app, ack_path):
            break
        _delete_quietly(zk_client, app, ack_path)  # forged: the agent's own may still come
    if data is None:
        _delete_quietly(zk_client, app, f"{commands_path(root, app)}/{cmd_name}")
        # Withdrawn: the agent can no longer start it; an ack written just before still counts.
        try:
            data, _stat = zk_client.get(ack_path)
        except (NoNodeError, KazooException):
            data = None
        if data is not None and not trusted_ack(zk_client, app, ack_path):
            data = None
        if data is None:
            log.warning("control.command_withdrawn", app=app, command=cmd_name, timeout_s=timeout_s)
            raise AckTimeout(f"no ack for {app}/{cmd_name} within {timeout_s:.1f} s")
    ack = Ack.from_json(data)
    log.info("control.ack_received", app=app, command=cmd_name, ok=ack.ok, detail=ack.detail)
    # The command first: a command left without its ack would run again after an agent restart.
    _delete_quietly(zk_client, app, f"{commands_path(root, app)}/{cmd_name}")
    _delete_quietly(zk_client, app, ack_path)
    return ack


def trusted_ack(zk_client: KazooClient, app: str, ack_path: str) -> bool:
    """Whether the ack at `ack_path` is the app's agent's: always without role identities; with them
    (protocol/acls.py), only if its ACL gives ALL to `sparkscale-agent-<app>`, which made it (issue
    32: a pre-created ack must not make the sender believe, nor the agent skip, a command)."""
    if not role_identities_on(zk_client):
        return True
    try:
        acls, _stat = zk_client.get_acls(ack_path)
    except (NoNodeError, NoAuthError):  # gone, or one the sender may not even read: not the agent's
        return False
    if acl_names(acls, {identity_for(Role.AGENT, app).user}):
        return True
    log.warning("control.ack_forged", app=app, znode=ack_path, reason="its ACL does not name the app's agent")
    return False


def _delete_quietly(zk_client: KazooClient, app: str, path: str) -> None:
    """Delete a command or ack znode the caller is done with; what a failure leaves, pruning removes."""
    try:
        zk_client.delete(path)
    except NoNodeError:
        pass
    except KazooException as exc:
        log.warning("control.cleanup_failed", app=app, znode=path, error=repr(exc))


# -- retention ------------------------------------------------------------------------------------

RETAIN_MAX_AGE_S = 3600.0  # no ack or answered command outlives this (far beyond any sender's wait)
RETAIN_MAX_ACKS = 100  # at most this many acks stay under an app (the newest)
RETAIN_GRACE_S = 10.0  # younger than this, nothing is pruned by count: its sender may be reading it


def prune_plan(acks: dict[str, float], commands: dict[str, float], handled_seq: int, now: float,
               max_age_s: float = RETAIN_MAX_AGE_S, keep: int = RETAIN_MAX_ACKS,
               grace_s: float = RETAIN_GRACE_S) -> list[tuple[str, str]]:
    """What to delete, in order, as ("commands" | "acks", name): acks older than `max_age_s` or
    beyond the newest `keep` (never one younger than `grace_s`), each after its command (a command
    left without its ack would run again after an agent restart), and commands the agent already
    handled (sequence <= `handled_seq`) whose ack is gone. `acks` and `commands` map each znode name
    to its creation time; a pending command is never pruned, nor a name that is not a command's."""

    def seq(name: str) -> int | None:
        try:
            return command_seq(name)
        except CommandFormatError:
            return None

    numbered = sorted((s, name) for name in acks if (s := seq(name)) is not None)
    beyond = {name for _s, name in numbered[:max(len(numbered) - keep, 0)]}
    out: list[tuple[str, str]] = []
    for _s, name in numbered:
        age_s = now - acks[name]
        if age_s > max_age_s or (name in beyond and age_s > grace_s):
            if name in commands:
                out.append(("commands", name))
            out.append(("acks", name))
    for name, created in sorted(commands.items()):
        s = seq(name)
        if s is not None and s <= handled_seq and name not in acks and now - created > grace_s:
            out.append(("commands", name))
    return out


def prune_channel(zk_client: KazooClient, root: str, app: str, handled_seq: int, now: float | None = None) -> int:
    """Delete what `prune_plan` names under the app (its times from ZooKeeper's `ctime`); the number
    of znodes deleted. Called by the agent, which alone knows `handled_seq`."""
    now = time.time() if now is None else now
    created: dict[str, dict[str, float]] = {}
    for kind, parent in (("commands", commands_path(root, app)), ("acks", acks_path(root, app))):
        created[kind] = {}
        try:
            names = zk_client.get_children(parent)
        except NoNodeError:
            continue
        for name in names:
            stat = zk_client.exists(f"{parent}/{name}")
            if stat is not None:
                created[kind][name] = stat.ctime / 1000.0
    plan = prune_plan(created["acks"], created["commands"], handled_seq, now)
    deleted = 0
    for kind, name in plan:
        parent = commands_path(root, app) if kind == "commands" else acks_path(root, app)
        try:
            zk_client.delete(f"{parent}/{name}")
            deleted += 1
        except NoNodeError:
            pass
    if deleted:
        log.info("control.pruned", app=app, deleted=deleted,
                 acks_left=len(created["acks"]) - sum(kind == "acks" for kind, _ in plan))
    return deleted
