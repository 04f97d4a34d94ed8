"""Snapshot v1: the example snapshot (fixtures/design_snapshot.json) loads, round-trips, keeps unknown fields, and every
validation error names the field path."""

from __future__ import annotations

import copy
import dataclasses
import json
import pickle
from pathlib import Path
from typing import Any

import pytest

from sparkscale.model.snapshot import (
    ExecutorFigures,
    InstanceFigures,
    OperatorFigures,
    Snapshot,
    SnapshotError,
    load_snapshot,
)

FIXTURE = Path(__file__).parent / "fixtures" / "design_snapshot.json"


@pytest.fixture
def raw() -> dict[str, Any]:
    return json.loads(FIXTURE.read_text())


def test_design_example_loads(raw):
    snap = load_snapshot(FIXTURE)
    assert (snap.version, snap.app, snap.query, snap.window_s) == (1, "wordcount", "counts", 30.0)
    assert (snap.trigger_interval_s, snap.batch_duration_s) == (1.0, 0.8)
    assert snap.executors == (ExecutorFigures("1", "127.0.0.1", 1),)
    source, split = snap.operators
    assert source == OperatorFigures("source", 2, (InstanceFigures(6000, 6000, 3.0, "1"),), True, 400.0, 0)
    assert (split.source, split.arrival_rate, split.backlog) == (False, None, None)
    assert split.instances[0].records_out == 30000
    assert snap.edges == (("source", "split"),)
    assert snap.topological_order() == ("source", "split")
    assert snap.upstream("split") == ("source",)
    assert snap.cores == 1


def test_json_round_trip(raw):
    snap = Snapshot.from_dict(raw)
    assert Snapshot.from_json(snap.to_json()) == snap
    assert Snapshot.from_json(snap.to_json(indent=2)) == snap
    # to_dict is the input, with the defaults written out ("source": false on split).
    expected = copy.deepcopy(raw)
    expected["operators"][1]["source"] = False
    assert snap.to_dict() == expected


def test_optional_fields_default(raw):
    del raw["trigger_interval_s"], raw["batch_duration_s"]
    del raw["operators"][0]["backlog"], raw["operators"][1]["instances"][0]["executor"]
    snap = Snapshot.from_dict(raw)
    assert snap.trigger_interval_s is None and snap.batch_duration_s is None
    assert snap.operators[0].backlog == 0
    assert snap.operators[1].instances[0].executor is None
    assert Snapshot.from_json(snap.to_json()) == snap


def test_unknown_fields_and_extensions_are_kept(raw):
    raw["extensions"] = {"host_cpu": {"127.0.0.1": 0.42}}
    raw["monitor"] = "spark-rest"
    raw["executors"][0]["memory_mb"] = 1024
    raw["operators"][1]["state_rows"] = 12
    raw["operators"][1]["instances"][0]["shuffle_wait_s"] = 0.5
    snap = Snapshot.from_dict(raw)
    assert snap.extensions == {"host_cpu": {"127.0.0.1": 0.42}}
    assert snap.extra == {"monitor": "spark-rest"}
    assert snap.executors[0].extra == {"memory_mb": 1024}
    assert snap.operators[1].extra == {"state_rows": 12}
    assert snap.operators[1].instances[0].extra == {"shuffle_wait_s": 0.5}
    out = snap.to_dict()
    assert out["extensions"] == raw["extensions"] and out["monitor"] == "spark-rest"
    assert out["operators"][1]["instances"][0]["shuffle_wait_s"] == 0.5
    assert Snapshot.from_json(snap.to_json()) == snap
    # The snapshot holds its own copy: changing the input afterwards changes nothing.
    raw["extensions"]["host_cpu"]["127.0.0.1"] = 0.99
    assert snap.extensions["host_cpu"]["127.0.0.1"] == 0.42


def test_frozen_hashable_and_picklable(raw):
    snap = Snapshot.from_dict(raw)
    with pytest.raises(dataclasses.FrozenInstanceError):
        snap.app = "other"  # type: ignore[misc]
    assert hash(snap) == hash(Snapshot.from_dict(raw))
    assert pickle.loads(pickle.dumps(snap)) == snap


def test_topological_order_puts_upstream_first_whatever_the_listing(raw):
    raw["operators"].reverse()
    raw["operators"].append({"id": "sink", "parallelism": 1, "instances": []})
    raw["edges"].insert(0, ["split", "sink"])
    assert Snapshot.from_dict(raw).topological_order() == ("source", "split", "sink")


def _set(obj: Any, path: tuple[Any, ...], value: Any) -> None:
    for key in path[:-1]:
        obj = obj[key]
    if value is _DELETE:
        del obj[path[-1]]
    else:
        obj[path[-1]] = value


_DELETE = object()

