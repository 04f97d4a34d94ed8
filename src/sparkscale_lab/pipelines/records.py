"""Record payloads per workload: deterministic given a seed, so a run can be reproduced and checked.

Each source yields dicts of string fields (Redis stream entry fields); the load generator adds
`uid` and `ts`. The taxi workload's grid mapping (`cell_of`, `route_of`) lives here, pure, so the
pipeline and the test oracle compute routes exactly as the generator meant them.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import accumulate, product
from typing import Protocol

from sparkscale.config import AppConfig

# ---------------------------------------------------------------------------------------------
# wordcount

# The most frequent ranks are common English words, so a word count's top entries read naturally;
# the long tail is made of pronounceable consonant-vowel syllables, in a fixed order.
_COMMON_WORDS = (
    "the of and to a in is it you that he was for on are with as his they be at one have this "
    "from or had by hot word but what some we can out other were all there when up use your how "
    "said an each she which do their time if will way about many then them write would like so "
    "these her long make thing see him two has look more day could go come did number sound no "
    "most people my over know water than call first who may down side been now find any new work "
    "part take get place made live where after back little only round man year came show every "
    "good me give our under name very through just form sentence great think say help low line "
    "differ turn cause much mean before move right boy old too same tell does set three want air "
    "well also play small end put home read hand port large spell add even land here must big high "
    "such follow act why ask men change went light kind off need house picture try us again animal "
    "point mother world near build self earth father head stand own page should country found "
    "answer school grow study still learn plant cover food sun four between state keep eye never "
    "last let thought city tree cross farm hard start might story saw far sea draw left late run "
    "while press close night real life few north stream spark window batch state"
).split()
_CONSONANTS = "bdfgklmnprstvz"
_VOWELS = "aeiou"
VOCABULARY_SIZE = 1000
ZIPF_EXPONENT = 1.0
SENTENCE_WORDS = (5, 12)


def _vocabulary() -> tuple[str, ...]:
    words = list(dict.fromkeys(_COMMON_WORDS))
    seen = set(words)
    syllables = ["".join(p) for p in product(_CONSONANTS, _VOWELS)]
    for first, second in product(syllables, syllables):
        if len(words) == VOCABULARY_SIZE:
            break
        word = first + second
        if word not in seen:
            seen.add(word)
            words.append(word)
    return tuple(words)


VOCABULARY: tuple[str, ...] = _vocabulary()
_ZIPF_TABLE_SIZE = 1 << 16


def _zipf_table() -> tuple[str, ...]:
    """Each word repeated in proportion to 1 / rank**ZIPF_EXPONENT (largest-remainder rounding).

    Uniform picks from this table are ~3x faster than weighted picks, and the load generator's
    top rate is bounded by the cost of making records.
    """
    weights = [1.0 / r**ZIPF_EXPONENT for r in range(1, VOCABULARY_SIZE + 1)]
    shares = [w / sum(weights) * _ZIPF_TABLE_SIZE for w in weights]
    counts = [math.floor(s) for s in shares]
    by_remainder = sorted(range(VOCABULARY_SIZE), key=lambda i: counts[i] - shares[i])
    for i in by_remainder[: _ZIPF_TABLE_SIZE - sum(counts)]:
        counts[i] += 1
    return tuple(word for word, count in zip(VOCABULARY, counts, strict=True) for _ in range(count))


_ZIPF_WORDS = _zipf_table()


class RecordSource(Protocol):
    """Yields one record's payload fields at a time (all values strings)."""

    @property
    def fields(self) -> tuple[str, ...]: ...  # read-only: each source's class constant

    def next_record(self) -> dict[str, str]: ...


class WordcountRecords:
    """`line`: a sentence of 5-12 words, Zipf-distributed over `VOCABULARY`."""

    fields = ("line",)

    def __init__(self, seed: int = 0):
        self._rng = random.Random(seed)

    def next_record(self) -> dict[str, str]:
        rng = self._rng
        n = rng.randint(*SENTENCE_WORDS)
        return {"line": " ".join(rng.choices(_ZIPF_WORDS, k=n))}


