"""What a policy is, what it remembers, and how the daemon finds one by name.

A policy is a pure function of (snapshot, decision history, config) to a plan: no I/O, no clock,
no randomness, so that `sparkscale plan SNAPSHOT` offline gives the decision the daemon would make.

To add a policy: write a class with a `name` and a `decide` method, decorate it with
`@register_policy`, and put it in `sparkscale.policies.<name>` (then `get_policy(name)` finds it
without any other change) or import its module before calling `get_policy`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import ClassVar, Protocol, TypeVar, runtime_checkable

from sparkscale.config import AppConfig, PolicyConfig
from sparkscale.plan import Plan
from sparkscale.snapshot import Snapshot


@dataclass(frozen=True)
class PastDecision:
    """A plan the daemon made, and when (seconds since the epoch, the snapshot clock)."""

    decided_at: float
    plan: Plan


@dataclass(frozen=True)
class DecisionHistory:
    """Past decisions for one application, oldest first. Immutable: `with_decision` returns a new
    history, so a policy cannot change what the daemon remembers."""

    decisions: tuple[PastDecision, ...] = ()

    def __post_init__(self) -> None:
        decisions = tuple(self.decisions)
        if any(b.decided_at < a.decided_at for a, b in zip(decisions, decisions[1:], strict=False)):
            raise ValueError("decisions must be in time order, oldest first")
        object.__setattr__(self, "decisions", decisions)

    @classmethod
    def empty(cls) -> DecisionHistory:
        return cls()

    def with_decision(self, decided_at: float, plan: Plan) -> DecisionHistory:
        return DecisionHistory((*self.decisions, PastDecision(decided_at, plan)))

    @property
    def last(self) -> PastDecision | None:
        return self.decisions[-1] if self.decisions else None

    def since(self, t: float) -> tuple[PastDecision, ...]:
        """Decisions made at or after `t` (for cooldowns and "for N windows" rules)."""
        return tuple(d for d in self.decisions if d.decided_at >= t)

    def by_policy(self, name: str) -> tuple[PastDecision, ...]:
        return tuple(d for d in self.decisions if d.plan.policy == name)

    def __len__(self) -> int:
        return len(self.decisions)

    def __iter__(self) -> Iterator[PastDecision]:
        return iter(self.decisions)

    def __bool__(self) -> bool:
        return bool(self.decisions)


@runtime_checkable
class Policy(Protocol):
    """The interface a scaling policy implements."""

    name: ClassVar[str]

    def decide(self, snapshot: Snapshot, history: DecisionHistory, cfg: PolicyConfig, app: AppConfig) -> Plan:
        """The plan for `snapshot`. Pure: no I/O; the same inputs give the same plan."""
        ...


PolicyFactory = Callable[[], Policy]
P = TypeVar("P", bound=type)

_REGISTRY: dict[str, PolicyFactory] = {}


def register_policy(cls: P | None = None, *, replace: bool = False) -> P | Callable[[P], P]:
    """Class decorator: make `cls` (instantiated without arguments) available as `get_policy(cls.name)`.

    Registering a different class under a name already taken is an error unless `replace=True`.
    Usable as `@register_policy` or `@register_policy(replace=True)`.
    """

    def add(klass: P) -> P:
        name = getattr(klass, "name", None)
        if not isinstance(name, str) or not name:
            raise TypeError(f"{klass.__qualname__} has no `name` (a non-empty str class attribute)")
        if not callable(getattr(klass, "decide", None)):
            raise TypeError(f"{klass.__qualname__} has no `decide` method")
        current = _REGISTRY.get(name)
        if current is not None and current is not klass and not _same_class(current, klass) and not replace:
            raise ValueError(f"a policy named {name!r} is already registered ({_qualname(current)})")
        _REGISTRY[name] = klass
        return klass

    return add(cls) if cls is not None else add


def get_policy(name: str) -> Policy:
    """A fresh instance of the policy registered as `name`; built-in modules are imported on demand."""
    if name not in _REGISTRY and name.isidentifier():
        try:
            importlib.import_module(f"{__package__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__package__}.{name}":
                raise  # the module exists but something it imports does not: show that
    factory = _REGISTRY.get(name)
    if factory is None:
        known = ", ".join(sorted(_REGISTRY)) or "none"
        raise KeyError(f"no policy named {name!r} (registered: {known})")
    return factory()


def registered_policies() -> tuple[str, ...]:
    return tuple(sorted(_REGISTRY))


def _same_class(a: object, b: type) -> bool:
    """True for the same class defined twice by re-importing its module (e.g. under test reloads)."""
    return isinstance(a, type) and a.__module__ == b.__module__ and a.__qualname__ == b.__qualname__


def _qualname(obj: object) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"
