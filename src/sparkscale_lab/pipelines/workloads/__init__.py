"""The example workloads a managed app can run (`apps[].pipeline`), as plug-ins of the product.

Each workload module defines `build(ctx) -> list[StreamingQuery]` (run in the driver) and
`expected_output(records, app) -> dict[str, int]` (pure: what its keyed sink must hold once every
record was processed exactly once; the verifier's oracle), and ends with `register_workload(WORKLOAD)`.
The product knows them through the entry-point group `sparkscale.workloads` (pyproject.toml), one
entry per module named as its workload; what it reads of one is `sparkscale.apps.workloads.Workload`
(name, query, and the driver script: `shipped_job.py` for these).

Importing this package, and `workload()` / `registered_workloads()`, never import PySpark: the
head-node daemon and the verifier look workloads up too. PySpark is imported by `build` only, and by
the `PipelineContext` methods it calls.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkscale.apps import workloads as product
from sparkscale.protocol.sinks import SinkTarget
from sparkscale.redisconn import auth_as

SHIPPED_JOB = Path(__file__).resolve().parent.parent / "shipped_job.py"

if TYPE_CHECKING:
    # Annotations only: the workload modules are imported by the registry while the config
    # validates an app's `pipeline`.
    from sparkscale.config import AppConfig, Config



@dataclass(frozen=True)
class PipelineContext:
    """What a workload needs to build its queries: the session, its config, where checkpoints go."""

    spark: Any
    cfg: Config
    app: AppConfig
    checkpoint_root: Path

    def checkpoint(self, query: str) -> str:
        return str(self.checkpoint_root / query)

    def read_input(self, query: str, fields: Iterable[str]) -> Any:
        """The app's input streams as a streaming DataFrame (uid, ts, partition, entry_id, fields...)."""
        from sparkscale_lab.pipelines.redis_source import read_stream
        from sparkscale_lab.pipelines.redis_source_options import RedisStreamsOptions

        redis_cfg = self.cfg.redis
        return read_stream(
            self.spark,
            RedisStreamsOptions(
                app=self.app.name, query=query, partitions=self.app.source_partitions, fields=tuple(fields),
                host=redis_cfg.host, port=redis_cfg.port, db=redis_cfg.db, prefix=redis_cfg.key_prefix,
                max_records_per_batch=self.app.max_records_per_batch, auth=auth_as(self.cfg),
            ),
        )

    def sink_target(self, query: str) -> SinkTarget:
        r = self.cfg.redis
        return SinkTarget(app=self.app.name, query=query, host=r.host, port=r.port, db=r.db, prefix=r.key_prefix,
                          auth=auth_as(self.cfg))

    def start_keyed(self, df: Any, query: str, key_column: str, value_column: str) -> Any:
        """Start `df` (an aggregate) into the keyed sink under `query`, on the app's trigger."""
        from sparkscale_lab.pipelines.sinks import keyed_sink

        writer = keyed_sink(df, self.sink_target(query), self.checkpoint(query), "update",
                            key_column=key_column, value_column=value_column)
        return writer.trigger(processingTime=f"{self.app.trigger_interval_s} seconds").start()


@dataclass(frozen=True)
class Workload:
    name: str
    query: str  # the query whose keyed sink holds the workload's result
    fields: tuple[str, ...]
    build: Callable[[PipelineContext], list[Any]]
    expected_output: Callable[[Iterable[Mapping[str, str]], AppConfig], dict[str, int]]
    script: str = str(SHIPPED_JOB)  # what the driver runs for it (agent/bootstrap.py)


# -- the registry -----------------------------------------------------------------------------------

def register_workload(w: Workload) -> Workload:
    """Make `w` known under `w.name` (the product's registry). Registering the same workload again
    is a no-op; a different workload under a taken name is a ValueError."""
    product.register_workload(w)
    return w


registered_workloads = product.registered_workloads


def workload(name: str | None) -> Workload:
    """The lab's workload `name`, with its build and oracle (a plug-in of someone else's is refused).
    None is an app's `pipeline` when it runs its own script: it has no workload."""
    if name is None:
        raise KeyError("no workload named None: the app runs its own script")
    found = product.workload(name)
    if not isinstance(found, Workload):
        raise KeyError(f"workload {name!r} is not one of the lab's (it has no build and expected_output)")
    return found


def build_workload(ctx: PipelineContext) -> list[Any]:
    return workload(ctx.app.pipeline).build(ctx)