class DagRecords:
    """`value`: an integer in [0, 1e6); `key`: uniform in [0, key_space) for the stateful operator."""

    fields = ("value", "key")
    VALUE_RANGE = 1_000_000

    def __init__(self, seed: int = 0, key_space: int = 100):
        if key_space < 1:
            raise ValueError(f"key_space must be at least 1 (got {key_space})")
        self._rng = random.Random(seed)
        self.key_space = key_space

    def next_record(self) -> dict[str, str]:
        rng = self._rng
        return {"value": str(rng.randrange(self.VALUE_RANGE)), "key": str(rng.randrange(self.key_space))}


# ---------------------------------------------------------------------------------------------
# taxi_top_routes: the DEBS 2015 Grand Challenge grid
#
# Cell 1.1 is centred at (41.474937 N, -74.913585 E); cells are 500 m x 500 m; x (the first
# number) grows eastwards, y (the second) southwards, 300 x 300 cells (150 km x 150 km, covering
# New York City). Degrees per cell, computed from the Earth's size at the grid's latitude:
#   latitude:  1 deg = 111.2 km                                  -> 0.5 / 111.2   = 0.0044964 deg
#   longitude: 1 deg = 111.2 km * cos(41.474937 deg) = 83.33 km  -> 0.5 / 83.33   = 0.0060000 deg
# A cell covers [west, west + CELL_LON_DEG) x (north - CELL_LAT_DEG, north]: a point on a cell's
# west or north edge belongs to it; the grid's east and south edges are outside.

GRID_CELL1_LAT = 41.474937
GRID_CELL1_LON = -74.913585
GRID_CELLS = 300
CELL_SIZE_KM = 0.5
KM_PER_DEG_LAT = 111.2
KM_PER_DEG_LON = KM_PER_DEG_LAT * math.cos(math.radians(GRID_CELL1_LAT))  # ~83.33
CELL_LAT_DEG = CELL_SIZE_KM / KM_PER_DEG_LAT  # ~0.0044964
CELL_LON_DEG = CELL_SIZE_KM / KM_PER_DEG_LON  # ~0.0060000
GRID_WEST_LON = GRID_CELL1_LON - CELL_LON_DEG / 2
GRID_NORTH_LAT = GRID_CELL1_LAT + CELL_LAT_DEG / 2
GRID_EAST_LON = GRID_WEST_LON + GRID_CELLS * CELL_LON_DEG
GRID_SOUTH_LAT = GRID_NORTH_LAT - GRID_CELLS * CELL_LAT_DEG

Cell = tuple[int, int]
Route = tuple[Cell, Cell]

TAXI_FIELDS = (
    "medallion", "hack_license", "pickup_datetime", "dropoff_datetime", "trip_time_in_secs",
    "trip_distance", "pickup_longitude", "pickup_latitude", "dropoff_longitude", "dropoff_latitude",
    "payment_type", "fare_amount", "surcharge", "mta_tax", "tip_amount", "tolls_amount", "total_amount",
)  # fmt: skip
TAXI_EPOCH = datetime(2013, 1, 1, 0, 0, 0)
TAXI_DATETIME_FORMAT = "%Y-%m-%d %H:%M:%S"
# The 2013 data set has ~170 M trips a year, ~5.4 a second; 0.2 s per record keeps windows of tens of
# minutes of event time to thousands of records at laboratory rates.
DEFAULT_SIM_SECONDS_PER_RECORD = 0.2


def cell_of(lon: float, lat: float) -> Cell | None:
    """The DEBS grid cell (x east, y south; 1-based) containing (lon, lat), or None outside the grid."""
    if not (math.isfinite(lon) and math.isfinite(lat)):
        return None
    x = math.floor((lon - GRID_WEST_LON) / CELL_LON_DEG) + 1
    y = math.floor((GRID_NORTH_LAT - lat) / CELL_LAT_DEG) + 1
    if 1 <= x <= GRID_CELLS and 1 <= y <= GRID_CELLS:
        return (x, y)
    return None


def route_of(record: Mapping[str, str]) -> Route | None:
    """(pickup cell, dropoff cell) of a taxi record, or None if either end is outside the grid."""
    try:
        start = cell_of(float(record["pickup_longitude"]), float(record["pickup_latitude"]))
        end = cell_of(float(record["dropoff_longitude"]), float(record["dropoff_latitude"]))
    except (KeyError, ValueError):
        return None
    if start is None or end is None:
        return None
    return (start, end)


