"""What a policy is and how the daemon finds one by name.

A policy is a pure function of (snapshot, decision history, config) to a plan: no I/O, no clock,
no randomness, so that `sparkscale plan SNAPSHOT` offline gives the decision the daemon would make.

To add a policy: write a class with a `name`, a `decide` method and, if it has settings, a
`config_model` (a pydantic model: its section `policy.<name>` of the config file), decorate it with
`@register_policy`, and put it in `sparkscale.policies.<name>` (then `get_policy(name)` finds it
without any other change), or in any module named by an entry point of the group
`sparkscale.policies` (the usual plug-in convention: a third-party package declares
`[project.entry-points."sparkscale.policies"] mine = "mypkg.mypolicy"`), or import its module before
calling `get_policy`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel

from sparkscale.model.plan import Plan
from sparkscale.model.snapshot import Snapshot
from sparkscale.policies.history import DecisionHistory
from sparkscale.registry import POLICIES

if TYPE_CHECKING:
    from sparkscale.config import AppConfig, PolicyConfig



@runtime_checkable
class Policy(Protocol):
    """The interface a scaling policy implements."""

    name: ClassVar[str]
    # Optional: the pydantic model of the policy's config section `policy.<name>` (None: no settings).
    config_model: ClassVar[type[BaseModel] | None] = None

    def decide(self, snapshot: Snapshot, history: DecisionHistory, cfg: PolicyConfig, app: AppConfig) -> Plan:
        """The plan for `snapshot`. Pure: no I/O; the same inputs give the same plan."""
        ...


PolicyFactory = Callable[[], Policy]
P = TypeVar("P", bound=type)


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
        registered: P = POLICIES.register(name, klass, replace=replace)
        return registered

    return add(cls) if cls is not None else add


def get_policy(name: str) -> Policy:
    """A fresh instance of the policy registered as `name`."""
    return policy_class(name)()


def policy_class(name: str) -> PolicyFactory:
    """The class registered as `name` (built-in modules and plug-ins are imported on demand)."""
    factory: PolicyFactory = POLICIES.get(name)
    return factory


def registered_policies() -> tuple[str, ...]:
    return tuple(sorted(POLICIES.names()))
