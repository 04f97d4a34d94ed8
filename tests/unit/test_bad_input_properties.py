"""Bad input files never crash a command: every file a command reads (config with --set, snapshot,
decision history) is validated at load, and a bad one is exit 2 with a line naming the file, the
key and the problem, never a traceback (exit 1). Property-based: valid documents changed field by
field and at random (values, types, keys), and arbitrary JSON, YAML and bytes, through the real
CLI (`plan`, `plan --history`, `plan --config`, `check-config`) and the loaders."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparkscale.cli import main
from sparkscale.config import ConfigError, load_config
from sparkscale.model.snapshot import SnapshotError, load_snapshots
from sparkscale.policies.history import HistoryError, load_history

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOT = ROOT / "tests" / "unit" / "fixtures" / "design_snapshot.json"
CONFIG = ROOT / "configs" / "sparkscale.yaml"
POLICIES = ("ds2", "dhalion", "threshold")

SNAPSHOT_DOC = json.loads(SNAPSHOT.read_text())
CONFIG_DOC = yaml.safe_load(CONFIG.read_text())
# A decision history as `sparkscale actions --history` writes it, every section used.
HISTORY_DOC: dict[str, Any] = {
    "version": 1,
    "decisions": [{
        "decided_at": 1795299990.0,
        "plan": {"policy": "ds2", "app": "wordcount", "parallelism": {"source": 2, "split": 2},
                 "actions": [{"type": "scale_executors", "from": 1, "to": 2, "reason": "scale up"}],
                 "explanation": ["DS2 over 2 operators"]},
        "observation": {"query": "counts", "figures": {"backlog": 10.0, "batch_ratio": 0.8},
                        "diagnosis": "under_provisioning",
                        "expected": {"diagnosis": "under_provisioning", "action_type": "scale_executors",
                                     "metric": "capacity_rps", "before": 400.0, "after": 800.0},
                        "recommended_executors": 2}}],
    "blocklist": [{"app": "wordcount", "diagnosis": "under_provisioning", "action_type": "scale_executors",
                   "until": 1795300100.0, "policy": "dhalion"}],
    "last_action_at": 1795299990.0, "migration_running": False, "last_migration_end": None,
    "partitions": {"counts": 12}, "requested_executors": 2, "last_action_direction": 1,
    "action_in_progress": None,
    "scalability": [{"query": None, "at": 1795299000.0, "cores_before": 1, "cores_after": 2, "before_rps": 400.0,
                     "expected_rps": 800.0, "observed_rps": 600.0}],
}

# Modest counts (the file runs in seconds on one slow core); no example database in the work tree.
PROPERTY = settings(max_examples=80, deadline=None, database=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

# -- strategies -------------------------------------------------------------------------------------

# Numbers that broke policies or loaders: overflowing, denormal, huge integers, non-finite.
EXTREMES = (0, -0.0, -1, 1e-308, 5e-324, 1e-7, 1e308, 1.7e308, 1e16, 2**63, 10**400, -(10**400),
            math.nan, math.inf, -math.inf)
EXTREME = st.sampled_from(EXTREMES)
# Names and paths that are not names: spaces, slashes, too long, empty.
ODD_TEXT = st.sampled_from(["", " ", "no such/app!", "a" * 100, "x/y", "é", "..", "-a", "a\nb"])
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=12), EXTREME)
JSON = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                     st.dictionaries(st.text(max_size=8), inner, max_size=3)),
                    max_leaves=8)
DELETE = object()


def node_paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every position in a JSON/YAML document (not the root), as key/index paths."""
    out: list[tuple[Any, ...]] = []
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    for key, value in items:
        out.append((*prefix, key))
        out.extend(node_paths(value, (*prefix, key)))
    return out


def number_paths(doc: Any) -> list[tuple[Any, ...]]:
    return [p for p in node_paths(doc) if isinstance(_at(doc, p), (int, float)) and not isinstance(_at(doc, p), bool)]


