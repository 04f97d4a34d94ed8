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

    # policies/memory_guard.py
    max_state_memory_fraction: float | None = Field(None, gt=0, le=1, examples=[0.5], description=(
        "Hold a scale-down after which the stateful operators' memory per executor (state memory / executors "
        "after) would exceed this fraction of one executor's memory (executor_memory_mb); null = off."))
    # policies/gc_guard.py
    gc_time_fraction_max: float | None = Field(None, gt=0, lt=1, examples=[0.2], description=(
        "When GC took more than this fraction of the executors' task run time in the window, hold a scale-up "
        "and warn recommending more executor memory instead; null = off."))


class MemoryPolicyConfig(ConfigSection):
    """`policy.memory`: a recommended `executor_memory_mb` from the executors' JVM heap peaks
    (policies/memory.py), shown in the explanation and the plan's observation figures, and, with
    `apply`, set through a restart of the whole app (policies/memory_apply.py). Off by default."""

    recommend: bool = Field(False, description=(
        "Recommend spark.executor.memory from the executors' JVM heap peaks (peak / target_heap_fraction, "
        "rounded up to 256 MB), in the plan's explanation and figures."))
    target_heap_fraction: float = Field(0.7, gt=0, le=1, description=(
        "The heap peak should be at most this fraction of the executor memory."))
    max_executor_memory_mb: int = Field(16384, ge=256, le=MAX_EXECUTOR_MEMORY_MB, description=(
        "The recommendation never goes above this many MB (nor below 256, the least executor_memory_mb)."))
    apply: bool = Field(False, description=(
        "Carry out the recommendation (this one's, and the GC guard's: guards.gc_time_fraction_max) as a "
        "set_executor_memory action: spark.executor.memory set by a restart of the whole app, with every "
        "check of `sparkscale migrate --executor-memory-mb` (refused for a source that does not replay)."))
    min_change_fraction: float = Field(0.25, ge=0, le=10, description=(
        "Only a change of at least this fraction of the current executor memory is proposed (and of at "
        "least min_change_mb)."))
    min_change_mb: int = Field(256, ge=0, le=MAX_EXECUTOR_MEMORY_MB, description=(
        "Only a change of at least this many MB is proposed (and of at least min_change_fraction)."))
    # At most the hour of decisions the daemon keeps (control/autoscaler.py's HISTORY_S).
    retry_after_s: float = Field(1800.0, gt=0, le=3600, description=(
        "A proposed memory the executors still do not have (the restart was refused or failed, or the app "
        "only advises) is not proposed again for this many seconds."))
