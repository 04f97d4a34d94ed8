"""Whether the agent runs a command: still wanted (not expired), and from the app's live leader.

The leader is read from ZooKeeper when the command is handled (protocol.fencing): its epoch must be
the live lock holder's and its znode must have been written by the holder's session. The stored
epoch (`agent_epoch`) only ever takes an epoch verified so, so a forged command cannot raise it and
fence the real leader out; an epoch below it stays refused, also after an agent restart. A stored
epoch that does not parse is read as none (logged once): the live lock still fences every command.
"""

from __future__ import annotations

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from sparkscale.protocol.commands import Command
from sparkscale.protocol.fencing import read_live_lock, refusal
from sparkscale.protocol.znodes import agent_epoch_path
from sparkscale.store.bad_records import BadRecords, escaped

MAX_EPOCH_DIGITS = 19  # a lock's sequence is a 10-digit int; 19 digits still fit a signed 64-bit int


def parse_epoch(data: bytes) -> int | None:
    """A stored `agent_epoch` (decimal digits; empty: 0, as an early agent wrote it), or None for
    anything else: garbage there must not keep the agent from starting (issue 32)."""
    text = data.decode("ascii", "replace").strip()
    if not text:
        return 0
    if not (text.isascii() and text.isdigit() and len(text) <= MAX_EPOCH_DIGITS):
        return None
    return int(text)


class CommandGate:
    """The agent's admission check for one app, and the highest leader epoch it verified."""

    def __init__(self, zk: KazooClient, root: str, app: str):
        self.zk = zk
        self.root = root
        self.app = app
        self.path = agent_epoch_path(root, app)
        self.highest_epoch = 0
        self._stored = False  # whether `agent_epoch` holds an epoch (the first verified epoch may be 0)
        self.bad = BadRecords()

    def load(self) -> int:
        """Read the highest epoch an earlier agent verified (0 when none did)."""
        try:
            data, _stat = self.zk.get(self.path)
        except NoNodeError:
            self.highest_epoch, self._stored = 0, False
            return 0
        epoch = parse_epoch(data)
        if epoch is None:  # read as absent: the next verified epoch replaces it
            self.bad.skip(self.path, "agent_epoch", f"not an epoch: {escaped(data)!r}")
            self.highest_epoch, self._stored = 0, False
            return 0
        self.highest_epoch, self._stored = epoch, True
        return self.highest_epoch

    @staticmethod
    def expired(command: Command, now: float) -> str | None:
        """Why a command is stale (nobody waits for its ack any more), or None."""
        overdue = command.overdue_s(now)
        return None if overdue is None else f"expired {overdue:.1f} s ago: not run"

    def fenced(self, command: Command, sender: int) -> str | None:
        """Why `command` (its znode created by session `sender`) is not the live leader's, or None;
        a verified epoch above the stored one is stored before the command runs."""
        live = None if command.epoch < self.highest_epoch else read_live_lock(self.zk, self.root, self.app)
        reason = refusal(command.epoch, self.highest_epoch, live, sender)
        if reason is None and (command.epoch > self.highest_epoch or not self._stored):
            self._store(command.epoch)
        return reason

    def _store(self, epoch: int) -> None:
        data = str(epoch).encode()
        try:
            self.zk.set(self.path, data)
        except NoNodeError:
            try:
                self.zk.create(self.path, data, makepath=True)
            except NodeExistsError:
                self.zk.set(self.path, data)
        self.highest_epoch, self._stored = epoch, True
