"""The decision history: what the planner knows besides the snapshot (typed, serialisable).

The daemon keeps one per app (past decisions with their observations, the blocklist, when it last
acted, the migration state and the queries' state partitions), rebuilds it from Redis when it is
elected, and passes it to `planner.decide`. `sparkscale plan --history FILE` reads the same JSON
(`DecisionHistory.to_dict`, generated from the annotations: `model/codec.py`), so a decision that
depended on history, the capacity guard's included, can be replayed offline.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, GetCoreSchemaHandler, JsonValue
from pydantic_core import CoreSchema

from sparkscale.config.apps import MAX_EXECUTOR_CORES, MAX_EXECUTORS, MAX_PARTITIONS
from sparkscale.model.codec import (
    FLAG,
    NAME,
    TEXT,
    Codec,
    between,
    json_form,
    known_keys,
    reshaped,
    whole,
    without_nulls,
)
from sparkscale.model.fields import FieldError, describe, read_json
from sparkscale.model.plan import Figure, Observation, Plan
from sparkscale.model.snapshot import MAX_RATE
from sparkscale.policies.outcomes import Blocklist, Time

HISTORY_VERSION = 1
MAX_CORES = MAX_EXECUTORS * MAX_EXECUTOR_CORES  # of every app together
MAX_MEMORY_MB = 1 << 50  # of every app's executors together
MAX_COST_S = 86_400.0  # a change that stalls a query longer than a day is not a cost sample
KEEP_COSTS = 20  # the newest stall samples kept per kind of change


class HistoryError(FieldError):
    """A decision history that cannot be used: `path` is the field path (`decisions[3].plan.app`),
    `source` the file it was read from."""


@dataclass(frozen=True)
class PastDecision:
    """A plan the daemon made, and when (seconds since the epoch, the snapshot clock). Written as
    `{decided_at, plan, observation}`: the plan's observation beside it."""

    decided_at: float
    plan: Plan

    @property
    def observation(self) -> Observation:
        return self.plan.observation

    @classmethod
    def __get_pydantic_core_schema__(cls, source: object, handler: GetCoreSchemaHandler) -> CoreSchema:
        return json_form(handler, _DecisionJSON,
                         lambda j: cls(j.decided_at, replace(j.plan, observation=j.observation)),
                         lambda d: _DecisionJSON(d.decided_at, d.plan, d.observation))

    def to_dict(self) -> dict[str, JsonValue]:
        return DECISION_JSON.dump_object(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, JsonValue]) -> PastDecision:
        return DECISION_JSON.load(data)


@dataclass(frozen=True)
class _DecisionJSON:
    """A PastDecision as it is written."""

    decided_at: Time
    plan: Plan
    observation: Observation = field(default_factory=Observation)

    @classmethod
    def __get_pydantic_core_schema__(cls, source: object, handler: GetCoreSchemaHandler) -> CoreSchema:
        return reshaped(handler, source, lambda v: known_keys(v, ("decided_at", "plan", "observation")))


Rate = Annotated[float, between(0, MAX_RATE)]
Cores = Annotated[int, whole(0, MAX_EXECUTORS)]
_SCALING_KEYS = ("query", "at", "cores_before", "cores_after", "before_rps", "expected_rps", "observed_rps")


@dataclass(frozen=True)
class ScalingObservation:
    """One judged scale-up: the capacity (source records/s) before it, what the policy expected on
    the new cores, and what was measured once they were registered (FLINK-30571's observed
    scalability). `gain_ratio` is the share of the expected gain that came."""

    query: Annotated[str, NAME] | None
    at: Time
    cores_before: Cores
    cores_after: Cores
    before_rps: Rate
    expected_rps: Rate
    observed_rps: Rate

    @property
    def gain_ratio(self) -> float | None:
        expected_gain = self.expected_rps - self.before_rps
        if expected_gain <= 0:
            return None
        return (self.observed_rps - self.before_rps) / expected_gain

    @classmethod
    def __get_pydantic_core_schema__(cls, source: object, handler: GetCoreSchemaHandler) -> CoreSchema:
        return reshaped(handler, source, lambda v: {"query": None, **known_keys(v, _SCALING_KEYS)})

    def to_dict(self) -> dict[str, JsonValue]:
        return SCALING_JSON.dump_object(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, JsonValue]) -> ScalingObservation:
        return SCALING_JSON.load(data)


