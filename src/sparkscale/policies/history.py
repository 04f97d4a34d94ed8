"""The decision history: what the planner knows besides the snapshot (typed, serialisable).

The daemon keeps one per app (past decisions with their observations, the blocklist, when it last
acted, the migration state and the queries' state partitions), rebuilds it from Redis when it is
elected, and passes it to `planner.decide`. `sparkscale plan --history FILE` reads the same JSON
(`DecisionHistory.to_dict`), so a decision that depended on history can be replayed offline.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from sparkscale.plan import Figure, Observation, Plan
from sparkscale.policies.outcomes import BlockedAction, Blocklist

HISTORY_VERSION = 1


@dataclass(frozen=True)
class PastDecision:
    """A plan the daemon made, and when (seconds since the epoch, the snapshot clock)."""

    decided_at: float
    plan: Plan

    @property
    def observation(self) -> Observation:
        return self.plan.observation

    def to_dict(self) -> dict[str, Any]:
        return {"decided_at": self.decided_at, "plan": self.plan.to_dict(), "observation": self.observation.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PastDecision:
        observation = Observation.from_dict(data.get("observation"))
        return cls(float(data["decided_at"]), Plan.from_dict(data["plan"], observation))


@dataclass(frozen=True)
class ScalingObservation:
    """One judged scale-up: the capacity (source records/s) before it, what the policy expected on
    the new cores, and what was measured once they were registered (FLINK-30571's observed
    scalability). `gain_ratio` is the share of the expected gain that came."""

    query: str | None
    at: float
    cores_before: int
    cores_after: int
    before_rps: float
    expected_rps: float
    observed_rps: float

    @property
    def gain_ratio(self) -> float | None:
        expected_gain = self.expected_rps - self.before_rps
        if expected_gain <= 0:
            return None
        return (self.observed_rps - self.before_rps) / expected_gain

    def to_dict(self) -> dict[str, Any]:
        return {"query": self.query, "at": self.at, "cores_before": self.cores_before, "cores_after": self.cores_after,
                "before_rps": self.before_rps, "expected_rps": self.expected_rps, "observed_rps": self.observed_rps}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ScalingObservation:
        query = data.get("query")
        return cls(None if query is None else str(query), float(data["at"]), int(data["cores_before"]),
                   int(data["cores_after"]), float(data["before_rps"]), float(data["expected_rps"]),
                   float(data["observed_rps"]))


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
    carried out (the daemon runs actions in the background). `scalability`: judged scale-ups,
    oldest first."""

    decisions: tuple[PastDecision, ...] = ()
    blocklist: Blocklist = field(default_factory=Blocklist)
    last_action_at: float | None = None
    migration_running: bool = False
    last_migration_end: float | None = None
    partitions: Mapping[str, int] = field(default_factory=dict, hash=False)
    requested_executors: int | None = None
    last_action_direction: int | None = None
    action_in_progress: str | None = None
    scalability: tuple[ScalingObservation, ...] = ()

    def __post_init__(self) -> None:
        decisions = tuple(self.decisions)
        if any(b.decided_at < a.decided_at for a, b in zip(decisions, decisions[1:], strict=False)):
            raise ValueError("decisions must be in time order, oldest first")
        object.__setattr__(self, "decisions", decisions)
        object.__setattr__(self, "partitions", dict(self.partitions))
        object.__setattr__(self, "scalability", tuple(self.scalability))

    def with_scaling(self, observation: ScalingObservation, keep: int = 20) -> DecisionHistory:
        """With one more judged scale-up (the newest `keep` are kept)."""
        return replace(self, scalability=(*self.scalability, observation)[-keep:])

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

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": HISTORY_VERSION,
            "decisions": [d.to_dict() for d in self.decisions],
            "blocklist": [{"app": e.app, "diagnosis": e.diagnosis, "action_type": e.action_type, "until": e.until,
                           "policy": e.policy} for e in self.blocklist.entries],
            "last_action_at": self.last_action_at,
            "migration_running": self.migration_running,
            "last_migration_end": self.last_migration_end,
            "partitions": dict(self.partitions),
            "requested_executors": self.requested_executors,
            "last_action_direction": self.last_action_direction,
            "action_in_progress": self.action_in_progress,
            "scalability": [o.to_dict() for o in self.scalability],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DecisionHistory:
        """Raises ValueError naming what is wrong (a history file is user input)."""
        if not isinstance(data, Mapping):
            raise ValueError("a decision history must be a JSON object")
        if data.get("version", HISTORY_VERSION) != HISTORY_VERSION:
            raise ValueError(f"version: expected {HISTORY_VERSION}, got {data.get('version')!r}")
        try:
            decisions = tuple(PastDecision.from_dict(d) for d in data.get("decisions", ()))
            blocked = tuple(BlockedAction(str(e["app"]), str(e["diagnosis"]), str(e["action_type"]), float(e["until"]),
                                          e.get("policy"))
                            for e in data.get("blocklist", ()))
            last_action_at = data.get("last_action_at")
            last_end = data.get("last_migration_end")
            requested = data.get("requested_executors")
            direction = data.get("last_action_direction")
            in_progress = data.get("action_in_progress")
            return cls(decisions, Blocklist(blocked),
                       None if last_action_at is None else float(last_action_at),
                       bool(data.get("migration_running", False)),
                       None if last_end is None else float(last_end),
                       {str(q): int(n) for q, n in (data.get("partitions") or {}).items()},
                       None if requested is None else int(requested),
                       None if direction is None else int(direction),
                       None if in_progress is None else str(in_progress),
                       tuple(ScalingObservation.from_dict(o) for o in data.get("scalability") or ()))
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"malformed decision history: {exc!r}") from None
