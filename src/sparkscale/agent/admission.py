"""Whether the agent runs a command: still wanted (not expired), and from the app's live leader.

The leader is read from ZooKeeper when the command is handled (protocol.fencing): its epoch must be
the live lock holder's and its znode must have been written by the holder's session. The stored
epoch (`agent_epoch`) only ever takes an epoch verified so, so a forged command cannot raise it and
fence the real leader out; an epoch below it stays refused, also after an agent restart.
"""

from __future__ import annotations

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from sparkscale.protocol.commands import Command
from sparkscale.protocol.fencing import read_live_lock, refusal
from sparkscale.protocol.znodes import agent_epoch_path


class CommandGate:
    """The agent's admission check for one app, and the highest leader epoch it verified."""

    def __init__(self, zk: KazooClient, root: str, app: str):
        self.zk = zk
        self.root = root
        self.app = app
        self.path = agent_epoch_path(root, app)
        self.highest_epoch = 0
        self._stored = False  # whether `agent_epoch` exists (the first verified epoch may be 0)

    def load(self) -> int:
        """Read the highest epoch an earlier agent verified (0 when none did)."""
        try:
            data, _stat = self.zk.get(self.path)
        except NoNodeError:
            self.highest_epoch, self._stored = 0, False
            return 0
        self.highest_epoch, self._stored = int(data.decode() or 0), True
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
