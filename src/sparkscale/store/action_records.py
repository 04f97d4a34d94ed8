"""The records of the action log and the blocklist (Dhalion §4); stored by store/redis_action_log.py.

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

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import GetCoreSchemaHandler, JsonValue
from pydantic_core import CoreSchema

from sparkscale.model.action_result import ActionResult
from sparkscale.model.codec import Codec, json_form, one_of, ordered, reshaped, without_nulls
from sparkscale.model.fields import object_at
from sparkscale.model.plan import Observation, Plan
from sparkscale.model.snapshot import Snapshot
from sparkscale.policies.history import PastDecision
from sparkscale.policies.outcomes import BlockedAction, Expectation


class DecisionMode(StrEnum):
    """What became of a logged decision: carried out, only logged (`loop.dry_run`), nothing to do,
    or an operator's (`daemon/manual.py`)."""

    ACTED = "acted"
    DRY_RUN = "dry_run"
    NO_CHANGE = "no_change"
    MANUAL = "manual"


Mode = Annotated[DecisionMode, one_of(DecisionMode)]  # read as the enum, written as the string it is
Kind = Literal["decision", "result", "outcome"]


def snapshot_id(snapshot: Snapshot) -> str:
    """A stable name for a snapshot: app, query and the millisecond it was taken."""
    return f"{snapshot.app}/{snapshot.query}@{int(snapshot.taken_at * 1000)}"