def _oldest_first(decisions: tuple[PastDecision, ...]) -> tuple[PastDecision, ...]:
    for i in range(1, len(decisions)):
        if decisions[i].decided_at < decisions[i - 1].decided_at:
            raise FieldError(f"[{i}].decided_at", "earlier than the decision before it: decisions are oldest first")
    return decisions


@dataclass(frozen=True)
class DecisionHistory:
    """Past decisions for one application, oldest first, and the state the guards and the blocklist
    read. Immutable: `with_decision` and `replace` return a new history, so a policy cannot change
    what the daemon remembers.

    `last_action_at`: when an action was last carried out (None: take the last plan with a change;
    0.0: never). `migration_running` / `last_migration_end`: from the migration journal.
    `partitions`: each query's state partitions now (for mapping stage wishes to a migration).
    `requested_executors`: the executor count last asked of Spark (None: unknown; more than the
    snapshot's executors: some are still starting). `last_action_direction`: +1 when the last
    executed action added executors, -1 when it removed some, 0 for any other change (None: take
    the last plan with a change). `action_in_progress`: the summary of an action still being
    carried out (the daemon runs actions in the background). `cores_claimed_elsewhere`: the cores of
    executors other managed apps asked for and that have not started (`policies/capacity.py`);
    `cores_held_elsewhere` / `memory_mb_held_elsewhere`: the cores and executor memory the other
    managed apps hold or asked for (`policies/quotas.py`).
    `scalability`: judged scale-ups, oldest first. `change_costs`: per kind of change
    (`policies/change_costs.py`: executor_add, executor_remove, migration_<strategy>) the seconds
    each measured one stalled this app's processing, oldest first; `migration_strategy`: the
    strategy this app's migrations use (None: unknown)."""

    decisions: Annotated[tuple[PastDecision, ...], AfterValidator(_oldest_first)] = ()
    blocklist: Blocklist = field(default_factory=Blocklist)
    last_action_at: Time | None = None
    migration_running: Annotated[bool, FLAG] = False
    last_migration_end: Time | None = None
    partitions: Mapping[str, Annotated[int, whole(1, MAX_PARTITIONS)]] = field(default_factory=dict, hash=False)
    requested_executors: Cores | None = None
    last_action_direction: Annotated[int, whole(-1, 1)] | None = None
    action_in_progress: Annotated[str, TEXT] | None = None
    scalability: tuple[ScalingObservation, ...] = ()
    cores_claimed_elsewhere: Annotated[int, whole(0, MAX_CORES)] = 0  # asked for by other managed apps, not started
    # What the other managed apps hold or asked for, for the quotas (policies/quotas.py).
    cores_held_elsewhere: Annotated[int, whole(0, MAX_CORES)] = 0
    memory_mb_held_elsewhere: Annotated[int, whole(0, MAX_MEMORY_MB)] = 0
    change_costs: Mapping[Annotated[str, NAME], tuple[Annotated[float, between(0, MAX_COST_S)], ...]] = field(
        default_factory=dict, hash=False)
    migration_strategy: Annotated[str, NAME] | None = None

    def __post_init__(self) -> None:
        decisions = tuple(self.decisions)
        if any(b.decided_at < a.decided_at for a, b in itertools.pairwise(decisions)):
            raise ValueError("decisions must be in time order, oldest first")
        object.__setattr__(self, "decisions", decisions)
        object.__setattr__(self, "partitions", dict(self.partitions))
        object.__setattr__(self, "scalability", tuple(self.scalability))
        object.__setattr__(self, "change_costs", {k: tuple(v) for k, v in self.change_costs.items()})

    @classmethod
    def __get_pydantic_core_schema__(cls, source: object, handler: GetCoreSchemaHandler) -> CoreSchema:
        return reshaped(handler, source, _history_in, lambda data: {"version": HISTORY_VERSION, **data})

    def with_scaling(self, observation: ScalingObservation, keep: int = 20) -> DecisionHistory:
        """With one more judged scale-up (the newest `keep` are kept)."""
        return replace(self, scalability=(*self.scalability, observation)[-keep:])

    def with_change_cost(self, kind: str, stall_s: float, keep: int = KEEP_COSTS) -> DecisionHistory:
        """With one more measured stall of a `kind` of change (the newest `keep` are kept)."""
        samples = (*self.change_costs.get(kind, ()), float(min(max(stall_s, 0.0), MAX_COST_S)))[-keep:]
        return replace(self, change_costs={**self.change_costs, kind: samples})

    @classmethod
    def empty(cls) -> DecisionHistory:
        return cls()

    def with_decision(self, decided_at: float, plan: Plan) -> DecisionHistory:
        return replace(self, decisions=(*self.decisions, PastDecision(decided_at, plan)))

    def trimmed(self, since: float) -> DecisionHistory:
        """Without the decisions made before `since`."""
        if self.decisions and self.decisions[0].decided_at < since:
            return replace(self, decisions=self.since(since))
        return self

    @property
    def last(self) -> PastDecision | None:
        return self.decisions[-1] if self.decisions else None

    @property
    def last_decided_at(self) -> float:
        return self.last.decided_at if self.last else -math.inf

    def since(self, t: float) -> tuple[PastDecision, ...]:
        """Decisions made at or after `t` (for cooldowns and "for N windows" rules)."""
        return tuple(d for d in self.decisions if d.decided_at >= t)

    def by_policy(self, name: str) -> tuple[PastDecision, ...]:
        return tuple(d for d in self.decisions if d.plan.policy == name)

    def recent_figures(self, key: str, count: int, query: str | None = None) -> tuple[tuple[float, Figure], ...]:
        """(decided_at, figure `key`) of the last `count` decisions, oldest first, stopping at the first
        decision (newest backwards) that did not record it: these are consecutive windows. With
        `query`, only decisions that observed that query count (an app may run several queries)."""
        found: list[tuple[float, Figure]] = []
        for decision in reversed(self.decisions):
            if len(found) >= count:
                break
            obs = decision.observation
            if query is not None and (obs.query or query) != query:
                continue
            if key not in obs.figures:
                break
            found.append((decision.decided_at, obs.figures[key]))
        return tuple(reversed(found))

    def __len__(self) -> int:
        return len(self.decisions)

    def __iter__(self) -> Iterator[PastDecision]:
        return iter(self.decisions)

    def __bool__(self) -> bool:
        return bool(self.decisions)

    def to_dict(self) -> dict[str, JsonValue]:
        return HISTORY_JSON.dump_object(self)

    @classmethod
    def from_dict(cls, data: object) -> DecisionHistory:
        """Raises HistoryError (a ValueError) naming the field and the problem (a history file is
        user input)."""
        return HISTORY_JSON.load(data)


