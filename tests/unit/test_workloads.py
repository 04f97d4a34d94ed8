"""The workloads' oracles (what a sink must hold after exactly-once processing) and the dag task."""

from __future__ import annotations

from statistics import mean

import pandas as pd
import pytest

from sparkscale.config import AppConfig
from sparkscale_lab.pipelines.records import cell_centre
from sparkscale_lab.pipelines.workloads import dag, taxi, wordcount, workload


def test_registry_knows_every_pipeline_and_refuses_others():
    names = ("wordcount", "dag", "taxi_top_routes")
    assert tuple(workload(n).name for n in names) == names
    with pytest.raises(KeyError, match="no workload named 'nope'"):
        workload("nope")


def test_wordcount_oracle_counts_words():
    app = AppConfig(name="w")
    assert wordcount.expected_output([{"line": "a b a"}, {"line": "b  c"}], app) == {"a": 2, "b": 2, "c": 1}


def test_dag_copies_are_deterministic_and_average_the_selectivity():
    uids = [f"run-{i}" for i in range(4000)]
    assert all(dag.copies(u, 1.0, 1) == 1 for u in uids[:50])
    assert all(dag.copies(u, 2.0, 3) == 2 for u in uids[:50])
    draws = [dag.copies(u, 1.5, 2) for u in uids]
    assert set(draws) == {1, 2}
    assert mean(draws) == pytest.approx(1.5, abs=0.05)
    assert draws == [dag.copies(u, 1.5, 2) for u in uids]  # same uid, same task: same answer
    assert mean(dag.copies(u, 0.25, 1) for u in uids) == pytest.approx(0.25, abs=0.05)


@pytest.mark.parametrize(("shape", "per_record"), [("linear", 1), ("diamond", 3), ("star", 2)])
def test_dag_oracle_follows_the_shape(shape, per_record):
    app = AppConfig(name="d", pipeline="dag", dag={"shape": shape, "selectivity": 1.0})
    records = [{"uid": f"r-{i}", "key": str(i % 3), "value": "1"} for i in range(9)]
    assert dag.expected_output(records, app) == {"0": 3 * per_record, "1": 3 * per_record, "2": 3 * per_record}


def test_dag_task_repeats_rows_by_selectivity():
    frame = pd.DataFrame({"uid": [f"u{i}" for i in range(200)], "key": ["k"] * 200, "value": ["1"] * 200})
    [out] = list(dag.cost_task(0.0, 1.5, task=1)([frame]))
    assert len(out) == sum(dag.copies(f"u{i}", 1.5, 1) for i in range(200))
    [same] = list(dag.cost_task(0.0, 1.0, task=1)([frame]))
    assert same.equals(frame)


def trip(dropoff: str, pickup_cell=(150, 160), dropoff_cell=(151, 161)) -> dict[str, str]:
    (plon, plat), (dlon, dlat) = cell_centre(pickup_cell), cell_centre(dropoff_cell)
    return {"pickup_longitude": str(plon), "pickup_latitude": str(plat), "dropoff_longitude": str(dlon),
            "dropoff_latitude": str(dlat), "dropoff_datetime": dropoff, "uid": "x"}


def test_taxi_oracle_counts_a_trip_in_every_sliding_window_that_contains_it():
    app = AppConfig(name="t", pipeline="taxi_top_routes")  # 30 min windows sliding by 1 min
    counts = taxi.expected_output([trip("2013-01-01 00:10:30")], app)
    ends = sorted(k.split("|")[0] for k in counts)
    assert len(ends) == 30
    assert ends[0] == "2013-01-01 00:11:00" and ends[-1] == "2013-01-01 00:40:00"
    assert {k.split("|")[1] for k in counts} == {"150.160-151.161"}


def test_taxi_oracle_window_boundaries_are_start_inclusive():
    app = AppConfig(name="t", pipeline="taxi_top_routes", taxi={"window_minutes": 2, "slide_minutes": 1})
    counts = taxi.expected_output([trip("2013-01-01 00:10:00")], app)
    # [00:09, 00:11) and [00:10, 00:12) contain 00:10:00; [00:08, 00:10) does not.
    assert sorted(k.split("|")[0] for k in counts) == ["2013-01-01 00:11:00", "2013-01-01 00:12:00"]


def test_taxi_oracle_drops_trips_outside_the_grid():
    app = AppConfig(name="t", pipeline="taxi_top_routes")
    outside = trip("2013-01-01 00:10:30")
    outside["pickup_longitude"] = "-80.0"
    assert taxi.expected_output([outside], app) == {}


def test_top_routes_orders_by_count_then_route():
    counts = {"e1|b": 3, "e1|a": 3, "e1|c": 5, "e1|d": 1, "e2|a": 1}
    assert taxi.top_routes(counts, 3) == {"e1": [("c", 5), ("a", 3), ("b", 3)], "e2": [("a", 1)]}
