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
    (policies/memory.py), shown in the explanation and the plan's observation figures. Off by default."""

    recommend: bool = Field(False, description=(
        "Recommend spark.executor.memory from the executors' JVM heap peaks (peak / target_heap_fraction, "
        "rounded up to 256 MB), in the plan's explanation and figures."))
    target_heap_fraction: float = Field(0.7, gt=0, le=1, description=(
        "The heap peak should be at most this fraction of the executor memory."))
    max_executor_memory_mb: int = Field(16384, ge=256, le=MAX_EXECUTOR_MEMORY_MB, description=(
        "The recommendation never goes above this many MB (nor below 256, the least executor_memory_mb)."))
