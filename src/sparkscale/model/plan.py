"""Plans: what a policy wants done to one application, why, and what it saw.

A plan is data, not a command: actuators carry it out, the action log stores it, and
`sparkscale plan --json` prints `Plan.to_dict()`, exactly its five keys (policy, app, parallelism,
actions, explanation). What a later decision needs from this one (window figures, the diagnosis,
the expected outcome, the recommended executor count) travels typed in `Plan.observation`, not in
the explanation text; it is written beside the plan (`policies/history.py`, `daemon/action_log.py`).
The JSON of all of them is generated from the annotations (`model/codec.py`).

Action types are an open table: an actuator for a new kind of action registers its type and the
fields it needs with `register_action_type` (the built-in five, `ActionType`, are registered below).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Annotated, Any, TypedDict, Unpack

from pydantic import Field, GetCoreSchemaHandler, JsonValue, PlainSerializer
from pydantic_core import CoreSchema

from sparkscale.config.apps import MAX_EXECUTORS, MAX_PARTITIONS
from sparkscale.model.codec import NAME, TEXT, Check, Codec, between, known_keys, reshaped, whole, without_nulls
from sparkscale.model.executor_shape import MAX_EXECUTOR_MEMORY_MB
from sparkscale.model.fields import FieldError, describe, string

MAX_FIGURE = 1e30  # far beyond any figure a window yields, so that their differences stay finite
MAX_AMOUNT = max(MAX_EXECUTORS, MAX_EXECUTOR_MEMORY_MB)  # the most any action type's from_/to may be
MIN_EXECUTOR_MEMORY_MB = 256  # AppConfig's least executor_memory_mb


class ActionType(StrEnum):
    """The built-in action types; a plug-in actuator's type is a plain string it registered."""

    SCALE_EXECUTORS = "scale_executors"
    SET_PARALLELISM = "set_parallelism"
    REPLACE_EXECUTOR = "replace_executor"
    WARN = "warn"
    SET_EXECUTOR_MEMORY = "set_executor_memory"  # from_/to in MiB; actuators/executor_memory.py


# action type -> the Action fields it needs, and the bounds of its from_/to
_ACTION_FIELDS: dict[str, tuple[tuple[str, ...], int, int]] = {}


def register_action_type(name: str, needs: Sequence[str] = (), low: int = 0, high: int = MAX_EXECUTORS) -> None:
    """Make `name` a valid action type needing the Action fields `needs` (`from_`/`to`, when given,
    must be integers in [`low`, `high`], at most MAX_AMOUNT). Registering the same type again with the
    same needs and bounds is harmless."""
    if not 0 <= low <= high <= MAX_AMOUNT:
        raise ValueError(f"action type {name!r}: bounds [{low}, {high}] not within [0, {MAX_AMOUNT}]")
    entry = (tuple(needs), low, high)
    if _ACTION_FIELDS.get(name, entry) != entry:
        raise ValueError(f"action type {name!r} is already registered with other fields")
    _ACTION_FIELDS[name] = entry


def registered_action_types() -> tuple[str, ...]:
    return tuple(_ACTION_FIELDS)


register_action_type(ActionType.SCALE_EXECUTORS, ("from_", "to"))
register_action_type(ActionType.SET_PARALLELISM, ("operator", "from_", "to"), low=1)
register_action_type(ActionType.REPLACE_EXECUTOR, ("executor",))
register_action_type(ActionType.WARN, ("reason",))
# Built in (not registered by its actuator) so that every reader of the action log knows it.
register_action_type(ActionType.SET_EXECUTOR_MEMORY, ("query", "from_", "to"), low=MIN_EXECUTOR_MEMORY_MB,
                     high=MAX_EXECUTOR_MEMORY_MB)


def _action_type(value: object) -> str:
    """A registered type; a built-in one as its ActionType."""
    kind = string(value, "")
    if kind not in _ACTION_FIELDS:
        raise FieldError("", f"unknown action type (expected one of {', '.join(_ACTION_FIELDS)}; got "
                         f"{describe(kind)})")
    try:
        return ActionType(kind)
    except ValueError:
        return kind  # a plug-in's


