"""Plans: what a policy wants done to one application, why, and what it saw.

A plan is data, not a command: actuators carry it out, the action log stores it, and
`sparkscale plan --json` prints `Plan.to_dict()`, whose shape is DESIGN.md's plan contract. What a
later decision needs from this one (window figures, the diagnosis, the expected outcome, the
recommended executor count) travels typed in `Plan.observation`, not in the explanation text.

Action types are an open table: an actuator for a new kind of action registers its type and the
fields it needs with `register_action_type` (the built-in four are registered below).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

ActionType = str  # a name registered with register_action_type

# action type -> the Action fields it needs (from_/to are checked as integers >= its low bound)
_ACTION_FIELDS: dict[str, tuple[tuple[str, ...], int]] = {}


def register_action_type(name: str, needs: Sequence[str] = (), low: int = 0) -> None:
    """Make `name` a valid action type needing the Action fields `needs` (`from_`/`to`, when given,
    must be integers >= `low`). Registering the same type again with the same needs is harmless."""
    entry = (tuple(needs), low)
    if _ACTION_FIELDS.get(name, entry) != entry:
        raise ValueError(f"action type {name!r} is already registered with other fields")
    _ACTION_FIELDS[name] = entry


def registered_action_types() -> tuple[str, ...]:
    return tuple(_ACTION_FIELDS)


register_action_type("scale_executors", ("from_", "to"))
register_action_type("set_parallelism", ("operator", "from_", "to"), low=1)
register_action_type("replace_executor", ("executor",))
register_action_type("warn", ("reason",))


@dataclass(frozen=True)
class Action:
    """One change (or a warning). `from_`/`to` are executor counts for `scale_executors` and
    partition counts for `set_parallelism`; they are `from`/`to` in JSON. `query` names the query an
    action is for where the operator alone does not (a stage's `set_parallelism` mapped to its
    query's migration); it is left out of the JSON when not set. `executors` names the executors a
    scale-in decommissions, where a placement policy chose them (EDRP's q); empty: the agent's
    choice, the newest."""

    type: ActionType
    operator: str | None = None
    executor: str | None = None
    from_: int | None = None
    to: int | None = None
    reason: str = ""
    query: str | None = None
    executors: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.type not in _ACTION_FIELDS:
            raise ValueError(f"unknown action type {self.type!r} (expected one of {', '.join(_ACTION_FIELDS)})")
        needs, low = _ACTION_FIELDS[self.type]
        missing = [name.rstrip("_") for name in needs if getattr(self, name) in (None, "")]
        if missing:
            raise ValueError(f"a {self.type} action needs {', '.join(missing)}")
        for name in ("from_", "to"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < low):
                raise ValueError(f"{self.type}.{name.rstrip('_')}: expected an integer >= {low}, got {value!r}")
        if self.executors:
            object.__setattr__(self, "executors", tuple(str(e) for e in self.executors))
            removed = (self.from_ or 0) - (self.to or 0)
            if self.type != "scale_executors" or len(set(self.executors)) != len(self.executors) or (
                    len(self.executors) != removed):
                raise ValueError(f"{self.type}: executors {list(self.executors)} must name the {removed} distinct "
                                 "executors a scale_executors scale-in removes")

    @classmethod
    def scale_executors(cls, from_: int, to: int, reason: str, executors: Sequence[str] = ()) -> Action:
        return cls("scale_executors", from_=from_, to=to, reason=reason, executors=tuple(executors))

    @classmethod
    def set_parallelism(cls, operator: str, from_: int, to: int, reason: str) -> Action:
        return cls("set_parallelism", operator=operator, from_=from_, to=to, reason=reason)

    @classmethod
    def replace_executor(cls, executor: str, reason: str) -> Action:
        return cls("replace_executor", executor=executor, reason=reason)

    @classmethod
    def warn(cls, reason: str, operator: str | None = None) -> Action:
        return cls("warn", operator=operator, reason=reason)

    def to_dict(self) -> dict[str, Any]:
        """Only the keys that apply, in a stable order: type, query, operator, executor, from, to,
        executors, reason."""
        out: dict[str, Any] = {"type": self.type}
        for key, value in (("query", self.query), ("operator", self.operator), ("executor", self.executor),
                           ("from", self.from_), ("to", self.to)):
            if value is not None:
                out[key] = value
        if self.executors:
            out["executors"] = list(self.executors)
        if self.reason:
            out["reason"] = self.reason
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Action:
        return cls(
            type=data["type"],
            operator=data.get("operator"),
            executor=data.get("executor"),
            from_=data.get("from"),
            to=data.get("to"),
            reason=data.get("reason", ""),
            query=data.get("query"),
            executors=tuple(data.get("executors") or ()),
        )

    @property
    def executor_direction(self) -> int:
        """+1 when the action adds executors, -1 when it removes some, 0 for any other change."""
        if self.type != "scale_executors" or self.from_ is None or self.to is None:
            return 0
        return (self.to > self.from_) - (self.to < self.from_)

    def summary(self) -> str:
        """One line for logs and tables."""
        if self.type == "scale_executors":
            named = f" (decommission {', '.join(self.executors)})" if self.executors else ""
            return f"scale_executors {self.from_} -> {self.to}{named}"
        if self.type == "set_parallelism":
            where = f"{self.query}/{self.operator}" if self.query and self.query != self.operator else self.operator
            return f"set_parallelism {where} {self.from_} -> {self.to}"
        if self.type == "replace_executor":
            return f"replace_executor {self.executor}"
        if self.type == "warn":
            return f"warn{f' {self.operator}' if self.operator else ''}"
        target = " ".join(x for x in (self.operator, self.executor) if x)
        change = f" {self.from_} -> {self.to}" if self.from_ is not None or self.to is not None else ""
        return f"{self.type}{f' {target}' if target else ''}{change}"


def evaluate_outcome(expected: float, observed: float, fraction: float) -> bool:
    """Did an action bring at least `fraction` of the change it was expected to bring? `expected` and
    `observed` are changes of the same figure (after - before); a decrease counts when a decrease
    was expected. Nothing expected (0) is always met."""
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    if expected == 0:
        return True
    # Dhalion §4: an action that did not produce the expected outcome goes on the blocklist.
    return observed / expected >= fraction


@dataclass(frozen=True)
class ExpectedOutcome:
    """What a policy's action is expected to do to one figure (`metric`) of the app."""

    diagnosis: str
    action_type: ActionType
    metric: str
    before: float
    after: float

    def met(self, observed_after: float, fraction: float) -> bool:
        return evaluate_outcome(self.after - self.before, observed_after - self.before, fraction)

    def to_dict(self) -> dict[str, Any]:
        return {"diagnosis": self.diagnosis, "action_type": self.action_type, "metric": self.metric,
                "before": round(self.before, 6), "after": round(self.after, 6)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ExpectedOutcome:
        return cls(str(data["diagnosis"]), str(data["action_type"]), str(data["metric"]),
                   float(data["before"]), float(data["after"]))


Figure = float | int | None


@dataclass(frozen=True)
class Observation:
    """What one decision saw and concluded, for the decisions after it (the decision history).

    `figures` are a policy's window figures that later windows compare with (the backlog for
    Dhalion's growth detector, a threshold rule's metric); `recommended_executors` is what the
    guards' scale-down delay reads back. Typed, so nothing is parsed out of explanation text."""

    query: str | None = None
    figures: Mapping[str, Figure] = field(default_factory=dict, hash=False)
    diagnosis: str | None = None
    expected: ExpectedOutcome | None = None
    recommended_executors: int | None = None

    def __post_init__(self) -> None:
        clean = {}
        for key, value in dict(self.figures).items():
            if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool)
                                      or not math.isfinite(value)):
                raise ValueError(f"observation figure {key!r} must be a finite number or null, got {value!r}")
            clean[str(key)] = value
        object.__setattr__(self, "figures", clean)

    def figure(self, key: str) -> Figure:
        return self.figures.get(key)

    def merged(self, **changes: Any) -> Observation:
        """This observation with `changes`; `figures` given are added to (not replacing) the old ones."""
        if "figures" in changes:
            changes["figures"] = {**self.figures, **changes["figures"]}
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"query": self.query, "figures": dict(self.figures), "diagnosis": self.diagnosis,
                               "expected": self.expected.to_dict() if self.expected else None,
                               "recommended_executors": self.recommended_executors}
        return {k: v for k, v in out.items() if v not in (None, {})}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Observation:
        """Read one back (the action log, a history file); raises ValueError on a malformed one."""
        if not data:
            return cls()
        if not isinstance(data, Mapping):
            raise ValueError(f"an observation must be a JSON object, got {type(data).__name__}")
        try:
            expected = data.get("expected")
            recommended = data.get("recommended_executors")
            if recommended is not None and (not isinstance(recommended, int) or isinstance(recommended, bool)):
                raise ValueError(f"recommended_executors must be an integer, got {recommended!r}")
            figures = data.get("figures") or {}
            if not isinstance(figures, Mapping):
                raise ValueError("figures must be a JSON object")
            return cls(data.get("query"), figures, data.get("diagnosis"),
                       ExpectedOutcome.from_dict(expected) if expected else None, recommended)
        except (KeyError, TypeError) as exc:
            raise ValueError(f"malformed observation: {exc!r}") from None


