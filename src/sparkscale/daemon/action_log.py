"""The action log and the blocklist, in Redis (Dhalion §4).

Action log: one Redis stream, `<prefix>actions`, append-only, kept across restarts by Redis's
append-only file, trimmed by length and age (`action_log.*`). Entries, each `{kind, app, json}`:

- `decision`: what the leader decided in one cycle (snapshot id, policy, diagnosis, the guarded
  plan, the mode, the expected outcome). A decision that changes something is written *before*
  the actuator runs: if Redis cannot take it, the daemon does not act (no unrecorded action);
- `result`: what the actuator did for a decision (per action: done or failed, timings);
- `outcome`: the judgement of an executed decision, a few windows later (met or not, figures).

The entry id of a decision is its id; results and outcomes name it. `read` joins them.

Blocklist: a hash `<prefix>blocklist`, field `app|diagnosis|action_type`, value the entry as JSON;
expired entries are dropped when read.

The snapshot behind each logged decision is kept in `<prefix><app>:snapshots` (a short stream),
so `sparkscale actions --snapshot ID` can show what a decision saw.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

import redis

from sparkscale.actuators.base import ActionResult
from sparkscale.config import ActionLogConfig
from sparkscale.model.plan import Observation, Plan
from sparkscale.model.snapshot import Snapshot
from sparkscale.policies.history import PastDecision
from sparkscale.policies.outcomes import BlockedAction, Blocklist, Expectation
from sparkscale.protocol.keys import actions_key, blocklist_key, snapshots_key

Mode = Literal["acted", "dry_run", "no_change", "manual"]
Kind = Literal["decision", "result", "outcome"]





def snapshot_id(snapshot: Snapshot) -> str:
    """A stable name for a snapshot: app, query and the millisecond it was taken."""
    return f"{snapshot.app}/{snapshot.query}@{int(snapshot.taken_at * 1000)}"


@dataclass(frozen=True)
class DecisionRecord:
    app: str
    decided_at: float
    snapshot_id: str
    daemon: str
    epoch: int | None
    policy: str
    diagnosis: str | None
    plan: Plan
    mode: Mode
    expected: Expectation | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "app": self.app, "decided_at": self.decided_at, "snapshot_id": self.snapshot_id, "daemon": self.daemon,
            "epoch": self.epoch, "policy": self.policy, "diagnosis": self.diagnosis, "plan": self.plan.to_dict(),
            "observation": self.plan.observation.to_dict(),
            "mode": self.mode, "expected": self.expected.to_dict() if self.expected else None,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DecisionRecord:
        return cls(
            app=data["app"], decided_at=float(data["decided_at"]), snapshot_id=data.get("snapshot_id", ""),
            daemon=data.get("daemon", ""), epoch=data.get("epoch"), policy=data["policy"],
            diagnosis=data.get("diagnosis"),
            plan=Plan.from_dict(data["plan"], Observation.from_dict(data.get("observation"))), mode=data["mode"],
            expected=Expectation.from_dict(data["expected"]) if data.get("expected") else None,
        )


@dataclass(frozen=True)
class OutcomeRecord:
    decision_id: str
    app: str
    evaluated_at: float
    met: bool
    metric: str
    before: float
    expected: float
    observed: float | None
    detail: str
    blocked_until: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> OutcomeRecord:
        return cls(**{k: data.get(k) for k in cls.__dataclass_fields__})


@dataclass(frozen=True)
class LoggedDecision:
    """A decision with what became of it (results and outcome are None until written)."""

    id: str
    decision: DecisionRecord
    results: tuple[ActionResult, ...] | None = None
    outcome: OutcomeRecord | None = None
    done_at: float | None = None

    @property
    def failed(self) -> bool:
        return bool(self.results) and any(r.status == "failed" for r in self.results or ())

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, **self.decision.to_dict(),
                "results": [r.to_dict() for r in self.results] if self.results is not None else None,
                "done_at": self.done_at,
                "outcome": self.outcome.to_dict() if self.outcome else None}


def executed(logged: Iterable[LoggedDecision]) -> list[LoggedDecision]:
    """The decisions with at least one action done, in log order (the last is the last action)."""
    return [d for d in logged if d.results and any(r.status == "done" for r in d.results)]


def past_decisions(logged: Iterable[LoggedDecision]) -> tuple[PastDecision, ...]:
    """Logged decisions as the planner's decision history (with their observations), oldest first."""
    ordered = sorted(logged, key=lambda d: d.decision.decided_at)
    return tuple(PastDecision(d.decision.decided_at, d.decision.plan) for d in ordered)