Count = Annotated[int, whole(0, MAX_EXECUTORS)]  # executors, or partitions (set_parallelism checks >= 1)
Amount = Annotated[int, whole(0, MAX_AMOUNT)]  # an action's from_/to: each type checks its own bounds
_ACTION_KEYS = ("type", "query", "operator", "executor", "from", "to", "executors", "reason")


@dataclass(frozen=True)
class Action:
    """One change (or a warning). `from_`/`to` are executor counts for `scale_executors`, partition
    counts for `set_parallelism` and MiB for `set_executor_memory`; they are `from`/`to` in JSON.
    `query` names the query an action is for where the operator alone does not (a stage's
    `set_parallelism` mapped to its query's migration, the query a `set_executor_memory` restart
    journals); it is left out of the JSON when not set. `executors` names the executors a
    scale-in decommissions, where a placement policy chose them (EDRP's q); empty: the agent's
    choice, the newest."""

    type: Annotated[str, Check(_action_type)]
    operator: Annotated[str, NAME] | None = None
    executor: Annotated[str, NAME] | None = None
    from_: Annotated[Amount | None, Field(alias="from")] = None
    to: Amount | None = None
    reason: Annotated[str, TEXT] = ""
    query: Annotated[str, NAME] | None = None
    executors: tuple[Annotated[str, NAME], ...] = ()

    def __post_init__(self) -> None:
        if self.type not in _ACTION_FIELDS:
            raise ValueError(f"unknown action type {self.type!r} (expected one of {', '.join(_ACTION_FIELDS)})")
        needs, low, high = _ACTION_FIELDS[self.type]
        missing = [name.rstrip("_") for name in needs if getattr(self, name) in (None, "")]
        if missing:
            raise ValueError(f"a {self.type} action needs {', '.join(missing)}")
        for name in ("from_", "to"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < low):
                raise ValueError(f"{self.type}.{name.rstrip('_')}: expected an integer >= {low}, got {value!r}")
            if value is not None and value > high:
                raise ValueError(f"{self.type}.{name.rstrip('_')}: expected an integer <= {high}, got {value!r}")
        if self.executors:
            object.__setattr__(self, "executors", tuple(str(e) for e in self.executors))
            removed = (self.from_ or 0) - (self.to or 0)
            if self.type != ActionType.SCALE_EXECUTORS or len(set(self.executors)) != len(self.executors) or (
                    len(self.executors) != removed):
                raise ValueError(f"{self.type}: executors {list(self.executors)} must name the {removed} distinct "
                                 "executors a scale_executors scale-in removes")

    @classmethod
    def __get_pydantic_core_schema__(cls, source: object, handler: GetCoreSchemaHandler) -> CoreSchema:
        return reshaped(handler, source, lambda v: known_keys(v, _ACTION_KEYS), _action_out)

    @classmethod
    def scale_executors(cls, from_: int, to: int, reason: str, executors: Sequence[str] = ()) -> Action:
        return cls(ActionType.SCALE_EXECUTORS, from_=from_, to=to, reason=reason, executors=tuple(executors))

    @classmethod
    def set_parallelism(cls, operator: str, from_: int, to: int, reason: str) -> Action:
        return cls(ActionType.SET_PARALLELISM, operator=operator, from_=from_, to=to, reason=reason)

    @classmethod
    def replace_executor(cls, executor: str, reason: str) -> Action:
        return cls(ActionType.REPLACE_EXECUTOR, executor=executor, reason=reason)

    @classmethod
    def warn(cls, reason: str, operator: str | None = None) -> Action:
        return cls(ActionType.WARN, operator=operator, reason=reason)

    @classmethod
    def set_executor_memory(cls, query: str, from_mb: int, to_mb: int, reason: str) -> Action:
        """A new executor memory, set by restarting the whole app (`query` is the one it journals)."""
        return cls(ActionType.SET_EXECUTOR_MEMORY, query=query, from_=from_mb, to=to_mb, reason=reason)

    def to_dict(self) -> dict[str, JsonValue]:
        """Only the keys that apply, in a stable order: type, query, operator, executor, from, to,
        executors, reason."""
        return ACTION_JSON.dump_object(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, JsonValue]) -> Action:
        return ACTION_JSON.load(data)

    @property
    def executor_direction(self) -> int:
        """+1 when the action adds executors, -1 when it removes some, 0 for any other change."""
        if self.type != ActionType.SCALE_EXECUTORS or self.from_ is None or self.to is None:
            return 0
        return (self.to > self.from_) - (self.to < self.from_)

    def summary(self) -> str:
        """One line for logs and tables."""
        if self.type == ActionType.SCALE_EXECUTORS:
            named = f" (decommission {', '.join(self.executors)})" if self.executors else ""
            return f"scale_executors {self.from_} -> {self.to}{named}"
        if self.type == ActionType.SET_PARALLELISM:
            where = f"{self.query}/{self.operator}" if self.query and self.query != self.operator else self.operator
            return f"set_parallelism {where} {self.from_} -> {self.to}"
        if self.type == ActionType.REPLACE_EXECUTOR:
            return f"replace_executor {self.executor}"
        if self.type == ActionType.WARN:
            return f"warn{f' {self.operator}' if self.operator else ''}"
        if self.type == ActionType.SET_EXECUTOR_MEMORY:
            return f"set_executor_memory {self.from_} -> {self.to} MB"
        target = " ".join(x for x in (self.operator, self.executor) if x)
        change = f" {self.from_} -> {self.to}" if self.from_ is not None or self.to is not None else ""
        return f"{self.type}{f' {target}' if target else ''}{change}"



