"""An app's memory and GC figures as a snapshot's extensions carry them, typed. Pure.

The monitor writes them (monitors/executor_figures.py: `extensions["app"]`; the state-store memory
of each query's latest progress report, monitors/progress_reports.py: `extensions["progress"]`, or
per query under a merged snapshot's `extensions["queries"]`). A snapshot from an older monitor has
none of them: every figure is then None, "not measured", and the memory guards and the
recommendation (policies/memory_guard.py, gc_guard.py, memory.py) hold nothing back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sparkscale.model.fields import join, object_at, optional_integer, optional_number

MAX_BYTES = 1 << 60  # far beyond any executor's memory, yet exact in a float
MIB = 1 << 20  # Spark's "m" of spark.executor.memory (executor_memory_mb) is a mebibyte


@dataclass(frozen=True)
class MemoryFigures:
    """Executor heap, storage and state-store memory, and GC over the window; None: not measured."""

    heap_used_bytes: int | None = None  # the highest JVM heap peak of one executor (peakMemoryMetrics)
    heap_max_bytes: int | None = None  # the JVM's -Xmx: Spark's REST API does not report it
    storage_used_bytes: int | None = None  # storage memory, over all executors
    storage_total_bytes: int | None = None
    state_memory_bytes: int | None = None  # stateOperators[].memoryUsedBytes summed, every query's latest
    gc_time_fraction: float | None = None  # GC time / executor task run time in the window, in [0, 1]

    @classmethod
    def of(cls, extensions: Mapping[str, Any], path: str = "") -> MemoryFigures:
        """The figures of a snapshot's `extensions`; a FieldError names a malformed one."""
        app = object_at(extensions.get("app") or {}, join(path, "app"))

        def size(key: str) -> int | None:
            return optional_integer(app.get(key), join(join(path, "app"), key), 0, MAX_BYTES)

        return cls(
            heap_used_bytes=size("heap_used_bytes"), heap_max_bytes=size("heap_max_bytes"),
            storage_used_bytes=size("storage_used_bytes"), storage_total_bytes=size("storage_total_bytes"),
            state_memory_bytes=_state_memory(extensions, path),
            gc_time_fraction=optional_number(app.get("gc_time_fraction"), join(join(path, "app"), "gc_time_fraction"),
                                             0, 1),
        )


def _state_memory(extensions: Mapping[str, Any], path: str) -> int | None:
    """The state memory of every query (a merged snapshot's `queries`, else its own `progress`)
    summed; None when no query reported one."""
    queries = extensions.get("queries")
    if isinstance(queries, Mapping) and queries:
        scopes = [(join(join(path, "queries"), str(name)), ext) for name, ext in queries.items()]
    else:
        scopes = [(path, extensions)]
    values = []
    for where, ext in scopes:
        at = join(where, "progress")
        progress = object_at(object_at(ext, where).get("progress") or {}, at)
        value = optional_integer(progress.get("state_memory_bytes"), join(at, "state_memory_bytes"), 0, MAX_BYTES)
        if value is not None:
            values.append(value)
    return sum(values) if values else None
