"""Plans: what a policy wants done to one application, and why.

A plan is data, not a command: actuators carry it out, the action log stores it, and
`sparkscale plan --json` prints `Plan.to_dict()`, whose shape is DESIGN.md's plan contract.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

ActionType = Literal["scale_executors", "set_parallelism", "replace_executor", "warn"]
ACTION_TYPES: tuple[str, ...] = get_args(ActionType)


@dataclass(frozen=True)
class Action:
    """One change (or a warning). `from_`/`to` are executor counts for `scale_executors` and
    partition counts for `set_parallelism`; they are `from`/`to` in JSON."""

    type: ActionType
    operator: str | None = None
    executor: str | None = None
    from_: int | None = None
    to: int | None = None
    reason: str = ""

    def __post_init__(self) -> None:
        if self.type not in ACTION_TYPES:
            raise ValueError(f"unknown action type {self.type!r} (expected one of {', '.join(ACTION_TYPES)})")
        needs = {
            "scale_executors": ("from_", "to"),
            "set_parallelism": ("operator", "from_", "to"),
            "replace_executor": ("executor",),
            "warn": ("reason",),
        }[self.type]
        missing = [name.rstrip("_") for name in needs if getattr(self, name) in (None, "")]
        if missing:
            raise ValueError(f"a {self.type} action needs {', '.join(missing)}")
        low = 1 if self.type == "set_parallelism" else 0
        for name in ("from_", "to"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < low):
                raise ValueError(f"{self.type}.{name.rstrip('_')}: expected an integer >= {low}, got {value!r}")

    @classmethod
    def scale_executors(cls, from_: int, to: int, reason: str) -> Action:
        return cls("scale_executors", from_=from_, to=to, reason=reason)

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
        """Only the keys that apply, in a stable order: type, operator, executor, from, to, reason."""
        out: dict[str, Any] = {"type": self.type}
        for key, value in (("operator", self.operator), ("executor", self.executor),
                           ("from", self.from_), ("to", self.to)):
            if value is not None:
                out[key] = value
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
        )

    def summary(self) -> str:
        """One line for logs and tables."""
        if self.type == "scale_executors":
            return f"scale_executors {self.from_} -> {self.to}"
        if self.type == "set_parallelism":
            return f"set_parallelism {self.operator} {self.from_} -> {self.to}"
        if self.type == "replace_executor":
            return f"replace_executor {self.executor}"
        return f"warn{f' {self.operator}' if self.operator else ''}"


@dataclass(frozen=True)
class Plan:
    """A policy's decision for one application: target parallelism per modelled operator, the
    actions that get there (empty when nothing should change), and the figures behind them."""

    policy: str
    app: str
    parallelism: Mapping[str, int] = field(default_factory=dict, hash=False)  # in topological order
    actions: tuple[Action, ...] = ()
    explanation: tuple[str, ...] = ()

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
    def from_dict(cls, data: Mapping[str, Any]) -> Plan:
        """Read a plan back (from the action log, for the decision history)."""
        return cls(
            policy=data["policy"],
            app=data["app"],
            parallelism={str(k): int(v) for k, v in data.get("parallelism", {}).items()},
            actions=tuple(Action.from_dict(a) for a in data.get("actions", ())),
            explanation=tuple(data.get("explanation", ())),
        )

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
