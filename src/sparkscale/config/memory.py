"""Memory settings: the guards' (`guards.max_state_memory_fraction`, `guards.gc_time_fraction_max`)
and the executor memory recommendation's (`policy.memory`). Every one off by default, so that a config
without them decides as before (policies/memory_guard.py, gc_guard.py, memory.py)."""

from __future__ import annotations

from pydantic import Field

from sparkscale.config.base import ConfigSection

# The largest executor memory a shape may have (model/executor_shape.py's MAX_EXECUTOR_MEMORY_MB;
# not imported: model/executor_shape.py imports the config package).
MAX_EXECUTOR_MEMORY_MB = 1 << 22


class MemoryGuardsConfig(ConfigSection):
    """The memory guards' settings, keys of `guards` itself (GuardsConfig derives from this)."""

    # Refuse a scale-down after which the stateful operators' memory per executor (state memory /
    # executors after) would exceed this fraction of one executor's memory (executor_memory_mb).
    # Null, the default: no such guard (policies/memory_guard.py).
    max_state_memory_fraction: float | None = Field(None, gt=0, le=1)
    # When GC took more than this fraction of the executors' task run time in the window, a scale-up
    # is held and a warning recommends more executor memory instead (policies/gc_guard.py). Null,
    # the default: no such guard.
    gc_time_fraction_max: float | None = Field(None, gt=0, lt=1)


class MemoryPolicyConfig(ConfigSection):
    """`policy.memory`: a recommended `executor_memory_mb` from the executors' JVM heap peaks
    (policies/memory.py), shown in the explanation and the plan's observation figures, and, with
    `apply`, set through a restart of the whole app (policies/memory_apply.py). Off by default."""

    recommend: bool = False
    # The heap peak should be at most this fraction of the executor memory: recommended = peak / it.
    target_heap_fraction: float = Field(0.7, gt=0, le=1)
    # The recommendation never goes above this (nor below 256, AppConfig's least executor_memory_mb).
    max_executor_memory_mb: int = Field(16384, ge=256, le=MAX_EXECUTOR_MEMORY_MB)
    # Carry out the recommendation (this one's, and the GC guard's: guards.gc_time_fraction_max) as
    # a set_executor_memory action: spark.executor.memory set by a restart of the whole app.
    apply: bool = False
    # Only a change of at least both of these is proposed: a fraction of the current memory, and MB.
    min_change_fraction: float = Field(0.25, ge=0, le=10)
    min_change_mb: int = Field(256, ge=0, le=MAX_EXECUTOR_MEMORY_MB)
    # A proposed memory the executors still do not have (the restart was refused or failed, or the app
    # only advises) is not proposed again for this long. At most the hour of decisions the daemon
    # keeps (control/autoscaler.py's HISTORY_S).
    retry_after_s: float = Field(1800.0, gt=0, le=3600)
