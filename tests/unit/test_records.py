"""Record sources: determinism, payload shapes, and the DEBS grid mapping shared with the oracle."""

from __future__ import annotations

import math
import re
from collections import Counter
from datetime import datetime

import pytest

from sparkscale.config import AppConfig
from sparkscale_lab.pipelines.records import (
    CELL_LAT_DEG,
    CELL_LON_DEG,
    GRID_CELL1_LAT,
    GRID_CELL1_LON,
    GRID_EAST_LON,
    GRID_NORTH_LAT,
    GRID_SOUTH_LAT,
    GRID_WEST_LON,
    POPULAR_ROUTES,
    SENTENCE_WORDS,
    TAXI_FIELDS,
    VOCABULARY,
    DagRecords,
    TaxiRecords,
    WordcountRecords,
    cell_centre,
    cell_of,
    record_source,
    route_of,
)


def _take(source, n: int) -> list[dict[str, str]]:
    return [source.next_record() for _ in range(n)]


@pytest.mark.parametrize(
    "make", [WordcountRecords, lambda s: DagRecords(s, 50), TaxiRecords]
)
def test_deterministic_given_a_seed(make):
    assert _take(make(7), 200) == _take(make(7), 200)
    assert _take(make(7), 200) != _take(make(8), 200)


def test_all_values_are_strings():
    for source in (WordcountRecords(1), DagRecords(1), TaxiRecords(1)):
        for record in _take(source, 50):
            assert set(record) == set(source.fields)
            assert all(isinstance(v, str) for v in record.values())


def test_wordcount_sentences_and_zipf_frequencies():
    assert len(VOCABULARY) == 1000 == len(set(VOCABULARY))
    assert all(re.fullmatch(r"[a-z]+", w) for w in VOCABULARY)
    lines = [r["line"] for r in _take(WordcountRecords(3), 20000)]
    lengths = Counter(len(line.split(" ")) for line in lines)
    assert set(lengths) == set(range(SENTENCE_WORDS[0], SENTENCE_WORDS[1] + 1))
    counts = Counter(word for line in lines for word in line.split(" "))
    assert set(counts) <= set(VOCABULARY)
    total = sum(counts.values())
    harmonic = sum(1 / r for r in range(1, 1001))
    # Rank r has frequency ~ 1 / (r * H_1000): the top word ~13 %, rank 10 ~1.3 %.
    assert counts[VOCABULARY[0]] / total == pytest.approx(1 / harmonic, rel=0.05)
    assert counts[VOCABULARY[9]] / total == pytest.approx(1 / (10 * harmonic), rel=0.15)
    assert counts[VOCABULARY[0]] > 5 * counts[VOCABULARY[9]] > 5 * counts.get(VOCABULARY[500], 0)
    assert len(counts) > 800  # the long tail shows up


def test_dag_values_and_keys():
    records = _take(DagRecords(5, key_space=7), 5000)
    keys = Counter(r["key"] for r in records)
    assert set(keys) == {str(k) for k in range(7)}
    assert all(0 <= int(r["value"]) < DagRecords.VALUE_RANGE for r in records)
    with pytest.raises(ValueError, match=r"key_space must be at least 1 \(got 0\)"):
        DagRecords(0, key_space=0)


def test_record_source_follows_the_app_config():
    assert isinstance(record_source(AppConfig(name="a", pipeline="wordcount")), WordcountRecords)
    assert isinstance(record_source(AppConfig(name="a", pipeline="taxi_top_routes")), TaxiRecords)
    dag = record_source(AppConfig(name="a", pipeline="dag", dag={"key_space": 3}), seed=1)
    assert isinstance(dag, DagRecords) and dag.key_space == 3


# ---------------------------------------------------------------------------------------------
# taxi


def test_grid_constants():
    assert pytest.approx(0.5 / 111.2) == CELL_LAT_DEG
    assert CELL_LON_DEG * 111.2 * math.cos(math.radians(GRID_CELL1_LAT)) == pytest.approx(0.5)
    assert pytest.approx(0.0060, abs=1e-5) == CELL_LON_DEG  # ~83.3 km a degree of longitude
    assert pytest.approx(300 * CELL_LON_DEG) == GRID_EAST_LON - GRID_WEST_LON
    assert pytest.approx(300 * CELL_LAT_DEG) == GRID_NORTH_LAT - GRID_SOUTH_LAT


@pytest.mark.parametrize(
    ("lon", "lat", "cell"),
    [
        (GRID_CELL1_LON, GRID_CELL1_LAT, (1, 1)),  # the documented centre of cell 1.1
        (-73.985, 40.758, (156, 160)),  # Times Square
        (-73.7781, 40.6413, (190, 186)),  # JFK
        (-73.8740, 40.7769, (174, 156)),  # LaGuardia
        (GRID_CELL1_LON + CELL_LON_DEG, GRID_CELL1_LAT, (2, 1)),  # one cell east
        (GRID_CELL1_LON, GRID_CELL1_LAT - CELL_LAT_DEG, (1, 2)),  # one cell south
        (GRID_CELL1_LON + 299 * CELL_LON_DEG, GRID_CELL1_LAT - 299 * CELL_LAT_DEG, (300, 300)),
    ],
)
def test_cell_of_known_points(lon, lat, cell):
    assert cell_of(lon, lat) == cell
    centre_lon, centre_lat = cell_centre(cell)
    assert cell_of(centre_lon, centre_lat) == cell