def _at(doc: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        doc = doc[key]
    return doc


def changed(document: Any, path: tuple[Any, ...], value: Any) -> Any:
    """`document` with the value at `path` replaced by `value` (deleted for DELETE)."""
    doc = copy.deepcopy(document)
    parent = _at(doc, path[:-1])
    if value is DELETE:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return doc


def like(value: Any) -> st.SearchStrategy[Any]:
    """Values of the same kind as `value`, the likeliest to pass the type check and break what
    follows: odd text for a string, extreme numbers for a number."""
    if isinstance(value, str):
        return st.one_of(ODD_TEXT, st.text(max_size=12))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return st.one_of(EXTREME, st.floats(), st.integers())
    return JSON


def any_value_at(document: Any, path: tuple[Any, ...]) -> st.SearchStrategy[Any]:
    """What a position may be given: mostly a value of its kind, else any JSON value or nothing."""
    kind = like(_at(document, path))
    return st.one_of(kind, kind, JSON, st.just(DELETE))


@st.composite
def mutated(draw: st.DrawFn, document: Any, values: st.SearchStrategy[Any] | None = None) -> Any:
    """`document` with 1-3 changes (mostly one, so that the rest stays valid), mostly to its leaves:
    a value replaced (by one of its kind, another type, a nested document), a key deleted, or an
    unknown key added."""
    doc = copy.deepcopy(document)
    for _ in range(draw(st.sampled_from([1, 1, 1, 2, 3]))):
        paths = node_paths(doc)
        if not paths:
            break
        leaves = [p for p in paths if not isinstance(_at(doc, p), (dict, list))]
        path = draw(st.sampled_from(leaves if leaves and draw(st.integers(0, 4)) else paths))
        parent = _at(doc, path[:-1])
        change = draw(st.sampled_from(["replace", "replace", "replace", "delete", "add"]))
        value = draw(values if values is not None else any_value_at(doc, path)) if change == "replace" else DELETE
        if change in ("replace", "delete") and value is not DELETE:
            parent[path[-1]] = value
        elif change in ("replace", "delete"):
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(st.text(min_size=1, max_size=8))] = draw(values if values is not None else JSON)
        else:
            parent.append(draw(values if values is not None else JSON))
    return doc


# -- checks -----------------------------------------------------------------------------------------


def invoke(*args: str) -> Result:
    # Without SPARKSCALE_CONFIG, so that a developer's environment cannot change the result.
    return CliRunner(env={"SPARKSCALE_CONFIG": None}).invoke(main, list(args))


def assert_clean(result: Result, *named: str) -> None:
    """Exit 0 or 2, never a crash; on 2 the output names the bad input (one of `named`)."""
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code in (0, 2), result.output
    assert "Traceback" not in result.output
    if result.exit_code == 2:
        assert any(name in result.output for name in named), result.output
        # Refused when read, not caught failing inside a policy (`plan`'s last line of defence).
        assert "cannot plan with these figures" not in result.output, result.output


def assert_strict_plan_json(result: Result) -> None:
    """A plan printed with --json is JSON without NaN or Infinity (no absurd figures)."""
    if result.exit_code == 0:
        json.loads(result.output, parse_constant=lambda name: pytest.fail(f"{name} in the plan: {result.output}"))


def plan_each_policy(*args: str, named: str) -> None:
    for policy in POLICIES:
        result = invoke("plan", *args, "--policy", policy, "--json")
        assert_clean(result, named)
        assert_strict_plan_json(result)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("bad-input")


def write(directory: Path, name: str, content: str | bytes) -> Path:
    path = directory / name
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    return path


def path_id(path: tuple[Any, ...]) -> str:
    return ".".join(map(str, path))


# -- snapshots --------------------------------------------------------------------------------------


# Every numeric field with every extreme number, under every policy: no overflow, no division by
# a denormal, no hang (1e308 records/s made DS2 search divisors for ~1e308 cores).
@pytest.mark.parametrize("path", number_paths(SNAPSHOT_DOC), ids=path_id)
def test_extreme_numbers_in_any_snapshot_field_are_planned_or_refused(workdir, path):
    for value in EXTREMES:
        file = write(workdir, "extreme.json", json.dumps(changed(SNAPSHOT_DOC, path, value)))
        plan_each_policy(str(file), named=str(file))


# Every field, each with a few values: a field a random mutation rarely reaches is still covered.
@pytest.mark.parametrize("path", node_paths(SNAPSHOT_DOC), ids=path_id)
def test_any_value_of_any_snapshot_field_is_planned_or_refused(workdir, path):
    @settings(PROPERTY, max_examples=8)
    @given(value=any_value_at(SNAPSHOT_DOC, path))
    def check(value: Any) -> None:
        file = write(workdir, "field.json", json.dumps(changed(SNAPSHOT_DOC, path, value)))
        plan_each_policy(str(file), named=str(file))

    check()


@PROPERTY
@given(doc=mutated(SNAPSHOT_DOC), as_list=st.booleans())
def test_a_mutated_snapshot_is_planned_or_refused_naming_the_file(workdir, doc, as_list):
    file = write(workdir, "snapshot.json", json.dumps([doc, {**doc, "query": "other"}] if as_list else doc))
    plan_each_policy(str(file), named=str(file))


@settings(PROPERTY, max_examples=60)
@given(doc=JSON, as_list=st.booleans())
def test_arbitrary_json_as_a_snapshot_is_refused_naming_the_file(workdir, doc, as_list):
    file = write(workdir, "arbitrary.json", json.dumps([doc] if as_list else doc))
    assert_clean(invoke("plan", str(file)), str(file))


@settings(PROPERTY, max_examples=60)
@given(data=st.binary(max_size=64))
def test_arbitrary_bytes_as_a_snapshot_or_history_are_refused_naming_the_file(workdir, data):
    file = write(workdir, "bytes.json", data)
    assert_clean(invoke("plan", str(file)), str(file))
    assert_clean(invoke("plan", str(SNAPSHOT), "--history", str(file)), str(file))