def cell_centre(cell: Cell) -> tuple[float, float]:
    """(lon, lat) of a cell's centre."""
    x, y = cell
    return (GRID_CELL1_LON + (x - 1) * CELL_LON_DEG, GRID_CELL1_LAT - (y - 1) * CELL_LAT_DEG)


# Where trips happen: Manhattan and the airports sit around x 150-190, y 150-190.
_CITY_X = (140, 190)
_CITY_Y = (145, 190)
_HOT_X = (150, 162)
_HOT_Y = (152, 172)
_AIRPORT_CELLS: tuple[Cell, ...] = ((190, 186), (174, 156))  # JFK, LaGuardia
POPULAR_ROUTE_COUNT = 20
POPULAR_SHARE = 0.5  # of all trips, one of the popular routes (Zipf among them)
OUTSIDE_SHARE = 0.03  # of all trips, an end outside the grid (GPS errors, out-of-town trips)
_MEDALLIONS = 2000
_LICENSES = 5000


def _popular_routes() -> tuple[Route, ...]:
    """Fixed for every seed (as a city's busiest routes are), so runs agree on what is popular."""
    rng = random.Random(2015)
    routes: list[Route] = []
    while len(routes) < POPULAR_ROUTE_COUNT:
        start = (rng.randint(*_HOT_X), rng.randint(*_HOT_Y))
        end = _AIRPORT_CELLS[len(routes) % 2] if len(routes) % 5 == 4 else (rng.randint(*_HOT_X), rng.randint(*_HOT_Y))
        if (start, end) not in routes:
            routes.append((start, end))
    return tuple(routes)


POPULAR_ROUTES: tuple[Route, ...] = _popular_routes()  # most popular first
_POPULAR_CUM_WEIGHTS = tuple(accumulate(1.0 / r for r in range(1, POPULAR_ROUTE_COUNT + 1)))


@dataclass(frozen=True)
class _Trip:
    pickup: tuple[float, float]
    dropoff: tuple[float, float]
    distance_km: float