EPS = 1e-9


@pytest.mark.parametrize(
    ("lon", "lat", "cell"),
    [
        # West and north edges belong to the grid; east and south edges do not.
        (GRID_WEST_LON + EPS, GRID_NORTH_LAT - EPS, (1, 1)),
        (GRID_WEST_LON - EPS, GRID_CELL1_LAT, None),
        (GRID_CELL1_LON, GRID_NORTH_LAT + EPS, None),
        (GRID_EAST_LON - EPS, GRID_SOUTH_LAT + EPS, (300, 300)),
        (GRID_EAST_LON + EPS, GRID_CELL1_LAT, None),
        (GRID_CELL1_LON, GRID_SOUTH_LAT - EPS, None),
        # A boundary between two cells: the point on it goes to the cell east (south) of it.
        (GRID_WEST_LON + CELL_LON_DEG + EPS, GRID_CELL1_LAT, (2, 1)),
        (GRID_WEST_LON + CELL_LON_DEG - EPS, GRID_CELL1_LAT, (1, 1)),
        (GRID_CELL1_LON, GRID_NORTH_LAT - CELL_LAT_DEG - EPS, (1, 2)),
        (GRID_CELL1_LON, GRID_NORTH_LAT - CELL_LAT_DEG + EPS, (1, 1)),
        # Outside: the data set's zeros, far away, not numbers.
        (0.0, 0.0, None),
        (-118.24, 34.05, None),
        (math.nan, 40.7, None),
        (-73.98, math.inf, None),
    ],
)
def test_cell_of_edges_and_outside(lon, lat, cell):
    assert cell_of(lon, lat) == cell


def test_route_of_parses_records_and_rejects_bad_ones():
    record = {
        "pickup_longitude": "-73.985000", "pickup_latitude": "40.758000",
        "dropoff_longitude": "-73.778100", "dropoff_latitude": "40.641300",
    }
    assert route_of(record) == ((156, 160), (190, 186))
    assert route_of({**record, "dropoff_longitude": "0.0", "dropoff_latitude": "0.0"}) is None
    assert route_of({**record, "pickup_latitude": ""}) is None
    assert route_of({"pickup_longitude": "-73.98"}) is None


def test_taxi_schema_and_values():
    records = _take(TaxiRecords(11), 3000)
    for record in records:
        assert tuple(record) == TAXI_FIELDS
        assert re.fullmatch(r"[0-9A-F]{32}", record["medallion"])
        assert re.fullmatch(r"[0-9A-F]{32}", record["hack_license"])
        pickup = datetime.strptime(record["pickup_datetime"], "%Y-%m-%d %H:%M:%S")
        dropoff = datetime.strptime(record["dropoff_datetime"], "%Y-%m-%d %H:%M:%S")
        assert (dropoff - pickup).total_seconds() == int(record["trip_time_in_secs"]) > 0
        assert float(record["trip_distance"]) > 0
        assert record["payment_type"] in {"CRD", "CSH"}
        parts = ("fare_amount", "surcharge", "mta_tax", "tip_amount", "tolls_amount")
        assert sum(float(record[p]) for p in parts) == pytest.approx(float(record["total_amount"]), abs=0.011)
        for name in ("pickup_longitude", "pickup_latitude", "dropoff_longitude", "dropoff_latitude"):
            float(record[name])


def test_taxi_event_clock():
    records = _take(TaxiRecords(2, sim_seconds_per_record=0.5), 1000)
    assert records[0]["dropoff_datetime"] == "2013-01-01 00:00:00"
    assert records[1]["dropoff_datetime"] == "2013-01-01 00:00:00"
    assert records[2]["dropoff_datetime"] == "2013-01-01 00:00:01"
    assert records[999]["dropoff_datetime"] == "2013-01-01 00:08:19"  # floor(999 * 0.5) = 499 s
    dropoffs = [r["dropoff_datetime"] for r in records]
    assert dropoffs == sorted(dropoffs)  # the stream is ordered by dropoff time, as DEBS's
    hourly = _take(TaxiRecords(2, sim_seconds_per_record=3600), 3)
    assert [r["dropoff_datetime"] for r in hourly] == [
        "2013-01-01 00:00:00", "2013-01-01 01:00:00", "2013-01-01 02:00:00",
    ]


def test_taxi_routes_are_skewed_and_some_trips_leave_the_grid():
    records = _take(TaxiRecords(4), 20000)
    routes = Counter(route_of(r) for r in records)
    outside = routes.pop(None, 0)
    assert 0.01 < outside / len(records) < 0.06
    top10 = [route for route, _ in routes.most_common(10)]
    assert set(top10) <= set(POPULAR_ROUTES)
    assert top10[0] == POPULAR_ROUTES[0]
    tenth = routes.most_common(10)[9][1]
    busiest_other = max(n for route, n in routes.items() if route not in POPULAR_ROUTES)
    assert tenth > 5 * busiest_other  # the popular routes stand far out of the random ones
