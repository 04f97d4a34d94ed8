"""What the loop reads and writes besides the cluster (Flink's `AutoScalerStateStore`): the action
log and the blocklist (Dhalion §4; daemon/action_log.py), each app's migration journal
(actuators/migration/journal.py), and what the agent and the migrations left about the app in
Redis. The daemon implements them over Redis and ZooKeeper (daemon/wiring.py).

A decision with actions is written before its actions start, and the write gives it its id; if
the write fails the cycle ends and nothing is done (no unrecorded action). A decision that starts
nothing (no change, or advice) is written off the cycle, after every decision written before it,
and its id comes when it is written (`DecisionLog.write_later`).

What is read every cycle costs the cycle no round trip of its own: the app's executor shape, its
queries' partition counts and its blocklist ride in the collect's last Redis round trip
(`AppRecords.ride`, monitors/collect_reads.py), read anew each cycle (an entry another daemon or
an operator writes shows in the next one), and again on their own in a cycle whose leader took in
an action, served a request or judged an outcome before planning (a migration's partitions, an
outcome's block show in that very cycle); the journal is kept while a ZooKeeper watch vouches for
it, and asked for again once it changed or the connection faltered.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from sparkscale.config import AppConfig, Config
from sparkscale.control.decision import Decision
from sparkscale.control.judge import PendingOutcome
from sparkscale.model.journal import Journal
from sparkscale.monitors.collect_reads import Ride
from sparkscale.policies.history import DecisionHistory
from sparkscale.policies.outcomes import Blocklist


@dataclass(frozen=True)
class Recalled:
    """An app's recent decisions as a new leader takes them up from the action log."""

    history: DecisionHistory  # past decisions and the scalability their judged outcomes showed
    last_action_at: float | None  # when the last action was done (None: none logged)
    pending: list[PendingOutcome] = field(default_factory=list)  # executed, not judged yet
    decisions: int = 0  # how many were read


class DecisionLog(Protocol):
    def write(self, decision: Decision) -> str:
        """Write the leader's decision (and, with actions, its snapshot) now, after every decision
        queued before it; its id in the log."""
        ...

    def write_later(self, decision: Decision, on_written: Callable[[str | None], None]) -> None:
        """Write the leader's decision that starts nothing off the cycle, in turn after those
        before it; `on_written` gets its id once written (None: the write failed, which is logged,
        counted and never raised here)."""
        ...

    def recall(self, app: AppConfig, now: float, since: float, evaluate_after_s: float) -> Recalled:
        """The app's decisions made since `since` (epoch s); the executed ones not judged yet come
        due `evaluate_after_s` after they were done (or after `now`, if not known)."""
        ...


class Journals(Protocol):
    """Each app's migration journal in ZooKeeper."""

    @property
    def connected(self) -> bool:
        """Whether journals can be read now."""
        ...

    def read(self, app: str) -> Journal | None:
        """The app's journal (None: none), never older than ZooKeeper's (it may be kept in memory
        while a watch says it has not changed)."""
        ...

    def follow_up(self, cfg: Config, epoch: int | None, journal: Journal | None) -> Journal | None:
        """`journal` with a done migration's pending follow-up recorded once final (daemon/followup.py)."""
        ...


@dataclass(frozen=True)
class AppReads:
    """What a cycle reads of the app in the collect's last Redis round trip (`AppRecords.ride`)."""

    app: AppConfig  # with the executor shape a migration gave it (what its executors really have)
    partitions: dict[str, int]  # each observed query's state partitions now
    blocklist: Blocklist  # the app's entries unexpired at the snapshots' time (the store's BlocklistStore)


class AppRecords(Protocol):
    """What the app's agent and its migrations published in Redis, and the app's blocklist."""

    def with_shape(self, app: AppConfig) -> AppConfig:
        """`app` with the executor shape a migration gave it, read on its own (a new leader's take-over
        and an absent app's requests come before, or without, the collect)."""
        ...

    def ride(self, app: AppConfig) -> Ride[AppReads]:
        """The app's shape, its observed queries' state partitions and its blocklist, read in the
        collect's last round trip (monitors/collect_reads.py)."""
        ...

    def read(self, app: AppConfig, queries: Sequence[str], now: float) -> AppReads:
        """The same, read on their own (a round trip) at `now`: again, once the leader settled what
        may have changed them (an action taken in, a request served, an outcome judged)."""
        ...


@dataclass(frozen=True)
class Stores:
    decisions: DecisionLog
    journals: Journals
    apps: AppRecords