ERRORS = [
    (("version",), 2, "version: expected 1 (got 2)"),
    (("version",), _DELETE, "version: missing"),
    (("version",), True, "version: expected 1"),
    (("app",), _DELETE, "app: missing"),
    (("app",), 7, "app: expected a non-empty string (got 7)"),
    (("window_s",), 0, "window_s: expected a number > 0"),
    (("taken_at",), "now", 'taken_at: expected a number (got "now")'),
    (("trigger_interval_s",), -1, "trigger_interval_s: expected a number > 0"),
    (("executors",), {}, "executors: expected a list"),
    (("executors", 0, "cores"), "1", 'executors[0].cores: expected an integer >= 1 and <= 10000 (got "1")'),
    (("executors", 0, "cores"), 0, "executors[0].cores: expected an integer >= 1"),
    (("executors", 0, "id"), 1, "executors[0].id: expected a non-empty string"),
    (("operators",), [], "operators: expected at least one operator"),
    (("operators", 1), "split", "operators[1]: expected an object"),
    (("operators", 1, "parallelism"), 0, "operators[1].parallelism: expected an integer >= 1"),
    (("operators", 1, "parallelism"), 1.5, "operators[1].parallelism: expected an integer >= 1"),
    (("operators", 1, "id"), _DELETE, "operators[1].id: missing"),
    (("operators", 1, "source"), "yes", "operators[1].source: expected true or false"),
    (("operators", 0, "arrival_rate"), _DELETE, "operators[0].arrival_rate: missing"),
    (("operators", 0, "arrival_rate"), -5, "operators[0].arrival_rate: expected a number >= 0"),
    (("operators", 0, "backlog"), None, "operators[0].backlog: expected a number >= 0"),
    (("operators", 1, "instances"), _DELETE, "operators[1].instances: missing"),
    (("operators", 1, "instances", 0, "useful_time_s"), -1,
     "operators[1].instances[0].useful_time_s: expected a number >= 0 and <= 1e+09, 0 or at least 1e-06 (got -1)"),
    (("operators", 1, "instances", 0, "records_in"), True,
     "operators[1].instances[0].records_in: expected a number >= 0"),
    (("operators", 1, "instances", 0, "records_out"), float("nan"),
     "operators[1].instances[0].records_out: expected a number"),
    (("operators", 1, "instances", 0, "records_out"), _DELETE, "operators[1].instances[0].records_out: missing"),
    (("operators", 1, "instances", 0, "executor"), 1,
     "operators[1].instances[0].executor: expected a non-empty string"),
    (("edges",), _DELETE, "edges: missing"),
    (("edges", 0), ["source"], "edges[0]: expected a pair [upstream, downstream]"),
    (("edges", 0, 1), "nope", "edges[0][1]: unknown operator 'nope'"),
    (("edges", 0, 0), "nope", "edges[0][0]: unknown operator 'nope'"),
    (("edges", 0), ["split", "source"], "edges[0][1]: 'source' is a source operator"),
    (("extensions",), [1], "extensions: expected an object"),
]


ERROR_IDS = [f"{message.split(':')[0]}-{i}" for i, (_, _, message) in enumerate(ERRORS)]


@pytest.mark.parametrize(("path", "value", "message"), ERRORS, ids=ERROR_IDS)
def test_validation_errors_name_the_field(raw, path, value, message):
    _set(raw, path, value)
    with pytest.raises(SnapshotError) as err:
        Snapshot.from_dict(raw)
    assert str(err.value).startswith(message), str(err.value)
    assert err.value.path == message.split(":")[0]


def test_structural_errors(raw):
    dup = copy.deepcopy(raw)
    dup["operators"][1]["id"] = "source"
    with pytest.raises(SnapshotError, match=r"^operators\[1\]\.id: duplicate operator id 'source'"):
        Snapshot.from_dict(dup)

    twice = copy.deepcopy(raw)
    twice["edges"].append(["source", "split"])
    with pytest.raises(SnapshotError, match=r"^edges\[1\]: duplicate edge"):
        Snapshot.from_dict(twice)

    cyclic = copy.deepcopy(raw)
    cyclic["operators"].append({"id": "agg", "parallelism": 1, "instances": []})
    cyclic["edges"] += [["split", "agg"], ["agg", "split"]]
    with pytest.raises(SnapshotError, match=r"^edges: cycle through operators agg -> split -> agg"):
        Snapshot.from_dict(cyclic)

    loop = copy.deepcopy(raw)
    loop["edges"].append(["split", "split"])
    with pytest.raises(SnapshotError, match=r"^edges: cycle through operators split -> split"):
        Snapshot.from_dict(loop)

    with pytest.raises(SnapshotError, match=r"^snapshot: expected an object"):
        Snapshot.from_dict([raw])


def test_direct_construction_checks_structure():
    ops = (OperatorFigures("a", 1), OperatorFigures("b", 1))
    with pytest.raises(SnapshotError, match="cycle"):
        Snapshot("app", "q", 0.0, 30.0, (), ops, (("a", "b"), ("b", "a")))
    with pytest.raises(SnapshotError, match="version"):
        Snapshot("app", "q", 0.0, 30.0, (), ops, (), version=2)


def test_invalid_json_and_files(tmp_path):
    with pytest.raises(SnapshotError, match="invalid JSON at line 1"):
        Snapshot.from_json("{nope")
    missing = tmp_path / "missing.json"
    with pytest.raises(SnapshotError, match=r"missing\.json: cannot read file"):
        load_snapshot(missing)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"version": 1}))
    with pytest.raises(SnapshotError) as err:
        load_snapshot(bad)
    assert str(err.value) == f"{bad}: app: missing"
    assert err.value.source == str(bad) and err.value.path == "app"
