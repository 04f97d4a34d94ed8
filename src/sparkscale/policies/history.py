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
from pathlib import Path
from typing import Any

from sparkscale.config.apps import MAX_EXECUTORS, MAX_PARTITIONS
from sparkscale.model.fields import (
    FieldError,
    boolean,
    describe,
    get,
    integer,
    join,
    list_at,
    number,
    object_at,
    only_known,
    optional_integer,
    optional_number,
    optional_string,
    read_json,
    string,
)
from sparkscale.model.plan import Action, ExpectedOutcome, Figure, Observation, Plan, registered_action_types
from sparkscale.model.snapshot import MAX_RATE
from sparkscale.policies.outcomes import BlockedAction, Blocklist

HISTORY_VERSION = 1
MAX_TIME = 1e11  # seconds since the epoch (the year 5138)
MAX_FIGURE = 1e30  # far beyond any figure a window yields, so that their differences stay finite


class HistoryError(FieldError):
    """A decision history that cannot be used: `path` is the field path (`decisions[3].plan.app`),
    `source` the file it was read from."""


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
        return _checked(_parse_decision, data, "")


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
        return _checked(_parse_scaling, data, "")


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
    executors other managed apps asked for and that have not started (`policies/capacity.py`).
    `scalability`: judged scale-ups,
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
    cores_claimed_elsewhere: int = 0  # cores other managed apps asked for that have not started yet

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
    def from_dict(cls, data: Any) -> DecisionHistory:
        """Raises HistoryError (a ValueError) naming the field and the problem (a history file is
        user input)."""
        return _checked(_parse_history, data, "history")


def load_history(path: str | Path) -> DecisionHistory:
    """Read and validate a decision history file (`sparkscale actions --history`); errors name the
    file and the field."""
    try:
        return DecisionHistory.from_dict(read_json(path))
    except FieldError as exc:
        raise _history_error(exc.in_file(str(path))) from None


# ---------------------------------------------------------------------------------------------
# Parsing with field paths: every key known, every number finite and bounded, every name a string


_HISTORY_KEYS = ("version", "decisions", "blocklist", "last_action_at", "migration_running", "last_migration_end",
                 "partitions", "requested_executors", "last_action_direction", "action_in_progress", "scalability")
_DECISION_KEYS = ("decided_at", "plan", "observation")
_PLAN_KEYS = ("policy", "app", "parallelism", "actions", "explanation")
_ACTION_KEYS = ("type", "query", "operator", "executor", "from", "to", "reason")
_OBSERVATION_KEYS = ("query", "figures", "diagnosis", "expected", "recommended_executors")
_EXPECTED_KEYS = ("diagnosis", "action_type", "metric", "before", "after")
_BLOCKED_KEYS = ("app", "diagnosis", "action_type", "until", "policy")
_SCALING_KEYS = ("query", "at", "cores_before", "cores_after", "before_rps", "expected_rps", "observed_rps")


def _history_error(exc: FieldError) -> HistoryError:
    return exc if isinstance(exc, HistoryError) else HistoryError(exc.path, exc.problem, exc.source)


def _checked(parse: Any, data: Any, path: str) -> Any:
    """`parse(data, path)`, its errors (and the constructors' ValueErrors) as HistoryErrors."""
    try:
        return parse(data, path)
    except FieldError as exc:
        raise _history_error(exc) from None


def _time(value: Any, path: str) -> float:
    return number(value, path, 0, MAX_TIME)


def _optional_time(value: Any, path: str) -> float | None:
    return None if value is None else _time(value, path)


def _built(path: str, build: Any, *args: Any, **kwargs: Any) -> Any:
    """An object from checked fields; a ValueError of its own checks is the field's error."""
    try:
        return build(*args, **kwargs)
    except ValueError as exc:
        raise FieldError(path, str(exc)) from None


def _parse_history(data: Any, path: str) -> DecisionHistory:
    top = object_at(data, path)
    only_known(top, _HISTORY_KEYS, "")
    version = top.get("version", HISTORY_VERSION)
    if version != HISTORY_VERSION or isinstance(version, bool):
        raise FieldError("version", f"expected {HISTORY_VERSION} (got {describe(version)})")
    decisions = tuple(_parse_decision(d, f"decisions[{i}]")
                      for i, d in enumerate(list_at(top.get("decisions", []), "decisions")))
    for i in range(1, len(decisions)):
        if decisions[i].decided_at < decisions[i - 1].decided_at:
            raise FieldError(f"decisions[{i}].decided_at", "earlier than the decision before it: decisions are "
                             "oldest first")
    blocked = tuple(_parse_blocked(e, f"blocklist[{i}]")
                    for i, e in enumerate(list_at(top.get("blocklist", []), "blocklist")))
    partitions = {str(q): integer(n, join("partitions", str(q)), 1, MAX_PARTITIONS)
                  for q, n in object_at(_or(top.get("partitions"), {}), "partitions").items()}
    direction = optional_integer(top.get("last_action_direction"), "last_action_direction", -1, 1)
    scalability = tuple(_parse_scaling(o, f"scalability[{i}]")
                        for i, o in enumerate(list_at(_or(top.get("scalability"), []), "scalability")))
    return DecisionHistory(
        decisions, Blocklist(blocked),
        _optional_time(top.get("last_action_at"), "last_action_at"),
        boolean(top.get("migration_running", False), "migration_running"),
        _optional_time(top.get("last_migration_end"), "last_migration_end"),
        partitions,
        optional_integer(top.get("requested_executors"), "requested_executors", 0, MAX_EXECUTORS),
        direction,
        _optional_text(top.get("action_in_progress"), "action_in_progress"),
        scalability,
    )


