"""wordcount: sentences -> split -> count per word (stateful). The DS2 and N-Storm example."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from sparkscale.config import AppConfig
from sparkscale_lab.pipelines.workloads import PipelineContext, Workload, register_workload

QUERY = "counts"


def build(ctx: PipelineContext) -> list[Any]:
    from pyspark.sql import functions as F

    lines = ctx.read_input(QUERY, ("line",))
    words = lines.select(F.explode(F.split(F.col("line"), " ")).alias("word")).where(F.col("word") != "")
    counts = words.groupBy("word").count()  # stateful: one state partition per shuffle partition
    return [ctx.start_keyed(counts, QUERY, key_column="word", value_column="count")]


def expected_output(records: Iterable[Mapping[str, str]], app: AppConfig) -> dict[str, int]:
    """Words counted directly over the input: what the sink must hold after exactly-once processing."""
    counts: Counter[str] = Counter()
    for record in records:
        counts.update(w for w in record["line"].split(" ") if w)
    return dict(counts)


WORKLOAD = Workload(name="wordcount", query=QUERY, fields=("line",), build=build, expected_output=expected_output)

register_workload(WORKLOAD)
