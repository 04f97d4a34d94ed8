"""taxi_top_routes: DEBS 2015 Grand Challenge query 1, as used by the EDRP paper.

parse -> filter by area -> route id from 500 m cells -> count per route over a sliding window
(30 min, sliding 1 min, on drop-off time) -> top 10. The count is Spark's stateful windowed
aggregate; the top 10 of a window is read from those counts (`top_routes`), because Structured
Streaming cannot rank rows within the windows of a streaming aggregate in update mode.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from sparkscale.config import AppConfig
from sparkscale_lab.pipelines.records import TAXI_DATETIME_FORMAT, TAXI_FIELDS, route_of
from sparkscale_lab.pipelines.workloads import PipelineContext, Workload, register_workload

QUERY = "top_routes"
KEY_SEPARATOR = "|"


def route_id(record: Mapping[str, str]) -> str | None:
    """`x1.y1-x2.y2` (DEBS notation, pickup cell to dropoff cell), None outside the grid."""
    route = route_of(record)
    if route is None:
        return None
    (x1, y1), (x2, y2) = route
    return f"{x1}.{y1}-{x2}.{y2}"


def build(ctx: PipelineContext) -> list[Any]:
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType

    taxi = ctx.app.taxi
    trips = ctx.read_input(QUERY, TAXI_FIELDS)
    route_udf = F.udf(lambda *values: route_id(dict(zip(TAXI_FIELDS, values, strict=False))), StringType())
    routed = (
        trips.withColumn("route", route_udf(*[F.col(f) for f in TAXI_FIELDS]))
        .where(F.col("route").isNotNull())  # filter by area: both ends inside the grid
        .withColumn("dropoff_ts", F.to_timestamp("dropoff_datetime", "yyyy-MM-dd HH:mm:ss"))
        .withWatermark("dropoff_ts", f"{taxi.window_minutes} minutes")
    )
    counts = routed.groupBy(
        F.window("dropoff_ts", f"{taxi.window_minutes} minutes", f"{taxi.slide_minutes} minutes"), "route"
    ).count()
    keyed = counts.select(
        F.concat_ws(KEY_SEPARATOR, F.date_format("window.end", "yyyy-MM-dd HH:mm:ss"), "route").alias("key"),
        "count",
    )
    return [ctx.start_keyed(keyed, QUERY, key_column="key", value_column="count")]


def expected_output(records: Iterable[Mapping[str, str]], app: AppConfig) -> dict[str, int]:
    """Counts per (window end, route) computed directly (a plain batch computation) over the trips."""
    window = timedelta(minutes=app.taxi.window_minutes)
    slide = timedelta(minutes=app.taxi.slide_minutes)
    counts: Counter[str] = Counter()
    epoch = datetime(1970, 1, 1)
    for record in records:
        rid = route_id(record)
        if rid is None:
            continue
        t = datetime.strptime(record["dropoff_datetime"], TAXI_DATETIME_FORMAT)
        # Every sliding window [end - window, end) containing t, ends aligned to the slide (as Spark's).
        first_end = epoch + ((t - epoch) // slide + 1) * slide
        end = first_end
        while end - window <= t:
            counts[f"{end.strftime(TAXI_DATETIME_FORMAT)}{KEY_SEPARATOR}{rid}"] += 1
            end += slide
    return dict(counts)


def top_routes(counts: Mapping[str, int], n: int) -> dict[str, list[tuple[str, int]]]:
    """Per window end, its `n` most frequent routes (count descending, then route id for ties)."""
    by_window: dict[str, list[tuple[str, int]]] = {}
    for key, count in counts.items():
        end, route = key.split(KEY_SEPARATOR, 1)
        by_window.setdefault(end, []).append((route, int(count)))
    return {end: sorted(rows, key=lambda r: (-r[1], r[0]))[:n] for end, rows in by_window.items()}


WORKLOAD = Workload(name="taxi_top_routes", query=QUERY, fields=TAXI_FIELDS, build=build,
                    expected_output=expected_output)

register_workload(WORKLOAD)
