"""Named registries of plug-ins: policies, actuators, migration strategies, workloads.

One place knows how to find them: the built-in ones are the modules of their package (imported on
the first lookup, each registering what it defines), third-party ones come through an entry-point
group (the usual Python plug-in convention; an entry point loads a module that registers at import,
or an object that the registry's `adopt` takes in). So adding one is one file plus its
registration, and the config checks a name against a registry without importing the components
(the registry imports them by name, on demand: no import cycle between config and them).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import pkgutil
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any, Generic, TypeVar

import structlog

log = structlog.get_logger(__name__)

T = TypeVar("T")


def same_definition(a: object, b: object) -> bool:
    """The same object, or the same class defined again by re-importing its module (test reloads)."""
    if a is b or a == b:
        return True
    return (isinstance(a, type) and isinstance(b, type)
            and (a.__module__, a.__qualname__) == (b.__module__, b.__qualname__))


def describe(obj: object) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', None) or getattr(obj, 'name', obj)}"


class Registry(Generic[T]):
    """`kind` names what it holds in messages; `package` holds the built-ins; `group` is the
    entry-point group; `adopt(obj)` registers what an entry point loads when it is not a module."""

    def __init__(self, kind: str, package: str | None, group: str, adopt: Callable[[object], None] | None = None):
        self.kind = kind
        self.package = package
        self.group = group
        self.adopt = adopt
        self.items: dict[str, T] = {}
        self.loaded = False
        self._builtins_loaded = False
        self._lock = threading.RLock()

    def register(self, name: str, item: T, replace: bool = False) -> T:
        """Make `item` known as `name`; the same item again is harmless, another one is a ValueError
        unless `replace`."""
        if not isinstance(name, str) or not name:
            raise TypeError(f"a {self.kind} needs a non-empty name, got {name!r}")
        with self._lock:
            current = self.items.get(name)
            if current is not None and not replace and not same_definition(current, item):
                raise ValueError(f"a {self.kind} named {name!r} is already registered ({describe(current)}); "
                                 f"{describe(item)} cannot take it")
            self.items[name] = item
        return item

    def get(self, name: str) -> T:
        """The item registered as `name`; a KeyError naming the registered ones otherwise."""
        if name not in self.items:
            self.load()
        found = self.items.get(name)
        if found is None:
            raise KeyError(f"no {self.kind} named {name!r} (registered: {', '.join(self.names()) or 'none'})")
        return found

    def names(self) -> tuple[str, ...]:
        """Every registered name, in registration order (the built-ins first)."""
        self.load()
        with self._lock:
            return tuple(self.items)

    def known_names(self) -> tuple[str, ...]:
        """The registered names plus the names of the group's entry points, without loading those:
        a config names a plug-in (an example workload) and is checked without importing it. The
        convention is that an entry point is named as the item it registers."""
        self.load_builtins()
        entry_names = [entry.name for entry in importlib.metadata.entry_points(group=self.group)]
        with self._lock:
            return tuple(dict.fromkeys([*self.items, *entry_names]))

    def load_builtins(self) -> None:
        """Import every module of the package (not the entry points): cheap and import-safe."""
        if self.package is None or self._builtins_loaded:
            return
        with self._lock:
            if self._builtins_loaded:
                return
            self._builtins_loaded = True
            package = importlib.import_module(self.package)
            for module in pkgutil.iter_modules(package.__path__, f"{self.package}."):
                importlib.import_module(module.name)

    def load(self) -> None:
        """Import every module of the package, then every entry point of the group, once. A plug-in
        that fails to load is logged and left out: it must not take the built-ins down with it."""
        if self.loaded:
            return
        with self._lock:
            if self.loaded:
                return
            self.loaded = True
            self.load_builtins()
            for entry in importlib.metadata.entry_points(group=self.group):
                try:
                    loaded = entry.load()
                    if not isinstance(loaded, ModuleType) and self.adopt is not None:
                        self.adopt(loaded)
                except Exception as exc:  # logged; the rest stay usable
                    log.error("registry.plugin_failed", kind=self.kind, group=self.group, entry_point=entry.name,
                              value=entry.value, error=f"{type(exc).__name__}: {exc}")


def _adopt(registry_name: str) -> Callable[[object], None]:
    """What an entry point loads (a class or object) goes through the component's own register
    function, which checks it (looked up by name: this module imports no component)."""
    module, function = registry_name.rsplit(":", 1)

    def adopt(obj: object) -> None:
        getattr(importlib.import_module(module), function)(obj)

    return adopt


POLICIES: Registry[Any] = Registry("policy", "sparkscale.policies", "sparkscale.policies",
                                   _adopt("sparkscale.policies.base:register_policy"))
ACTUATORS: Registry[Any] = Registry("actuator", "sparkscale.actuators", "sparkscale.actuators",
                                    _adopt("sparkscale.actuators.base:register_actuator"))
STRATEGIES: Registry[Any] = Registry("migration strategy", "sparkscale.actuators.migration",
                                     "sparkscale.migration_strategies",
                                     _adopt("sparkscale.actuators.migration.base:register_strategy"))
# No built-in workloads: the example pipelines are plug-ins of the lab (pyproject's entry points).
WORKLOADS: Registry[Any] = Registry("workload", None, "sparkscale.workloads",
                                    _adopt("sparkscale.apps.workloads:register_workload"))
PLACEMENT_POLICIES: Registry[Any] = Registry("placement policy", "sparkscale.policies.placement",
                                             "sparkscale.placement_policies",
                                             _adopt("sparkscale.policies.placement.base:register_placement"))