@dataclass(frozen=True)
class Plan:
    """A policy's decision for one application: target parallelism per modelled operator, the
    actions that get there (empty when nothing should change), and the figures behind them."""

    policy: str
    app: str
    parallelism: Mapping[str, int] = field(default_factory=dict, hash=False)  # in topological order
    actions: tuple[Action, ...] = ()
    explanation: tuple[str, ...] = ()
    observation: Observation = field(default_factory=Observation)  # for later decisions; not in to_dict()

    def __post_init__(self) -> None:
        object.__setattr__(self, "parallelism", dict(self.parallelism))
        object.__setattr__(self, "actions", tuple(self.actions))
        object.__setattr__(self, "explanation", tuple(self.explanation))

    @property
    def changes(self) -> tuple[Action, ...]:
        """The actions that change something (everything but warnings)."""
        return tuple(a for a in self.actions if a.type != "warn")

    @property
    def warnings(self) -> tuple[Action, ...]:
        return tuple(a for a in self.actions if a.type == "warn")

    def to_dict(self) -> dict[str, Any]:
        """DESIGN.md's plan JSON, exactly these five keys."""
        return {
            "policy": self.policy,
            "app": self.app,
            "parallelism": dict(self.parallelism),
            "actions": [a.to_dict() for a in self.actions],
            "explanation": list(self.explanation),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], observation: Observation | None = None) -> Plan:
        """Read a plan back (from the action log or a history file, with its observation)."""
        return cls(
            policy=data["policy"],
            app=data["app"],
            parallelism={str(k): int(v) for k, v in data.get("parallelism", {}).items()},
            actions=tuple(Action.from_dict(a) for a in data.get("actions", ())),
            explanation=tuple(data.get("explanation", ())),
            observation=observation or Observation(),
        )

    def with_actions(self, actions: Iterable[Action], notes: Iterable[str] = (), **observed: Any) -> Plan:
        """This plan with other actions, `notes` added to its explanation and its observation
        updated by `observed` (Observation fields)."""
        return replace(self, actions=tuple(actions), explanation=(*self.explanation, *notes),
                       observation=self.observation.merged(**observed) if observed else self.observation)

    def to_table(self) -> str:
        """A text rendering for people: targets, actions with reasons, then the explanation."""
        lines = [f"plan by {self.policy} for app {self.app}", ""]
        if self.parallelism:
            rows = [[op, str(p)] for op, p in self.parallelism.items()]
            lines += table_lines(["operator", "target parallelism"], rows)
            lines.append("")
        if self.actions:
            rows = []
            for a in self.actions:
                target = a.operator or a.executor or ""
                change = f"{a.from_} -> {a.to}" if a.from_ is not None else ""
                rows.append([a.type, target, change, a.reason])
            lines += table_lines(["action", "on", "change", "reason"], rows)
        else:
            lines.append("actions: none (nothing should change)")
        if self.explanation:
            lines += ["", "explanation:"]
            lines += [f"  {line}" for line in self.explanation]
        return "\n".join(lines)


def table_lines(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """A plain-text table: header, a rule, then the rows, columns padded to their widest cell."""
    rows = [list(header), *map(list, rows)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    out = []
    for n, row in enumerate(rows):
        out.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return out
