"""What the loop asks of an app's leader lock (daemon/leader.py's `LeaderElection`): only the
lock's holder acts, writes commands and writes the action log; a standby decides and logs."""

from __future__ import annotations

from typing import Protocol


class Leadership(Protocol):
    @property
    def epoch(self) -> int | None:
        """The held lock's sequence number, which fences every command (None: not held)."""
        ...

    @property
    def is_leader(self) -> bool:
        """Held, and the ZooKeeper connection is up right now."""
        ...

    def try_acquire(self) -> bool:
        """Lead if nobody does (never blocks); True when this process leads."""
        ...