class TaxiRecords:
    """DEBS 2015 trip records; dropoff times follow an event clock, as the challenge's stream is ordered.

    Record k's dropoff is `start + floor(k * sim_seconds_per_record)` (start: 2013-01-01 00:00:00,
    as the data set); its pickup is that minus `trip_time_in_secs`, so the first pickups fall just
    before the start, as in the real data. Half the trips take one of `POPULAR_ROUTES` (Zipf among
    them), ~3 % have an end outside the grid.
    """

    fields = TAXI_FIELDS

    def __init__(
        self,
        seed: int = 0,
        sim_seconds_per_record: float = DEFAULT_SIM_SECONDS_PER_RECORD,
        start: datetime = TAXI_EPOCH,
    ):
        if sim_seconds_per_record < 0:
            raise ValueError(f"sim_seconds_per_record must be >= 0 (got {sim_seconds_per_record})")
        self._rng = random.Random(seed)
        self.sim_seconds_per_record = sim_seconds_per_record
        self.start = start
        self._count = 0
        self._dropoff_s = -1
        self._dropoff_at = start
        self._dropoff_text = ""
        self._medallions = [f"{self._rng.getrandbits(128):032X}" for _ in range(_MEDALLIONS)]
        self._licenses = [f"{self._rng.getrandbits(128):032X}" for _ in range(_LICENSES)]

    def next_record(self) -> dict[str, str]:
        rng = self._rng
        trip = self._trip()
        dropoff_s = math.floor(self._count * self.sim_seconds_per_record)
        self._count += 1
        if dropoff_s != self._dropoff_s:
            self._dropoff_s = dropoff_s
            self._dropoff_at = self.start + timedelta(seconds=dropoff_s)
            self._dropoff_text = self._dropoff_at.strftime(TAXI_DATETIME_FORMAT)
        dropoff_at = self._dropoff_at

        miles = max(0.1, trip.distance_km * rng.uniform(1.1, 1.4) / 1.609344)
        speed_mph = rng.uniform(7.0, 22.0)
        trip_secs = max(60, round(miles / speed_mph * 3600))
        pickup_at = dropoff_at - timedelta(seconds=trip_secs)
        # 2013 NYC tariff, roughly: $2.50 flag drop, $2.50 a mile, $0.50 a minute of slow traffic.
        slow_minutes = max(0.0, trip_secs / 60 - miles / 12 * 60)
        fare = round((2.5 + 2.5 * miles + 0.5 * slow_minutes) * 2) / 2
        hour = dropoff_at.hour
        surcharge = 0.5 if hour >= 20 or hour < 6 else (1.0 if 16 <= hour < 20 else 0.0)
        card = rng.random() < 0.55
        tip = round(fare * rng.uniform(0.1, 0.25), 2) if card else 0.0
        tolls = 5.33 if miles > 8 and rng.random() < 0.3 else 0.0
        mta_tax = 0.5
        total = fare + surcharge + mta_tax + tip + tolls
        return {
            "medallion": rng.choice(self._medallions),
            "hack_license": rng.choice(self._licenses),
            "pickup_datetime": pickup_at.strftime(TAXI_DATETIME_FORMAT),
            "dropoff_datetime": self._dropoff_text,
            "trip_time_in_secs": str(trip_secs),
            "trip_distance": f"{miles:.2f}",
            "pickup_longitude": f"{trip.pickup[0]:.6f}",
            "pickup_latitude": f"{trip.pickup[1]:.6f}",
            "dropoff_longitude": f"{trip.dropoff[0]:.6f}",
            "dropoff_latitude": f"{trip.dropoff[1]:.6f}",
            "payment_type": "CRD" if card else "CSH",
            "fare_amount": f"{fare:.2f}",
            "surcharge": f"{surcharge:.2f}",
            "mta_tax": f"{mta_tax:.2f}",
            "tip_amount": f"{tip:.2f}",
            "tolls_amount": f"{tolls:.2f}",
            "total_amount": f"{total:.2f}",
        }

    def _trip(self) -> _Trip:
        rng = self._rng
        roll = rng.random()
        if roll < POPULAR_SHARE:
            start, end = rng.choices(POPULAR_ROUTES, cum_weights=_POPULAR_CUM_WEIGHTS)[0]
        else:
            start = (rng.randint(*_CITY_X), rng.randint(*_CITY_Y))
            end = (rng.randint(*_CITY_X), rng.randint(*_CITY_Y))
        pickup, dropoff = self._point_in(start), self._point_in(end)
        distance_km = math.hypot(
            (end[0] - start[0]) * CELL_SIZE_KM, (end[1] - start[1]) * CELL_SIZE_KM
        ) + rng.uniform(0.2, 0.6)
        if roll > 1.0 - OUTSIDE_SHARE:
            outside = self._outside_point()
            if rng.random() < 0.5:
                pickup = outside
            else:
                dropoff = outside
        return _Trip(pickup, dropoff, distance_km)

    def _point_in(self, cell: Cell) -> tuple[float, float]:
        # Keep 5 % clear of the cell's edges: the 6-decimal strings (~0.1 m) stay in the same cell.
        rng = self._rng
        x, y = cell
        lon = GRID_WEST_LON + (x - 1 + rng.uniform(0.05, 0.95)) * CELL_LON_DEG
        lat = GRID_NORTH_LAT - (y - 1 + rng.uniform(0.05, 0.95)) * CELL_LAT_DEG
        return (lon, lat)

    def _outside_point(self) -> tuple[float, float]:
        rng = self._rng
        kind = rng.randrange(3)
        if kind == 0:
            return (0.0, 0.0)  # the data set's "no GPS fix"
        if kind == 1:
            return (GRID_EAST_LON + rng.uniform(0.01, 0.5), rng.uniform(GRID_SOUTH_LAT, GRID_NORTH_LAT))
        return (rng.uniform(GRID_WEST_LON, GRID_EAST_LON), GRID_SOUTH_LAT - rng.uniform(0.01, 0.5))


def record_source(app: AppConfig, seed: int = 0) -> RecordSource:
    """The record source for an app's pipeline, seeded."""
    if app.pipeline == "wordcount":
        return WordcountRecords(seed)
    if app.pipeline in ("dag", "memory_state"):  # memory_state reads the dag's records, keyed by uid
        return DagRecords(seed, app.dag.key_space)
    if app.pipeline == "taxi_top_routes":
        return TaxiRecords(seed, app.taxi.sim_seconds_per_record)
    raise ValueError(f"no record source for pipeline {app.pipeline!r}")
