"""The store seam: one Protocol per kind of state the daemon, the control loop, the client API and
the CLI keep in Redis or ZooKeeper, and `Store`, the aggregate they receive (Flink's
`AutoScalerStateStore` plays this part for its autoscaler).

Implementations: store/redis_*.py and store/zk_*.py (built together by store/live.py), and
store/memory.py for tests. Every read returns typed records (model/codec.py); a record that does not
parse is skipped and logged once (store/bad_records.py), never raised. Connection errors do
propagate: the control loop backs off on them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from sparkscale.model.action_result import ActionResult
from sparkscale.model.app_status import AppStatus
from sparkscale.model.executor_shape import ExecutorShape
from sparkscale.model.journal import Journal
from sparkscale.model.manual_request import ManualRequest, ManualResult
from sparkscale.model.snapshot import Snapshot
from sparkscale.policies.outcomes import Blocklist
from sparkscale.protocol.fencing import LiveLock
from sparkscale.protocol.queries import QueryInfo
from sparkscale.store.action_records import BlocklistEntry, DecisionRecord, LoggedDecision, OutcomeRecord


class ActionLogStore(Protocol):
    """The action log (Dhalion §4): decisions, their results and outcomes, and their snapshots."""

    def append_decision(self, record: DecisionRecord, snapshot: Snapshot | None = None) -> str:
        """Log a decision (and the snapshot it saw); its id."""
        ...

    def append_results(self, decision_id: str, app: str, results: Iterable[ActionResult]) -> str:
        ...

    def append_outcome(self, record: OutcomeRecord) -> str:
        ...

    def read(self, app: str | None = None, since: float | None = None) -> list[LoggedDecision]:
        """Decisions (of `app`, made at or after `since`, epoch s), oldest first, joined."""
        ...

    def decision(self, decision_id: str) -> LoggedDecision | None:
        """The decision logged under `decision_id`, joined (None: never logged, or trimmed since)."""
        ...

    def snapshot(self, app: str, wanted_id: str) -> str | None:
        """The JSON of a logged decision's snapshot, if it is still kept."""
        ...


class BlocklistStore(Protocol):
    """Blocked (app, diagnosis, action type) pairs until a time (Dhalion §4)."""

    def block(self, entry: BlocklistEntry) -> None:
        ...

    def entries(self, now: float, app: str | None = None) -> list[BlocklistEntry]:
        """Unexpired entries, oldest first (expired ones are dropped on the way)."""
        ...

    def blocklist(self, now: float, app: str | None = None) -> Blocklist:
        ...


class JournalStore(Protocol):
    """One app's migration journal, written by compare-and-set on the version last read or written
    and, with `epoch`, only while the writer still leads at that epoch (`WriteFenced` otherwise)."""

    app: str
    epoch: int | None

    def read(self) -> Journal | None:
        """The journal (None: none, or one that does not parse, logged)."""
        ...

    def write(self, journal: Journal) -> None:
        ...


class JournalStores(Protocol):
    """Each app's journal."""

    @property
    def connected(self) -> bool:
        """Whether journals can be read now."""
        ...

    def journal(self, app: str, epoch: int | None = None) -> JournalStore:
        """The app's journal, for a writer leading at `epoch` (None: not fenced by a lock)."""
        ...

    def watched(self, app: str) -> Journal | None:
        """The app's journal as `journal(app).read()` gives it, for a reader that asks every cycle:
        kept from the last read while a watch vouches for it (store/zk_watch.py), never older."""
        ...


class ShapeStore(Protocol):
    """The executor shape a migration gave each app (it outlives the config's)."""

    def stored_shape(self, app: str) -> ExecutorShape | None:
        ...

    def store_shape(self, app: str, shape: ExecutorShape, migration: str) -> None:
        ...


class QueryRegistry(Protocol):
    """The queries each app's agent published."""

    def read_queries(self, app: str) -> dict[str, QueryInfo]:
        """The app's queries by name (empty before the agent ran)."""
        ...


class LeaderStore(Protocol):
    """Who leads each app and at which epoch (protocol/fencing.py), read-only."""

    def current_leader(self, app: str) -> str | None:
        ...

    def live_lock(self, app: str) -> LiveLock | None:
        """The holder's lock znode now (None: nobody leads)."""
        ...


class DowntimeStore(Protocol):
    """Measured downtime samples per kind of action (daemon/downtime_tracker.py)."""

    def add(self, kind: str, stall_s: float, state_bytes: float, app: str) -> None:
        ...

    def load(self) -> dict[str, list[tuple[float, float]]]:
        """Per kind, (stall_s, state_bytes) samples, oldest first."""
        ...


class RequestStore(Protocol):
    """The operator's requests to an app's leader and its answers (daemon/manual.py)."""

    def submit(self, app: str, request: ManualRequest) -> str:
        """Leave a request for the leader; its name (what `wait_result` and `answer` take)."""
        ...

    def wait_result(self, app: str, name: str, timeout_s: float) -> ManualResult | None:
        """The leader's answer, or None after `timeout_s` (the request then withdrawn if pending)."""
        ...

    def pending(self, app: str) -> list[ManualRequest]:
        """Unanswered requests, oldest first (a malformed one answered "not a valid request")."""
        ...

    def answer(self, app: str, name: str, result: ManualResult) -> None:
        ...

    def watch(self, app: str, on_request: Callable[[], object]) -> None:
        """Call `on_request()` whenever a request arrives, for the process's life."""
        ...


class StatusStore(Protocol):
    """Each daemon's last view of each app, for `sparkscale status` (daemon/status.py)."""

    def publish(self, app: str, status: AppStatus) -> None:
        ...

    def read(self, app: str) -> list[AppStatus]:
        """Every daemon's view of `app`, freshest first."""
        ...


@dataclass(frozen=True)
class Store:
    """All the state, over one Redis and one ZooKeeper (or in memory)."""

    actions: ActionLogStore
    blocklist: BlocklistStore
    journals: JournalStores
    shapes: ShapeStore
    queries: QueryRegistry
    leaders: LeaderStore
    downtime: DowntimeStore
    requests: RequestStore
    status: StatusStore
