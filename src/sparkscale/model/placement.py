"""Where an app's executors run, by standalone worker: a snapshot's `extensions["cluster"]`. Pure.

The monitor writes it (`monitors/cluster_view.py`, from the master's and the workers' `/json/`),
the spread rule reads it (`policies/spread.py`), and a snapshot file's is checked whole when the
file is read (`model/snapshot.py`), so the rule never meets a malformed one. It lives here, outside both
packages, because policies may not import monitors.

Only ALIVE workers whose own `/json/` answered are in `workers`; those that did not are named in
`unreachable` (their executors are unknown, so the spread cannot be judged). `error` says why there
is no view at all (the master did not answer).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import JsonValue

from sparkscale.model.fields import (
    FieldError,
    get,
    integer,
    join,
    list_at,
    object_at,
    optional_integer,
    optional_string,
    string,
)

MAX_CORES = 1_000_000
MAX_MEMORY_MB = 1 << 40


class FreeRoom:
    """What is left of a worker: its cores and memory less what its executors use (a mixin for the
    dataclasses with `cores`, `cores_used`, `memory_mb`, `memory_used_mb`)."""

    cores: int
    cores_used: int
    memory_mb: int
    memory_used_mb: int

    @property
    def cores_free(self) -> int:
        return max(self.cores - self.cores_used, 0)

    @property
    def memory_free_mb(self) -> int:
        return max(self.memory_mb - self.memory_used_mb, 0)


@dataclass(frozen=True)
class WorkerSlots:
    """One ALIVE worker: what it has free, and which of the app's executors run on it."""

    id: str
    host: str
    cores_free: int
    memory_free_mb: int
    executors: tuple[str, ...] = ()
    cores: int = 0  # the worker's own; 0: unknown (a snapshot from before they were recorded)
    memory_mb: int = 0

    def has_room(self, cores: int, memory_mb: int) -> bool:
        """Could the master launch one more executor of this shape here?"""
        return self.cores_free >= cores and self.memory_free_mb >= memory_mb

    def to_dict(self) -> dict[str, JsonValue]:
        return {"id": self.id, "host": self.host, "cores_free": self.cores_free,
                "memory_free_mb": self.memory_free_mb, "executors": list(self.executors), "cores": self.cores,
                "memory_mb": self.memory_mb}


@dataclass(frozen=True)
class Placement:
    """The app's executors per ALIVE worker (module docstring)."""

    app_id: str
    workers: tuple[WorkerSlots, ...] = ()
    unreachable: tuple[str, ...] = ()
    executor_memory_mb: int = 0  # the app's executors' memory (the largest seen); 0: unknown
    error: str | None = None

    def worker_of(self) -> dict[str, str]:
        """Executor id -> the id of the worker it runs on."""
        return {e: w.id for w in self.workers for e in w.executors}

    def to_extension(self) -> dict[str, JsonValue]:
        out: dict[str, Any] = {"app_id": self.app_id, "workers": [w.to_dict() for w in self.workers],
                               "unreachable": list(self.unreachable), "executor_memory_mb": self.executor_memory_mb}
        if self.error is not None:
            out["error"] = self.error
        return out

    @classmethod
    def from_extension(cls, value: object, path: str = "extensions.cluster") -> Placement:
        """Read one back; FieldError names the field. Keys it does not know (the monitor's request
        count) are ignored."""
        obj = object_at(value, path)
        workers = []
        workers_path = join(path, "workers")
        for i, item in enumerate(list_at(obj.get("workers", []), workers_path)):
            at = f"{workers_path}[{i}]"
            worker = object_at(item, at)
            executors = list_at(worker.get("executors", []), join(at, "executors"))
            workers.append(WorkerSlots(
                id=string(get(worker, "id", at), join(at, "id")),
                host=optional_string(worker.get("host"), join(at, "host")) or "",
                cores_free=integer(get(worker, "cores_free", at), join(at, "cores_free"), 0, MAX_CORES),
                memory_free_mb=integer(get(worker, "memory_free_mb", at), join(at, "memory_free_mb"), 0,
                                       MAX_MEMORY_MB),
                executors=tuple(string(e, f"{join(at, 'executors')}[{k}]") for k, e in enumerate(executors)),
                cores=optional_integer(worker.get("cores"), join(at, "cores"), 0, MAX_CORES) or 0,
                memory_mb=optional_integer(worker.get("memory_mb"), join(at, "memory_mb"), 0, MAX_MEMORY_MB) or 0,
            ))
        _check_workers(workers, workers_path)
        seen: dict[str, str] = {}
        for i, slots in enumerate(workers):
            for executor in slots.executors:
                if executor in seen:
                    raise FieldError(f"{workers_path}[{i}].executors", f"executor {executor!r} is also on worker "
                                     f"{seen[executor]!r}")
                seen[executor] = slots.id
        unreachable_path = join(path, "unreachable")
        unreachable = tuple(string(w, f"{unreachable_path}[{i}]")
                            for i, w in enumerate(list_at(obj.get("unreachable", []), unreachable_path)))
        return cls(
            app_id=optional_string(obj.get("app_id"), join(path, "app_id")) or "",
            workers=tuple(workers), unreachable=unreachable,
            executor_memory_mb=optional_integer(obj.get("executor_memory_mb"), join(path, "executor_memory_mb"), 0,
                                                MAX_MEMORY_MB) or 0,
            error=optional_string(obj.get("error"), join(path, "error")),
        )


def _check_workers(workers: list[WorkerSlots], path: str) -> None:
    """Each worker once, with no more free than it has (issue 32: `cluster-plan` took duplicate ids
    and `cores_free` above `cores`, and planned on a cluster that cannot be); FieldError naming it."""
    first: dict[str, int] = {}
    for i, w in enumerate(workers):
        at = f"{path}[{i}]"
        if w.id in first:
            raise FieldError(join(at, "id"), f"worker {w.id!r} appears twice (also workers[{first[w.id]}])")
        first[w.id] = i
        if w.cores and w.cores_free > w.cores:
            raise FieldError(join(at, "cores_free"), f"{w.cores_free} free cores on worker {w.id!r}, which has "
                             f"{w.cores} cores")
        if w.memory_mb and w.memory_free_mb > w.memory_mb:
            raise FieldError(join(at, "memory_free_mb"), f"{w.memory_free_mb} MB free on worker {w.id!r}, which "
                             f"has {w.memory_mb} MB")


def executor_order(executor_id: str) -> tuple[int, str]:
    """Spark numbers executors 0, 1, 2, ... in launch order: sort numerically (newest last)."""
    return (int(executor_id), "") if executor_id.isdigit() else (-1, executor_id)


def placement_of(extensions: Mapping[str, JsonValue]) -> Placement | None:
    """The snapshot extensions' placement, None when the monitor took none (`loop.cluster_view` off)."""
    value = extensions.get("cluster")
    return None if value is None else Placement.from_extension(value)