def _action_out(data: dict[str, Any]) -> dict[str, JsonValue]:
    """The keys that apply (not null, not empty), in `_ACTION_KEYS`' order."""
    return {k: data[k] for k in _ACTION_KEYS if k == "type" or data.get(k) not in (None, "", [])}


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


Change = Annotated[float, between(-MAX_FIGURE, MAX_FIGURE), PlainSerializer(lambda x: round(x, 6))]


@dataclass(frozen=True)
class ExpectedOutcome:
    """What a policy's action is expected to do to one figure (`metric`) of the app (written
    rounded to 6 decimals)."""

    diagnosis: Annotated[str, NAME]
    action_type: Annotated[str, NAME]
    metric: Annotated[str, NAME]
    before: Change
    after: Change

    def met(self, observed_after: float, fraction: float) -> bool:
        return evaluate_outcome(self.after - self.before, observed_after - self.before, fraction)

    @classmethod
    def __get_pydantic_core_schema__(cls, source: object, handler: GetCoreSchemaHandler) -> CoreSchema:
        return reshaped(handler, source, lambda v: known_keys(v, _EXPECTED_KEYS))

    def to_dict(self) -> dict[str, JsonValue]:
        return EXPECTED_JSON.dump_object(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, JsonValue]) -> ExpectedOutcome:
        return EXPECTED_JSON.load(data)


_EXPECTED_KEYS = ("diagnosis", "action_type", "metric", "before", "after")
Figure = float | int | None
_OBSERVATION_KEYS = ("query", "figures", "diagnosis", "expected", "recommended_executors")


class ObservationChanges(TypedDict, total=False):
    """The fields of an Observation that `Observation.merged` and `Plan.with_actions` change."""

    query: str | None
    figures: Mapping[str, float | None]
    diagnosis: str | None
    expected: ExpectedOutcome | None
    recommended_executors: int | None


