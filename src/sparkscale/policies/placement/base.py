"""What a placement policy is and how the daemon finds one by name.

Unlike a scaling policy (one app, one snapshot), a placement policy sees every managed app on the
cluster at once (`ClusterModel`) and returns one `PlacementPlan` for all of them. It is pure: no
I/O, no clock, so `sparkscale cluster-plan MODEL.json` offline gives the daemon's decision.

To add one: a class with a `name`, a `place` method and, if it has settings, a `config_model` (a
pydantic model: the section `placement.<name>` of the config file), decorated with
`@register_placement`, in `sparkscale.policies.placement.<name>` or a module named by an entry point
of the group `sparkscale.placement_policies`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel

from sparkscale.policies.placement.model import ClusterModel, PlacementPlan
from sparkscale.registry import PLACEMENT_POLICIES


@runtime_checkable
class PlacementPolicy(Protocol):
    name: ClassVar[str]
    config_model: ClassVar[type[BaseModel] | None] = None  # pydantic model of `placement.<name>`; None: no settings

    def place(self, model: ClusterModel, settings: BaseModel | None) -> PlacementPlan:
        """The plan for `model` under `settings` (an instance of `config_model`, or None)."""
        ...


P = TypeVar("P", bound=type)
S = TypeVar("S", bound=BaseModel)


def settings_as(settings: BaseModel | None, model: type[S]) -> S:
    """A policy's `settings` as its `config_model` (its defaults when None); a TypeError for another
    model's (the config validates each section with its policy's model: only a caller's mistake)."""
    if settings is None:
        return model()
    if not isinstance(settings, model):
        raise TypeError(f"expected {model.__name__} settings, got {type(settings).__name__}")
    return settings


def register_placement(cls: P | None = None, *, replace: bool = False) -> P | Callable[[P], P]:
    """Class decorator: make `cls` available as `get_placement(cls.name)`."""

    def add(klass: P) -> P:
        name = getattr(klass, "name", None)
        if not isinstance(name, str) or not name:
            raise TypeError(f"{klass.__qualname__} has no `name` (a non-empty str class attribute)")
        if not callable(getattr(klass, "place", None)):
            raise TypeError(f"{klass.__qualname__} has no `place` method")
        registered: P = PLACEMENT_POLICIES.register(name, klass, replace=replace)
        return registered

    return add(cls) if cls is not None else add


def get_placement(name: str) -> PlacementPolicy:
    """A fresh instance of the placement policy registered as `name`."""
    policy: PlacementPolicy = PLACEMENT_POLICIES.get(name)()
    return policy


def registered_placements() -> tuple[str, ...]:
    return tuple(sorted(PLACEMENT_POLICIES.names()))


def default_settings(name: str) -> BaseModel | None:
    """The policy's settings with every default (None when it has none)."""
    model = getattr(PLACEMENT_POLICIES.get(name), "config_model", None)
    return None if model is None else model()