_HISTORY_KEYS = ("version", "decisions", "blocklist", "last_action_at", "migration_running", "last_migration_end",
                 "partitions", "requested_executors", "last_action_direction", "action_in_progress", "scalability",
                 "cores_claimed_elsewhere", "cores_held_elsewhere", "memory_mb_held_elsewhere", "change_costs",
                 "migration_strategy")


def _history_in(value: object) -> dict[str, JsonValue]:
    """Every key known, the version this one; a null `partitions`, `scalability` or `change_costs` is absent."""
    obj = without_nulls(known_keys(value, _HISTORY_KEYS), ("partitions", "scalability", "change_costs"))
    version = obj.pop("version", HISTORY_VERSION)
    if version != HISTORY_VERSION or isinstance(version, bool):
        raise FieldError("version", f"expected {HISTORY_VERSION} (got {describe(version)})")
    return obj


HISTORY_JSON: Codec[DecisionHistory] = Codec(DecisionHistory, HistoryError, "history")
DECISION_JSON: Codec[PastDecision] = Codec(PastDecision, HistoryError, "decision")
SCALING_JSON: Codec[ScalingObservation] = Codec(ScalingObservation, HistoryError, "scaling observation")


def load_history(path: str | Path) -> DecisionHistory:
    """Read and validate a decision history file (`sparkscale actions --history`); errors name the
    file and the field."""
    try:
        return DecisionHistory.from_dict(read_json(path))
    except FieldError as exc:
        raise HistoryError(exc.path, exc.problem, str(path)) from None
