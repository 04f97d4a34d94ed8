"""The action log and the blocklist in Redis (Dhalion §4; the records: store/action_records.py).

Action log: one stream, `<prefix>actions`, entries `{kind, app, json}`, trimmed by length and age
(`action_log.*`); the snapshot behind each logged decision in `<prefix><app>:snapshots` (a short
stream). An append is one round trip (its snapshot, the entry and the trim, pipelined; a reply in
error raises once all are read). Blocklist: a hash `<prefix>blocklist`, field
`app|diagnosis|action_type`, value the entry as JSON; expired entries are dropped when read (also
from a hash read in another pipeline: `blocklist_from`). An entry that does not parse is skipped and
logged once (store/bad_records.py).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, cast

import redis

from sparkscale.config import ActionLogConfig
from sparkscale.model.action_result import ActionResult
from sparkscale.model.snapshot import Snapshot
from sparkscale.policies.outcomes import Blocklist
from sparkscale.protocol.keys import actions_key, blocklist_key, snapshots_key
from sparkscale.store.action_records import (
    BLOCKLIST_ENTRY_JSON,
    BlocklistEntry,
    DecisionRecord,
    Entry,
    Kind,
    LoggedDecision,
    OutcomeRecord,
    ResultsEntry,
    blocklist_field,
    join,
    parse_entry,
)
from sparkscale.store.bad_records import PROBLEMS, BadRecords, load_json

Rows = list[tuple[str, dict[str, str]]]  # a stream's entries, from a client with decode_responses=True
Hash = dict[str, str]


@dataclass
class RedisActionLog:
    """Needs a client with decode_responses=True (`redisconn.connect`)."""

    client: redis.Redis
    prefix: str
    cfg: ActionLogConfig = field(default_factory=ActionLogConfig)
    bad: BadRecords = field(default_factory=BadRecords)

    @property
    def key(self) -> str:
        return actions_key(self.prefix)

    def _append(self, kind: Kind, app: str, body: dict[str, Any],
                before: Callable[[redis.client.Pipeline], object] | None = None) -> str:
        """Append the entry, trim the log by age, and run `before` ahead of both: one round trip."""
        pipe = self.client.pipeline(transaction=False)
        if before is not None:
            before(pipe)
        pipe.xadd(self.key, {"kind": kind, "app": app, "json": json.dumps(body, default=str)},
                  maxlen=self.cfg.max_entries, approximate=True)
        oldest_ms = int((time.time() - self.cfg.max_age_days * 86400) * 1000)
        pipe.xtrim(self.key, minid=f"{max(oldest_ms, 0)}-0", approximate=True)
        return text(pipe.execute()[-2])

    def append_decision(self, record: DecisionRecord, snapshot: Snapshot | None = None) -> str:
        if snapshot is None or self.cfg.snapshots_kept <= 0:
            return self._append("decision", record.app, record.to_dict())
        return self._append("decision", record.app, record.to_dict(), lambda pipe: pipe.xadd(
            snapshots_key(self.prefix, record.app), {"id": record.snapshot_id, "json": snapshot.to_json()},
            maxlen=self.cfg.snapshots_kept, approximate=False))

    def append_results(self, decision_id: str, app: str, results: Iterable[ActionResult]) -> str:
        return self._append("result", app, ResultsEntry(decision_id, time.time(), tuple(results)).to_dict())

    def append_outcome(self, record: OutcomeRecord) -> str:
        return self._append("outcome", record.app, record.to_dict())

    def decision(self, decision_id: str) -> LoggedDecision | None:
        """Read from the decision's app and time on (its id is `<ms>-<seq>`, daemon/explain.py)."""
        entries = cast(Rows, self.client.xrange(self.key, min=decision_id, max=decision_id))
        if not entries or entries[0][1].get("kind") != "decision":
            return None
        since_s = int(decision_id.partition("-")[0]) / 1000
        return next((d for d in self.read(entries[0][1].get("app"), since_s) if d.id == decision_id), None)

    def read(self, app: str | None = None, since: float | None = None) -> list[LoggedDecision]:
        start = f"{int(since * 1000)}-0" if since is not None else "-"
        entries: list[tuple[str, Entry]] = []
        for raw_id, fields in cast(Rows, self.client.xrange(self.key, min=start, max="+")):
            entry_id = text(raw_id)
            if app is not None and fields.get("app") != app:
                continue
            try:
                entry = parse_entry(fields.get("kind"), load_json(fields["json"]))
            except PROBLEMS as exc:
                self.bad.skip(self.key, entry_id, exc)
                continue
            if entry is not None:
                entries.append((entry_id, entry))
        return join(entries)

    def snapshot(self, app: str, wanted_id: str) -> str | None:
        for _entry_id, fields in cast(Rows, self.client.xrevrange(snapshots_key(self.prefix, app))):
            if fields.get("id") == wanted_id:
                value = fields.get("json")
                return None if value is None else text(value)
        return None


@dataclass
class RedisBlocklist:
    client: redis.Redis
    prefix: str
    bad: BadRecords = field(default_factory=BadRecords)

    @property
    def key(self) -> str:
        return blocklist_key(self.prefix)

    def block(self, entry: BlocklistEntry) -> None:
        self.client.hset(self.key, blocklist_field(entry.blocked), json.dumps(entry.to_dict()))

    def entries(self, now: float, app: str | None = None) -> list[BlocklistEntry]:
        return self._entries(cast(Hash, self.client.hgetall(self.key)), now, app)

    def blocklist(self, now: float, app: str | None = None) -> Blocklist:
        return self.blocklist_from(cast(Hash, self.client.hgetall(self.key)), now, app)

    def blocklist_from(self, raw: Hash, now: float, app: str | None = None) -> Blocklist:
        """The blocklist from the hash as HGETALL of `key` answered (in a caller's pipeline)."""
        return Blocklist(tuple(e.blocked for e in self._entries(raw, now, app)))

    def _entries(self, raw: Hash, now: float, app: str | None) -> list[BlocklistEntry]:
        out: list[BlocklistEntry] = []
        expired: list[str] = []
        for raw_field, raw_value in raw.items():
            try:
                entry = BLOCKLIST_ENTRY_JSON.load(load_json(raw_value))
            except PROBLEMS as exc:
                self.bad.skip(self.key, text(raw_field), exc)
                continue
            if entry.blocked.until <= now:
                expired.append(text(raw_field))
            elif app is None or entry.blocked.app == app:
                out.append(entry)
        if expired:
            self.client.hdel(self.key, *expired)
        return sorted(out, key=lambda e: e.blocked_at)


def text(value: object) -> str:
    """A Redis reply as text (bytes from a client without decode_responses)."""
    return value.decode() if isinstance(value, bytes) else str(value)
