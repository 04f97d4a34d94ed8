"""The contract of a packaged example job that a config names in `apps[].pipeline` instead of a
script of its own.

sparkscale ships none: the example pipelines are plug-ins (the lab's, or anyone's) that join the
entry-point group `sparkscale.workloads`, named as the workload they register. The product needs
three things of one: its name, the query whose output is the app's result (`migrate` defaults to
it), and the driver script that runs it (`agent/bootstrap.py` runs it as it runs an operator's own
script, with `--app`, `--config` and `--set`). Looking a name up for the config never loads the
plug-in (`Registry.known_names`); running it does.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from sparkscale.registry import WORKLOADS


@runtime_checkable
class Workload(Protocol):
    """What the product reads of a workload plug-in."""

    @property
    def name(self) -> str: ...

    @property
    def query(self) -> str: ...

    @property
    def script(self) -> str: ...


def register_workload(w: Workload) -> Workload:
    """Make `w` known under `w.name`. Registering the same workload again is a no-op; a different
    workload under a taken name is a ValueError; an object without name, query and script is a
    TypeError."""
    if not isinstance(w, Workload):
        raise TypeError(f"a workload needs name, query and script, got {w!r}")
    registered: Workload = WORKLOADS.register(w.name, w)
    return registered


def registered_workloads() -> tuple[str, ...]:
    """The names of every known workload, sorted (plug-ins are listed without being loaded)."""
    return tuple(sorted(WORKLOADS.known_names()))


def workload(name: str) -> Workload:
    """The workload registered as `name` (its plug-in is loaded); KeyError naming the known ones."""
    try:
        found: Workload = WORKLOADS.get(name)
    except KeyError:
        raise KeyError(f"no workload named {name!r} (known: {', '.join(registered_workloads())})") from None
    return found