@dataclass(frozen=True)
class DecisionRecord:
    """One logged decision. Written with the plan's observation beside the plan
    (`_DecisionJSON`)."""

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

    @classmethod
    def __get_pydantic_core_schema__(cls, source: object, handler: GetCoreSchemaHandler) -> CoreSchema:
        return json_form(handler, _DecisionJSON, _DecisionJSON.record, _DecisionJSON.of)

    def to_dict(self) -> dict[str, JsonValue]:
        return DECISION_JSON.dump_object(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DecisionRecord:
        return DECISION_JSON.load(data)


@dataclass(frozen=True, kw_only=True)
class _DecisionJSON:
    """A DecisionRecord as it is written; what a record from an older daemon may lack defaults."""

    app: str
    decided_at: float
    snapshot_id: str = ""
    daemon: str = ""
    epoch: int | None = None
    policy: str
    diagnosis: str | None = None
    plan: Plan
    observation: Observation = field(default_factory=Observation)
    mode: Mode
    expected: Expectation | None = None

    @classmethod
    def __get_pydantic_core_schema__(cls, source: object, handler: GetCoreSchemaHandler) -> CoreSchema:
        return reshaped(handler, source, _no_null_observation)

    def record(self) -> DecisionRecord:
        return DecisionRecord(self.app, self.decided_at, self.snapshot_id, self.daemon, self.epoch, self.policy,
                              self.diagnosis, replace(self.plan, observation=self.observation), self.mode,
                              self.expected)

    @classmethod
    def of(cls, r: DecisionRecord) -> _DecisionJSON:
        return cls(app=r.app, decided_at=r.decided_at, snapshot_id=r.snapshot_id, daemon=r.daemon, epoch=r.epoch,
                   policy=r.policy, diagnosis=r.diagnosis, plan=r.plan, observation=r.plan.observation, mode=r.mode,
                   expected=r.expected)


def _no_null_observation(value: object) -> dict[str, JsonValue]:
    return without_nulls(object_at(value, ""), ("observation",))


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

    def to_dict(self) -> dict[str, JsonValue]:
        return OUTCOME_JSON.dump_object(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> OutcomeRecord:
        return OUTCOME_JSON.load(data)


@dataclass(frozen=True)
class LoggedDecision:
    """A decision with what became of it (results and outcome are None until written). Written as
    the decision's JSON with `id` first and `results`, `done_at` and `outcome` after."""

    id: str
    decision: DecisionRecord
    results: tuple[ActionResult, ...] | None = None
    outcome: OutcomeRecord | None = None
    done_at: float | None = None

    @property
    def failed(self) -> bool:
        return bool(self.results) and any(r.status == "failed" for r in self.results or ())

    @classmethod
    def __get_pydantic_core_schema__(cls, source: object, handler: GetCoreSchemaHandler) -> CoreSchema:
        return json_form(handler, _LoggedJSON, _LoggedJSON.logged, _LoggedJSON.of_logged)

    def to_dict(self) -> dict[str, JsonValue]:
        return LOGGED_JSON.dump_object(self)


@dataclass(frozen=True, kw_only=True)
class _LoggedJSON(_DecisionJSON):
    id: str
    results: tuple[ActionResult, ...] | None = None
    done_at: float | None = None
    outcome: OutcomeRecord | None = None

    @classmethod
    def __get_pydantic_core_schema__(cls, source: object, handler: GetCoreSchemaHandler) -> CoreSchema:
        return reshaped(handler, source, _no_null_observation, lambda data: ordered(data, ("id",)))

    def logged(self) -> LoggedDecision:
        return LoggedDecision(self.id, self.record(), self.results, self.outcome, self.done_at)

    @classmethod
    def of_logged(cls, d: LoggedDecision) -> _LoggedJSON:
        r = d.decision
        return cls(app=r.app, decided_at=r.decided_at, snapshot_id=r.snapshot_id, daemon=r.daemon, epoch=r.epoch,
                   policy=r.policy, diagnosis=r.diagnosis, plan=r.plan, observation=r.plan.observation, mode=r.mode,
                   expected=r.expected, id=d.id, results=d.results, done_at=d.done_at, outcome=d.outcome)


DECISION_JSON: Codec[DecisionRecord] = Codec(DecisionRecord, label="decision")
OUTCOME_JSON: Codec[OutcomeRecord] = Codec(OutcomeRecord, label="outcome")
LOGGED_JSON: Codec[LoggedDecision] = Codec(LoggedDecision, label="logged decision")


def executed(logged: Iterable[LoggedDecision]) -> list[LoggedDecision]:
    """The decisions with at least one action done, in log order (the last is the last action)."""
    return [d for d in logged if d.results and any(r.status == "done" for r in d.results)]


def past_decisions(logged: Iterable[LoggedDecision]) -> tuple[PastDecision, ...]:
    """Logged decisions as the planner's decision history (with their observations), oldest first."""
    ordered = sorted(logged, key=lambda d: d.decision.decided_at)
    return tuple(PastDecision(d.decision.decided_at, d.decision.plan) for d in ordered)


@dataclass(frozen=True)
class BlocklistEntry:
    """One blocked pair, why and since when. Written flat: the BlockedAction's keys, then
    `blocked_at`, `decision_id`, `reason`."""

    blocked: BlockedAction
    blocked_at: float
    decision_id: str
    reason: str

    @classmethod
    def __get_pydantic_core_schema__(cls, source: object, handler: GetCoreSchemaHandler) -> CoreSchema:
        return json_form(handler, _BlocklistEntryJSON, _BlocklistEntryJSON.entry, _BlocklistEntryJSON.of)

    def to_dict(self) -> dict[str, JsonValue]:
        return BLOCKLIST_ENTRY_JSON.dump_object(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BlocklistEntry:
        return BLOCKLIST_ENTRY_JSON.load(data)


@dataclass(frozen=True, kw_only=True)
class _BlocklistEntryJSON:
    app: str
    diagnosis: str
    action_type: str
    until: float
    policy: str | None = None
    blocked_at: float
    decision_id: str = ""
    reason: str = ""

    def entry(self) -> BlocklistEntry:
        return BlocklistEntry(BlockedAction(self.app, self.diagnosis, self.action_type, self.until, self.policy),
                              self.blocked_at, self.decision_id, self.reason)

    @classmethod
    def of(cls, e: BlocklistEntry) -> _BlocklistEntryJSON:
        b = e.blocked
        return cls(app=b.app, diagnosis=b.diagnosis, action_type=b.action_type, until=b.until, policy=b.policy,
                   blocked_at=e.blocked_at, decision_id=e.decision_id, reason=e.reason)


BLOCKLIST_ENTRY_JSON: Codec[BlocklistEntry] = Codec(BlocklistEntry, label="blocklist entry")


@dataclass(frozen=True)
class ResultsEntry:
    """A `result` entry: what the actuator did for the decision `decision_id`."""

    decision_id: str
    done_at: float | None
    results: tuple[ActionResult, ...]

    def to_dict(self) -> dict[str, JsonValue]:
        return {"decision_id": self.decision_id, "done_at": self.done_at,
                "results": [r.to_dict() for r in self.results]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ResultsEntry:
        done_at = data.get("done_at")
        if done_at is not None and not isinstance(done_at, (int, float)):
            raise ValueError(f"done_at: expected a number (got {type(done_at).__name__})")
        return cls(str(data["decision_id"]), done_at, tuple(ActionResult.from_dict(r) for r in data["results"]))


Entry = DecisionRecord | ResultsEntry | OutcomeRecord  # one entry of the action log, parsed


def parse_entry(kind: str | None, body: object) -> Entry | None:
    """An entry's JSON (already parsed) as its record (None: a kind this reader does not know);
    raises ValueError, TypeError or KeyError when the JSON is not the record's."""
    if kind == "decision":
        return DECISION_JSON.load(body)
    if kind == "outcome":
        return OUTCOME_JSON.load(body)
    if kind == "result":
        return ResultsEntry.from_dict(dict(object_at(body, "")))
    return None


def join(entries: Iterable[tuple[str, Entry]]) -> list[LoggedDecision]:
    """Entries (id, record) in log order as decisions joined with their results and outcomes."""
    decisions: dict[str, LoggedDecision] = {}
    for entry_id, entry in entries:
        if isinstance(entry, DecisionRecord):
            decisions[entry_id] = LoggedDecision(entry_id, entry)
        elif isinstance(entry, ResultsEntry) and entry.decision_id in decisions:
            d = decisions[entry.decision_id]
            decisions[d.id] = replace(d, results=entry.results, done_at=entry.done_at)
        elif isinstance(entry, OutcomeRecord) and entry.decision_id in decisions:
            d = decisions[entry.decision_id]
            decisions[d.id] = replace(d, outcome=entry)
    return list(decisions.values())


def blocklist_field(blocked: BlockedAction) -> str:
    """The blocklist's key for an entry: one per app, diagnosis and action type."""
    return f"{blocked.app}|{blocked.diagnosis}|{blocked.action_type}"