@settings(PROPERTY, max_examples=60)
@given(doc=mutated(SNAPSHOT_DOC))
def test_the_snapshot_loader_raises_only_snapshot_errors_naming_the_file(workdir, doc):
    file = write(workdir, "loader.json", json.dumps(doc))
    try:
        load_snapshots(file)
    except SnapshotError as exc:
        assert exc.source == str(file) and str(exc).startswith(f"{file}: ")


# -- decision histories -----------------------------------------------------------------------------


@pytest.mark.parametrize("path", number_paths(HISTORY_DOC), ids=path_id)
def test_extreme_numbers_in_any_history_field_are_replayed_or_refused(workdir, path):
    for value in EXTREMES:
        file = write(workdir, "history-extreme.json", json.dumps(changed(HISTORY_DOC, path, value)))
        plan_each_policy(str(SNAPSHOT), "--history", str(file), named=str(file))


@pytest.mark.parametrize("path", node_paths(HISTORY_DOC), ids=path_id)
def test_any_value_of_any_history_field_is_replayed_or_refused(workdir, path):
    @settings(PROPERTY, max_examples=5)
    @given(value=any_value_at(HISTORY_DOC, path))
    def check(value: Any) -> None:
        file = write(workdir, "history-field.json", json.dumps(changed(HISTORY_DOC, path, value)))
        plan_each_policy(str(SNAPSHOT), "--history", str(file), named=str(file))

    check()


@settings(PROPERTY, max_examples=60)
@given(doc=mutated(HISTORY_DOC))
def test_a_mutated_history_is_replayed_or_refused_naming_the_file(workdir, doc):
    file = write(workdir, "history.json", json.dumps(doc))
    plan_each_policy(str(SNAPSHOT), "--history", str(file), named=str(file))
    try:
        load_history(file)
    except HistoryError as exc:
        assert exc.source == str(file) and str(exc).startswith(f"{file}: ")


# -- config -----------------------------------------------------------------------------------------


# Every number a policy, a guard or the loop reads, with every extreme number, under every policy
# (a config of that section alone, so that the sweep stays fast): 1e12 max_executors or a 1e-300
# target utilisation made the plan search divisors for ever.
@pytest.mark.parametrize("path", [p for p in number_paths(CONFIG_DOC) if p[0] in ("apps", "policy", "guards", "loop",
                                                                                    "outcomes")], ids=path_id)
def test_extreme_numbers_in_any_policy_setting_are_used_or_refused(workdir, path):
    for value in EXTREMES:
        section = {path[0]: changed(CONFIG_DOC, path, value)[path[0]]}
        file = write(workdir, "config-extreme.yaml", yaml.safe_dump(section))
        plan_each_policy(str(SNAPSHOT), "--config", str(file), named=str(file))


@pytest.mark.parametrize("path", node_paths(CONFIG_DOC), ids=path_id)
def test_any_value_of_any_config_key_is_used_or_refused(workdir, path):
    @settings(PROPERTY, max_examples=3)
    @given(value=any_value_at(CONFIG_DOC, path), policy=st.sampled_from(POLICIES))
    def check(value: Any, policy: str) -> None:
        file = write(workdir, "config-key.yaml", yaml.safe_dump(changed(CONFIG_DOC, path, value)))
        result = invoke("plan", str(SNAPSHOT), "--config", str(file), "--policy", policy, "--json")
        assert_clean(result, str(file))
        assert_strict_plan_json(result)

    check()


@settings(PROPERTY, max_examples=60)
@given(doc=mutated(CONFIG_DOC))
def test_a_mutated_config_is_used_or_refused_naming_the_file(workdir, doc):
    file = write(workdir, "config.yaml", yaml.safe_dump(doc))
    assert_clean(invoke("check-config", str(file)), str(file))
    try:
        load_config(file)
    except ConfigError as exc:
        assert exc.problems and all(p.source.startswith(str(file)) for p in exc.problems)


@settings(PROPERTY, max_examples=60)
@given(text=st.one_of(st.text(max_size=40), st.binary(max_size=40).map(lambda b: b.decode("latin-1")),
                      JSON.map(yaml.safe_dump)))
def test_arbitrary_yaml_as_a_config_is_refused_naming_the_file(workdir, text):
    file = write(workdir, "arbitrary.yaml", text)
    assert_clean(invoke("check-config", str(file)), str(file))


@settings(PROPERTY, max_examples=60)
@given(key=st.sampled_from([path_id(p) for p in node_paths(CONFIG_DOC)]
                           + ["apps.wordcount.max_executors", "loop", "nope.x", ""]),
       value=st.one_of(st.text(max_size=20), st.sampled_from([".inf", ".nan", "1e400", "-1", "[1", "{a: 1}", "null",
                                                              "1000000000000", "!!python/name:os.system"])))
def test_any_set_override_is_applied_or_refused_naming_the_key(key, value):
    result = invoke("check-config", str(CONFIG), "--set", f"{key}={value}")
    assert_clean(result, "--set", str(CONFIG))