@dataclass(frozen=True)
class Observation:
    """What one decision saw and concluded, for the decisions after it (the decision history).

    `figures` are a policy's window figures that later windows compare with (the backlog for
    Dhalion's growth detector, a threshold rule's metric); `recommended_executors` is what the
    guards' scale-down delay reads back. Typed, so nothing is parsed out of explanation text.
    Written without its empty parts; null, or nothing, reads as an empty observation."""

    query: Annotated[str, NAME] | None = None
    figures: Mapping[str, Annotated[float, between(-MAX_FIGURE, MAX_FIGURE)] | None] = field(
        default_factory=dict, hash=False)
    diagnosis: Annotated[str, TEXT] | None = None
    expected: ExpectedOutcome | None = None
    recommended_executors: Count | None = None

    def __post_init__(self) -> None:
        clean = {}
        for key, value in dict(self.figures).items():
            if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool)
                                      or not math.isfinite(value)):
                raise ValueError(f"observation figure {key!r} must be a finite number or null, got {value!r}")
            clean[str(key)] = value
        object.__setattr__(self, "figures", clean)

    @classmethod
    def __get_pydantic_core_schema__(cls, source: object, handler: GetCoreSchemaHandler) -> CoreSchema:
        return reshaped(handler, source, _observation_in, _observation_out)

    def figure(self, key: str) -> Figure:
        return self.figures.get(key)

    def merged(self, **changes: Unpack[ObservationChanges]) -> Observation:
        """This observation with `changes`; `figures` given are added to (not replacing) the old ones."""
        if "figures" in changes:
            changes["figures"] = {**self.figures, **changes["figures"]}
        return replace(self, **changes)

    def to_dict(self) -> dict[str, JsonValue]:
        return OBSERVATION_JSON.dump_object(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, JsonValue] | None) -> Observation:
        """Read one back (the action log, a history file); raises a FieldError (a ValueError)
        naming the field of a malformed one."""
        return OBSERVATION_JSON.load(data)


def _observation_in(value: object) -> object:
    return {} if value is None or value == {} else without_nulls(known_keys(value, _OBSERVATION_KEYS), ("figures",))


def _observation_out(data: dict[str, Any]) -> dict[str, JsonValue]:
    return {k: v for k, v in data.items() if v not in (None, {})}


_PLAN_KEYS = ("policy", "app", "parallelism", "actions", "explanation")


@dataclass(frozen=True)
class Plan:
    """A policy's decision for one application: target parallelism per modelled operator, the
    actions that get there (empty when nothing should change), and the figures behind them."""

    policy: Annotated[str, NAME]
    app: Annotated[str, NAME]
    parallelism: Mapping[str, Annotated[int, whole(1, MAX_PARTITIONS)]] = field(
        default_factory=dict, hash=False)  # in topological order
    actions: tuple[Action, ...] = ()
    explanation: tuple[Annotated[str, TEXT], ...] = ()
    # For later decisions; not in to_dict(): written beside the plan by those who keep it.
    observation: Annotated[Observation, Field(exclude=True)] = field(default_factory=Observation)

    def __post_init__(self) -> None:
        object.__setattr__(self, "parallelism", dict(self.parallelism))
        object.__setattr__(self, "actions", tuple(self.actions))
        object.__setattr__(self, "explanation", tuple(self.explanation))

    @classmethod
    def __get_pydantic_core_schema__(cls, source: object, handler: GetCoreSchemaHandler) -> CoreSchema:
        return reshaped(handler, source, lambda v: known_keys(v, _PLAN_KEYS))

    @property
    def changes(self) -> tuple[Action, ...]:
        """The actions that change something (everything but warnings)."""
        return tuple(a for a in self.actions if a.type != ActionType.WARN)

    @property
    def warnings(self) -> tuple[Action, ...]:
        return tuple(a for a in self.actions if a.type == ActionType.WARN)

    def to_dict(self) -> dict[str, JsonValue]:
        """The plan JSON, exactly these five keys: policy, app, parallelism, actions, explanation."""
        return PLAN_JSON.dump_object(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, JsonValue], observation: Observation | None = None) -> Plan:
        """Read a plan back (from the action log or a history file, with its observation)."""
        plan = PLAN_JSON.load(data)
        return plan if observation is None else replace(plan, observation=observation)

    def with_actions(self, actions: Iterable[Action], notes: Iterable[str] = (),
                     **observed: Unpack[ObservationChanges]) -> Plan:
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


ACTION_JSON: Codec[Action] = Codec(Action, label="action")
EXPECTED_JSON: Codec[ExpectedOutcome] = Codec(ExpectedOutcome, label="expected")
OBSERVATION_JSON: Codec[Observation] = Codec(Observation, label="observation")
PLAN_JSON: Codec[Plan] = Codec(Plan, label="plan")