@dataclass
class ActionLog:
    """Needs a client with decode_responses=True (`redisconn.connect`)."""

    client: redis.Redis
    prefix: str
    cfg: ActionLogConfig = field(default_factory=ActionLogConfig)

    @property
    def key(self) -> str:
        return actions_key(self.prefix)

    def _append(self, kind: Kind, app: str, body: dict[str, Any]) -> str:
        entry_id = self.client.xadd(self.key, {"kind": kind, "app": app, "json": json.dumps(body, default=str)},
                                    maxlen=self.cfg.max_entries, approximate=True)
        oldest_ms = int((time.time() - self.cfg.max_age_days * 86400) * 1000)
        self.client.xtrim(self.key, minid=f"{max(oldest_ms, 0)}-0", approximate=True)
        return entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)

    def append_decision(self, record: DecisionRecord, snapshot: Snapshot | None = None) -> str:
        if snapshot is not None and self.cfg.snapshots_kept > 0:
            self.client.xadd(snapshots_key(self.prefix, record.app),
                             {"id": record.snapshot_id, "json": snapshot.to_json()},
                             maxlen=self.cfg.snapshots_kept, approximate=False)
        return self._append("decision", record.app, record.to_dict())

    def append_results(self, decision_id: str, app: str, results: Iterable[ActionResult]) -> str:
        return self._append("result", app, {"decision_id": decision_id, "done_at": time.time(),
                                            "results": [r.to_dict() for r in results]})

    def append_outcome(self, record: OutcomeRecord) -> str:
        return self._append("outcome", record.app, record.to_dict())

    def read(self, app: str | None = None, since: float | None = None) -> list[LoggedDecision]:
        """Decisions (of `app`, made at or after `since`), oldest first, joined with their results
        and outcomes."""
        start = f"{int(since * 1000)}-0" if since is not None else "-"
        decisions: dict[str, LoggedDecision] = {}
        for raw_id, fields in self.client.xrange(self.key, min=start, max="+"):
            entry_id, kind = _text(raw_id), fields.get("kind")
            if app is not None and fields.get("app") != app:
                continue
            body = json.loads(fields["json"])
            if kind == "decision":
                decisions[entry_id] = LoggedDecision(entry_id, DecisionRecord.from_dict(body))
            elif kind == "result" and body.get("decision_id") in decisions:
                d = decisions[body["decision_id"]]
                decisions[d.id] = LoggedDecision(d.id, d.decision, tuple(ActionResult.from_dict(r)
                                                                          for r in body["results"]),
                                                 d.outcome, body.get("done_at"))
            elif kind == "outcome" and body.get("decision_id") in decisions:
                d = decisions[body["decision_id"]]
                decisions[d.id] = LoggedDecision(d.id, d.decision, d.results, OutcomeRecord.from_dict(body), d.done_at)
        return list(decisions.values())

    def snapshot(self, app: str, wanted_id: str) -> str | None:
        """The JSON of a logged decision's snapshot, if it is still kept."""
        for _entry_id, fields in self.client.xrevrange(snapshots_key(self.prefix, app)):
            if fields.get("id") == wanted_id:
                return fields.get("json")
        return None


@dataclass(frozen=True)
class BlocklistEntry:
    blocked: BlockedAction
    blocked_at: float
    decision_id: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"app": self.blocked.app, "diagnosis": self.blocked.diagnosis, "action_type": self.blocked.action_type,
                "until": self.blocked.until, "policy": self.blocked.policy, "blocked_at": self.blocked_at,
                "decision_id": self.decision_id,
                "reason": self.reason}


@dataclass
class BlocklistStore:
    client: redis.Redis
    prefix: str

    @property
    def key(self) -> str:
        return blocklist_key(self.prefix)

    def block(self, entry: BlocklistEntry) -> None:
        field_name = f"{entry.blocked.app}|{entry.blocked.diagnosis}|{entry.blocked.action_type}"
        self.client.hset(self.key, field_name, json.dumps(entry.to_dict()))

    def entries(self, now: float, app: str | None = None) -> list[BlocklistEntry]:
        """Unexpired entries (expired ones are deleted on the way)."""
        out: list[BlocklistEntry] = []
        expired: list[str] = []
        for raw_field, raw_value in self.client.hgetall(self.key).items():
            data = json.loads(_text(raw_value))
            entry = BlocklistEntry(BlockedAction(data["app"], data["diagnosis"], data["action_type"],
                                                 float(data["until"]), data.get("policy")),
                                   float(data["blocked_at"]), data.get("decision_id", ""), data.get("reason", ""))
            if entry.blocked.until <= now:
                expired.append(_text(raw_field))
            elif app is None or entry.blocked.app == app:
                out.append(entry)
        if expired:
            self.client.hdel(self.key, *expired)
        return sorted(out, key=lambda e: e.blocked_at)

    def blocklist(self, now: float, app: str | None = None) -> Blocklist:
        return Blocklist(tuple(e.blocked for e in self.entries(now, app)))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