def _parse_decision(value: Any, path: str) -> PastDecision:
    obj = object_at(value, path)
    only_known(obj, _DECISION_KEYS, path)
    decided_at = _time(get(obj, "decided_at", path), join(path, "decided_at"))
    observation = _parse_observation(obj.get("observation"), join(path, "observation"))
    return PastDecision(decided_at, _parse_plan(get(obj, "plan", path), join(path, "plan"), observation))


def _parse_plan(value: Any, path: str, observation: Observation) -> Plan:
    obj = object_at(value, path)
    only_known(obj, _PLAN_KEYS, path)
    parallelism_path = join(path, "parallelism")
    parallelism = {str(op): integer(n, join(parallelism_path, str(op)), 1, MAX_PARTITIONS)
                   for op, n in object_at(obj.get("parallelism", {}), parallelism_path).items()}
    actions = tuple(_parse_action(a, f"{join(path, 'actions')}[{i}]")
                    for i, a in enumerate(list_at(obj.get("actions", []), join(path, "actions"))))
    explanation = tuple(_text(line, f"{join(path, 'explanation')}[{i}]")
                        for i, line in enumerate(list_at(obj.get("explanation", []), join(path, "explanation"))))
    policy, app = (string(get(obj, key, path), join(path, key)) for key in ("policy", "app"))
    return Plan(policy, app, parallelism, actions, explanation, observation)


def _parse_action(value: Any, path: str) -> Action:
    obj = object_at(value, path)
    only_known(obj, _ACTION_KEYS, path)
    fields = {name: optional_string(obj.get(key), join(path, key))
              for name, key in (("operator", "operator"), ("executor", "executor"), ("query", "query"))}
    counts = {name: optional_integer(obj.get(key), join(path, key), 0, MAX_EXECUTORS)
              for name, key in (("from_", "from"), ("to", "to"))}
    kind = string(get(obj, "type", path), join(path, "type"))
    if kind not in registered_action_types():
        raise FieldError(join(path, "type"), f"unknown action type (expected one of "
                         f"{', '.join(registered_action_types())}; got {describe(kind)})")
    return _built(path, Action, kind, **fields, **counts, reason=_text(obj.get("reason", ""), join(path, "reason")))


def _parse_observation(value: Any, path: str) -> Observation:
    if value is None:
        return Observation()
    obj = object_at(value, path)
    only_known(obj, _OBSERVATION_KEYS, path)
    figures_path = join(path, "figures")
    figures = {str(k): optional_number(v, join(figures_path, str(k)), -MAX_FIGURE, MAX_FIGURE)
               for k, v in object_at(_or(obj.get("figures"), {}), figures_path).items()}
    expected = obj.get("expected")
    return Observation(
        optional_string(obj.get("query"), join(path, "query")), figures,
        _optional_text(obj.get("diagnosis"), join(path, "diagnosis")),
        None if expected is None else _parse_expected(expected, join(path, "expected")),
        optional_integer(obj.get("recommended_executors"), join(path, "recommended_executors"), 0, MAX_EXECUTORS),
    )


def _parse_expected(value: Any, path: str) -> ExpectedOutcome:
    obj = object_at(value, path)
    only_known(obj, _EXPECTED_KEYS, path)
    names = [string(get(obj, key, path), join(path, key)) for key in ("diagnosis", "action_type", "metric")]
    before, after = (number(get(obj, key, path), join(path, key), -MAX_FIGURE, MAX_FIGURE)
                     for key in ("before", "after"))
    return ExpectedOutcome(*names, before, after)


def _parse_blocked(value: Any, path: str) -> BlockedAction:
    obj = object_at(value, path)
    only_known(obj, _BLOCKED_KEYS, path)
    app, diagnosis, action_type = (string(get(obj, key, path), join(path, key)) for key in ("app", "diagnosis",
                                                                                           "action_type"))
    return BlockedAction(app, diagnosis, action_type, _time(get(obj, "until", path), join(path, "until")),
                         optional_string(obj.get("policy"), join(path, "policy")))


def _parse_scaling(value: Any, path: str) -> ScalingObservation:
    obj = object_at(value, path)
    only_known(obj, _SCALING_KEYS, path)
    cores = [integer(get(obj, key, path), join(path, key), 0, MAX_EXECUTORS) for key in ("cores_before", "cores_after")]
    rates = [number(get(obj, key, path), join(path, key), 0, MAX_RATE)
             for key in ("before_rps", "expected_rps", "observed_rps")]
    return ScalingObservation(optional_string(obj.get("query"), join(path, "query")),
                              _time(get(obj, "at", path), join(path, "at")), *cores, *rates)


def _or(value: Any, default: Any) -> Any:
    """`value`, or `default` when it is null (as absent); a wrong type is still the field's error."""
    return default if value is None else value


def _text(value: Any, path: str) -> str:
    """A string, possibly empty (a reason, an explanation line)."""
    if not isinstance(value, str):
        raise FieldError(path, f"expected a string (got {describe(value)})")
    return value


def _optional_text(value: Any, path: str) -> str | None:
    return None if value is None else _text(value, path)
