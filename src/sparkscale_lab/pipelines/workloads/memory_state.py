"""memory_state: a dedup-style count per record whose state outgrows one executor's memory.

source -> T1 (costs `cost_ms_per_record`, a sleep as the dag's tasks: the high load needs several
executors) -> count per record, keyed by the record's uid padded to `state_bytes_per_record` bytes.
Every record is a new key, so the state store holds one padded key per record ever read and the
state grows with the input: spread over many executors it fits, gathered on few it does not (the
scaling benchmark's memory row, bench.memory_state). The sink gets uid -> count, which is 1 for
every record read exactly once. The two figures come from the app's spark_conf (SPARK_CONF), so a
bench case can size them without a config section of the product's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sparkscale.config import AppConfig
from sparkscale_lab.pipelines.workloads import PipelineContext, Workload, register_workload
from sparkscale_lab.pipelines.workloads.dag import ROW_SCHEMA, cost_task

NAME = "memory_state"
QUERY = "held"
SEPARATOR = "|"  # never in a uid (loadgen: `<run_id>-<seq>`)
STATE_BYTES_CONF = "spark.sparkscale.memoryState.stateBytesPerRecord"
COST_MS_CONF = "spark.sparkscale.memoryState.costMsPerRecord"
DEFAULT_STATE_BYTES = 49152
DEFAULT_COST_MS = 50.0


def build(ctx: PipelineContext) -> list[Any]:
    from pyspark.sql import functions as F

    pad_bytes = int(ctx.spark.conf.get(STATE_BYTES_CONF, str(DEFAULT_STATE_BYTES)))
    cost_ms = float(ctx.spark.conf.get(COST_MS_CONF, str(DEFAULT_COST_MS)))
    source = ctx.read_input(QUERY, ("value", "key")).select("uid", "key", "value")
    costly = source.mapInPandas(cost_task(cost_ms, 1.0, 1), ROW_SCHEMA)
    # The padding is part of the grouping key, so the optimizer cannot prune it: the state holds it.
    held = costly.select(F.concat(F.col("uid"), F.lit(SEPARATOR), F.repeat(F.lit("x"), pad_bytes)).alias("held"))
    counts = held.groupBy("held").count()  # stateful: one padded key per record
    out = counts.select(F.substring_index("held", SEPARATOR, 1).alias("uid"), "count")
    return [ctx.start_keyed(out, QUERY, key_column="uid", value_column="count")]


def expected_output(records: Iterable[Mapping[str, str]], app: AppConfig) -> dict[str, int]:
    """Each record's uid once: every record is its own key, counted once when read exactly once."""
    return {record["uid"]: 1 for record in records}


WORKLOAD = Workload(name=NAME, query=QUERY, fields=("value", "key"), build=build, expected_output=expected_output)

register_workload(WORKLOAD)
