"""dag: the Linear, Diamond and Star micro-DAGs of Shukla and Simmhan (Sec. 5, Fig. 4), on Spark.

Five user tasks each, besides the source and the sink:
  linear:  T1 -> T2 -> T3 -> T4 -> T5(stateful)
  diamond: T1 -> {T2, T3, T4} -> T5(stateful)            (fan-out copies every record to each branch)
  star:    {T1, T2} -> T3(stateful hub) -> {T4, T5}       (hub-and-spoke; the out-spokes split by key)
Stateless tasks cost `cost_ms_per_record` each (a sleep, so no CPU: scaling past 2 physical cores is
real) and emit `selectivity` records per record in; the stateful task counts records per key.
A repartition between stateless tasks makes each one its own Spark stage, i.e. its own operator for
DS2 (an operator is a Spark stage: monitors/snapshot_builder.py), with the query's shuffle partitions as instances.
"""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from sparkscale.config import AppConfig
from sparkscale_lab.pipelines.workloads import PipelineContext, Workload, register_workload

QUERY = "dag"
ROW_SCHEMA = "uid string, key string, value string"


def copies(uid: str, selectivity: float, task: int) -> int:
    """Records task `task` emits for record `uid`: deterministic, so the verifier can predict them."""
    whole = int(selectivity)
    fraction = selectivity - whole
    if fraction == 0:
        return whole
    draw = zlib.crc32(f"{task}:{uid}".encode()) / 2**32
    return whole + (1 if draw < fraction else 0)


def cost_task(cost_ms: float, selectivity: float, task: int) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """A stateless task for mapInPandas: sleeps `cost_ms` per record, applies the selectivity."""

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import time

        for frame in batches:
            if len(frame) and cost_ms > 0:
                time.sleep(len(frame) * cost_ms / 1000.0)  # one sleep per Arrow batch = n x cost
            if selectivity != 1.0 and len(frame):
                repeats = frame["uid"].map(lambda uid: copies(uid, selectivity, task))
                yield frame.loc[frame.index.repeat(repeats)]
            else:
                yield frame

    return run


def build(ctx: PipelineContext) -> list[Any]:
    from pyspark.sql import functions as F

    dag = ctx.app.dag
    # Hash-repartitioned without a count: each stage gets the query's shuffle partitions, which a
    # restart takes from the checkpoint, so a migration changes them all (not only the state's).
    uid = F.col("uid")

    def task(df: Any, number: int, selectivity: float | None = None) -> Any:
        sel = dag.selectivity if selectivity is None else selectivity
        return df.mapInPandas(cost_task(dag.cost_ms_per_record, sel, number), ROW_SCHEMA)

    source = ctx.read_input(QUERY, ("value", "key")).select("uid", "key", "value")
    if dag.shape == "linear":
        t1 = task(source, 1).repartition(uid)
        t2 = task(t1, 2).repartition(uid)
        t3 = task(t2, 3).repartition(uid)
        t4 = task(t3, 4)
        out = t4.groupBy("key").count()  # T5, stateful
    elif dag.shape == "diamond":
        t1 = task(source, 1).repartition(uid)
        fanned = task(t1, 2).unionAll(task(t1, 3)).unionAll(task(t1, 4))
        out = fanned.groupBy("key").count()  # T5, stateful fan-in
    else:  # star
        spokes_in = task(source, 1).unionAll(task(source, 2)).repartition(uid)
        hub = spokes_in.groupBy("key").count()  # T3, the stateful hub
        as_rows = hub.select(F.col("key").alias("uid"), "key", F.col("count").cast("string").alias("value"))
        even = F.col("key").cast("int") % 2 == 0
        t4 = task(as_rows.where(even), 4, selectivity=1.0)
        t5 = task(as_rows.where(~even), 5, selectivity=1.0)
        out = t4.unionAll(t5).select("key", F.col("value").cast("long").alias("count"))
    return [ctx.start_keyed(out, QUERY, key_column="key", value_column="count")]


def expected_output(records: Iterable[Mapping[str, str]], app: AppConfig) -> dict[str, int]:
    """Count per key the stateful task must reach after every record was processed exactly once."""
    s = app.dag.selectivity
    counts: Counter[str] = Counter()
    for record in records:
        uid = record["uid"]
        if app.dag.shape == "linear":
            n = copies(uid, s, 1) * copies(uid, s, 2) * copies(uid, s, 3) * copies(uid, s, 4)
        elif app.dag.shape == "diamond":
            n = copies(uid, s, 1) * (copies(uid, s, 2) + copies(uid, s, 3) + copies(uid, s, 4))
        else:
            n = copies(uid, s, 1) + copies(uid, s, 2)
        if n:
            counts[record["key"]] += n
    return dict(counts)


WORKLOAD = Workload(name="dag", query=QUERY, fields=("value", "key"), build=build, expected_output=expected_output)

register_workload(WORKLOAD)
