"""An executor shape (cores and memory), the record the shape store keeps (store/redis_shapes.py)."""

from __future__ import annotations

from dataclasses import dataclass

from sparkscale.config.apps import MAX_EXECUTOR_CORES

# A shape read from the store (or asked for) is bounded: far beyond any executor's JVM (4 TiB), yet
# a shape above it is one no spark-submit could start, and every later submit would carry it.
MAX_EXECUTOR_MEMORY_MB = 1 << 22
SHAPE_BOUNDS = {"executor_cores": MAX_EXECUTOR_CORES, "executor_memory_mb": MAX_EXECUTOR_MEMORY_MB}


@dataclass(frozen=True)
class ExecutorShape:
    """Cores and memory of each executor. Spark fixes both for an application's life, so a new
    shape takes a whole-application restart (a migration with a shape, actuators/migration/runner.py);
    the shape it set is kept in Redis and outlives the config's, for every later submit."""

    executor_cores: int
    executor_memory_mb: int

    def describe(self) -> str:
        return f"{self.executor_cores} core(s), {self.executor_memory_mb} MiB"
