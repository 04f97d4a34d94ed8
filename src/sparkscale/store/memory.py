"""Every store protocol (store/base.py) in memory, with the Redis and ZooKeeper semantics tests rely
on: the action log's ids `<ms>-<seq>`, order, trimming by length and age, and join; the blocklist's
expiry; the journal's compare-and-set on its version and fencing by the leader's epoch."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from sparkscale.config import ActionLogConfig
from sparkscale.model.action_result import ActionResult
from sparkscale.model.app_status import AppStatus
from sparkscale.model.executor_shape import ExecutorShape
from sparkscale.model.journal import Journal
from sparkscale.model.manual_request import ManualRequest, ManualResult
from sparkscale.model.snapshot import Snapshot
from sparkscale.policies.outcomes import Blocklist
from sparkscale.protocol.fencing import LiveLock
from sparkscale.protocol.queries import QueryInfo
from sparkscale.store.action_records import (
    BlocklistEntry,
    DecisionRecord,
    Entry,
    LoggedDecision,
    OutcomeRecord,
    ResultsEntry,
    blocklist_field,
    join,
)
from sparkscale.store.base import Store
from sparkscale.store.zk_journal import ABSENT, WriteFenced
from sparkscale.store.zk_requests import REQUEST_PREFIX


def _ms(entry_id: str) -> int:
    return int(entry_id.partition("-")[0])


@dataclass
class MemoryActionLog:
    cfg: ActionLogConfig = field(default_factory=ActionLogConfig)
    clock: Callable[[], float] = time.time
    entries: list[tuple[str, str, Entry]] = field(default_factory=list)  # (id, app, entry), in order
    snapshots: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # app -> [(id, JSON)]
    _last: tuple[int, int] = (0, 0)

    def _append(self, app: str, entry: Entry) -> str:
        now_ms = int(self.clock() * 1000)
        ms, seq = self._last
        self._last = (now_ms, 0) if now_ms > ms else (ms, seq + 1)
        entry_id = f"{self._last[0]}-{self._last[1]}"
        self.entries.append((entry_id, app, entry))
        oldest_ms = int((self.clock() - self.cfg.max_age_days * 86400) * 1000)
        self.entries = [e for e in self.entries[-self.cfg.max_entries:] if _ms(e[0]) >= oldest_ms]
        return entry_id

    def append_decision(self, record: DecisionRecord, snapshot: Snapshot | None = None) -> str:
        if snapshot is not None and self.cfg.snapshots_kept > 0:
            kept = self.snapshots.setdefault(record.app, [])
            kept.append((record.snapshot_id, snapshot.to_json()))
            del kept[:-self.cfg.snapshots_kept]
        return self._append(record.app, record)

    def append_results(self, decision_id: str, app: str, results: Iterable[ActionResult]) -> str:
        return self._append(app, ResultsEntry(decision_id, self.clock(), tuple(results)))

    def append_outcome(self, record: OutcomeRecord) -> str:
        return self._append(record.app, record)

    def read(self, app: str | None = None, since: float | None = None) -> list[LoggedDecision]:
        since_ms = int(since * 1000) if since is not None else None
        return join((i, e) for i, a, e in self.entries
                    if (app is None or a == app) and (since_ms is None or _ms(i) >= since_ms))

    def decision(self, decision_id: str) -> LoggedDecision | None:
        return next((d for d in self.read() if d.id == decision_id), None)

    def snapshot(self, app: str, wanted_id: str) -> str | None:
        return next((data for i, data in reversed(self.snapshots.get(app, [])) if i == wanted_id), None)


@dataclass
class MemoryBlocklist:
    blocked: dict[str, BlocklistEntry] = field(default_factory=dict)

    def block(self, entry: BlocklistEntry) -> None:
        self.blocked[blocklist_field(entry.blocked)] = entry

    def entries(self, now: float, app: str | None = None) -> list[BlocklistEntry]:
        for name in [n for n, e in self.blocked.items() if e.blocked.until <= now]:
            del self.blocked[name]
        return sorted((e for e in self.blocked.values() if app is None or e.blocked.app == app),
                      key=lambda e: e.blocked_at)

    def blocklist(self, now: float, app: str | None = None) -> Blocklist:
        return Blocklist(tuple(e.blocked for e in self.entries(now, app)))


@dataclass
class MemoryLeaders:
    """Who leads each app at which epoch; set by tests (`lead`)."""

    held: dict[str, tuple[str, int]] = field(default_factory=dict)  # app -> (identity, epoch)

    def lead(self, app: str, identity: str, epoch: int) -> None:
        self.held[app] = (identity, epoch)

    def current_leader(self, app: str) -> str | None:
        return self.held[app][0] if app in self.held else None

    def live_lock(self, app: str) -> LiveLock | None:
        if app not in self.held:
            return None
        epoch = self.held[app][1]
        return LiveLock(f"/memory/{app}/__lock__{epoch:010d}", epoch, 0, 0)


@dataclass
class MemoryJournal:
    journals: MemoryJournals
    app: str
    epoch: int | None = None
    version: int | None = None

    def read(self) -> Journal | None:
        journal, self.version = self.journals.kept.get(self.app, (None, ABSENT))
        return journal

    def write(self, journal: Journal) -> None:
        _kept, version = self.journals.kept.get(self.app, (None, ABSENT))
        if self.epoch is not None:
            live = self.journals.leaders.live_lock(self.app)
            if live is None or live.epoch != self.epoch:
                raise WriteFenced(f"the writer's lock znode of epoch {self.epoch} is gone: no longer the leader")
        if self.version is None:
            self.version = version
        if self.version != version:
            raise WriteFenced(f"the journal changed since version {self.version} (another leader wrote it)")
        self.version = version + 1
        self.journals.kept[self.app] = (Journal.from_json(journal.to_json()), self.version)


@dataclass
class MemoryJournals:
    leaders: MemoryLeaders = field(default_factory=MemoryLeaders)
    kept: dict[str, tuple[Journal | None, int]] = field(default_factory=dict)  # app -> (journal, version)
    connected: bool = True

    def journal(self, app: str, epoch: int | None = None) -> MemoryJournal:
        return MemoryJournal(self, app, epoch)

    def watched(self, app: str) -> Journal | None:
        """The journal as it is now: reading memory costs nothing, so nothing is kept."""
        return self.kept.get(app, (None, ABSENT))[0]


@dataclass
class MemoryShapes:
    shapes: dict[str, tuple[ExecutorShape, str]] = field(default_factory=dict)  # app -> (shape, migration)

    def stored_shape(self, app: str) -> ExecutorShape | None:
        return self.shapes[app][0] if app in self.shapes else None

    def store_shape(self, app: str, shape: ExecutorShape, migration: str) -> None:
        self.shapes[app] = (shape, migration)


@dataclass
class MemoryQueries:
    published: dict[str, dict[str, QueryInfo]] = field(default_factory=dict)

    def read_queries(self, app: str) -> dict[str, QueryInfo]:
        return dict(self.published.get(app, {}))


@dataclass
class MemoryDowntime:
    keep: int = 20  # per kind, as daemon/downtime_tracker.py's KEEP
    samples: dict[str, list[tuple[float, float]]] = field(default_factory=dict)

    def add(self, kind: str, stall_s: float, state_bytes: float, app: str) -> None:
        kept = self.samples.setdefault(kind, [])
        kept.append((stall_s, state_bytes))
        del kept[:-self.keep]

    def load(self) -> dict[str, list[tuple[float, float]]]:
        return {kind: list(values) for kind, values in self.samples.items() if values}


@dataclass
class MemoryRequests:
    """Requests and answers by app and name; `wait_result` does not wait (an answer is there or not)."""

    requests: dict[str, dict[str, ManualRequest]] = field(default_factory=dict)
    results: dict[str, dict[str, ManualResult]] = field(default_factory=dict)
    watchers: dict[str, list[Callable[[], object]]] = field(default_factory=dict)
    _seq: int = 0

    def submit(self, app: str, request: ManualRequest) -> str:
        name = f"{REQUEST_PREFIX}{self._seq:010d}"
        self._seq += 1
        self.requests.setdefault(app, {})[name] = replace(request, name=name)
        for on_request in self.watchers.get(app, []):
            on_request()
        return name

    def wait_result(self, app: str, name: str, timeout_s: float) -> ManualResult | None:
        result = self.results.get(app, {}).get(name)
        if result is None:
            self.requests.get(app, {}).pop(name, None)
        return result

    def pending(self, app: str) -> list[ManualRequest]:
        return [request for _name, request in sorted(self.requests.get(app, {}).items())]

    def answer(self, app: str, name: str, result: ManualResult) -> None:
        self.results.setdefault(app, {}).setdefault(name, result)
        self.requests.get(app, {}).pop(name, None)

    def watch(self, app: str, on_request: Callable[[], object]) -> None:
        self.watchers.setdefault(app, []).append(on_request)


@dataclass
class MemoryStatus:
    views: dict[str, dict[str, AppStatus]] = field(default_factory=dict)  # app -> daemon -> its view

    def publish(self, app: str, status: AppStatus) -> None:
        self.views.setdefault(app, {})[status.daemon] = status

    def read(self, app: str) -> list[AppStatus]:
        return sorted(self.views.get(app, {}).values(), key=lambda s: s.cycle_at, reverse=True)


def memory_store(cfg: ActionLogConfig | None = None, clock: Callable[[], float] = time.time) -> Store:
    """A fresh in-memory store; its leaders are the journals' (a journal write is fenced by them)."""
    leaders = MemoryLeaders()
    return Store(actions=MemoryActionLog(cfg or ActionLogConfig(), clock), blocklist=MemoryBlocklist(),
                 journals=MemoryJournals(leaders), shapes=MemoryShapes(), queries=MemoryQueries(), leaders=leaders,
                 downtime=MemoryDowntime(), requests=MemoryRequests(), status=MemoryStatus())
