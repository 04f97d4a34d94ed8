"""Bad input files, one known failure each: exit 2 with one line naming the file, the key (field
path) and the problem, where each was a traceback, a hang or a silently accepted value before."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from sparkscale.cli import main
from sparkscale.config import AppConfig, ConfigError, load_config
from sparkscale.model.plan import Action, Plan
from sparkscale.model.snapshot import SnapshotError, load_snapshot, load_snapshots
from sparkscale.partitions import many_divisor_count
from sparkscale.policies.history import DecisionHistory, HistoryError, load_history
from sparkscale.policies.two_tier import band_migrations

FIXTURE = Path(__file__).parent / "fixtures" / "design_snapshot.json"
POLICIES = ("ds2", "dhalion", "threshold")


def invoke(*args: str) -> Result:
    return CliRunner(env={"SPARKSCALE_CONFIG": None}).invoke(main, list(args))


def snapshot_with(tmp_path: Path, change: Any, name: str = "s.json") -> Path:
    data = json.loads(FIXTURE.read_text())
    change(data)
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def refused(result: Result, *fragments: str) -> str:
    """The one line of an exit-2 refusal, checked to hold every fragment."""
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    [line] = result.output.strip().splitlines()
    for fragment in fragments:
        assert fragment in line, line
    return line


# -- snapshots --------------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", POLICIES)
def test_a_snapshot_whose_app_is_no_app_name_is_refused(tmp_path, policy):
    # Was a pydantic ValidationError traceback (exit 1) from AppConfig(name=snapshot.app).
    path = snapshot_with(tmp_path, lambda d: d.update(app="no such/app!"))
    line = refused(invoke("plan", str(path), "--policy", policy))
    assert line == (f"invalid snapshot: {path}: app: expected letters, digits, '_', '.', '-' (at most 64), "
                    'as an app name in the config (got "no such/app!")')


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize(("field", "value", "path"), [
    (("operators", 0, "arrival_rate"), 1e308, "operators[0].arrival_rate"),  # DS2 searched divisors for ever
    (("operators", 0, "backlog"), 2**63, "operators[0].backlog"),
    (("operators", 0, "instances", 0, "records_out"), 1.7e308, "operators[0].instances[0].records_out"),
    (("operators", 1, "instances", 0, "useful_time_s"), 1e200, "operators[1].instances[0].useful_time_s"),
    (("operators", 0, "instances", 0, "records_in"), 5e-324, "operators[0].instances[0].records_in"),  # NaN
    (("window_s",), 1e-308, "window_s"),  # Dhalion: an infinite processed rate
    (("trigger_interval_s",), 5e-324, "trigger_interval_s"),  # an infinite batch ratio
    (("taken_at",), 10**400, "taken_at"),  # OverflowError: int too large to convert to float
    (("executors", 0, "cores"), 10**400, "executors[0].cores"),
    (("operators", 1, "parallelism"), 10**9, "operators[1].parallelism"),
])
@pytest.mark.timeout(120)  # some searched for ever before: a hang fails the test, a slow machine does not
def test_extreme_numbers_are_refused_naming_the_field(tmp_path, policy, field, value, path):
    def change(data: dict[str, Any]) -> None:
        node = data
        for key in field[:-1]:
            node = node[key]
        node[field[-1]] = value

    file = snapshot_with(tmp_path, change)
    refused(invoke("plan", str(file), "--policy", policy), f"invalid snapshot: {file}: {path}: expected ")


def test_extension_figures_the_policies_read_are_checked(tmp_path):
    # extensions.queries = 5 was an AttributeError in the planner for every policy.
    for extensions, path in [({"queries": 5}, "extensions.queries: expected an object"),
                             ({"queries": {"q": []}}, "extensions.queries.q: expected an object"),
                             ({"app": {"cpu_fraction": 2}}, "extensions.app.cpu_fraction: expected a number >= 0"),
                             ({"app": {"requested_executors": -1}}, "extensions.app.requested_executors"),
                             ({"query": {"migratable": "no"}}, "extensions.query.migratable: expected true or false")]:
        file = snapshot_with(tmp_path, lambda d, e=extensions: d.update(extensions=e))
        refused(invoke("plan", str(file)), path)


def test_a_snapshot_list_is_of_one_app_with_each_query_once(tmp_path):
    one = json.loads(FIXTURE.read_text())
    for items, fragment in [([one, {**one, "app": "other", "query": "q2"}], "[1].app: 'other', but [0] is of app"),
                            ([one, one], "[1].query: query 'counts' appears twice"),
                            ([one, 5], "[1]: expected a snapshot object (got 5)"),
                            ([one, {**one, "query": "q2", "window_s": -1}], "[1].window_s: expected a number > 0")]:
        path = tmp_path / "list.json"
        path.write_text(json.dumps(items))
        refused(invoke("plan", str(path)), f"invalid snapshot: {path}: {fragment}")


@pytest.mark.parametrize(("content", "problem"), [
    (b"\xff\xfe{}", "not UTF-8 text (byte 0xff at offset 0)"),  # was a UnicodeDecodeError traceback
    (b"[" * 100_000, "invalid JSON: nested deeper than 100 levels"),  # was a RecursionError traceback
    (b'{"a": ' * 150 + b"1" + b"}" * 150, "invalid JSON: nested deeper than 100 levels"),
    (b"", "invalid JSON at line 1 column 1"),
])
def test_unreadable_snapshot_and_history_files_are_refused(tmp_path, content, problem):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    refused(invoke("plan", str(path)), f"invalid snapshot: {path}: {problem}")
    refused(invoke("plan", str(FIXTURE), "--history", str(path)), f"invalid history: {path}: {problem}")


def test_loaders_name_a_directory(tmp_path):
    with pytest.raises(SnapshotError, match="is a directory, not a file"):
        load_snapshot(tmp_path)
    with pytest.raises(SnapshotError, match="is a directory"):
        load_snapshots(tmp_path)
    with pytest.raises(HistoryError, match="is a directory"):
        load_history(tmp_path)


# -- decision histories -----------------------------------------------------------------------------


def _history() -> dict[str, Any]:
    plan = Plan("ds2", "wordcount", {"split": 2}, (Action.scale_executors(1, 2, "up"),))
    return DecisionHistory(partitions={"counts": 12}).with_decision(1795299990.0, plan).to_dict()


@pytest.mark.parametrize(("change", "fragment"), [
    (lambda h: h["decisions"][0]["plan"]["actions"][0].update(type="nope"),
     "decisions[0].plan.actions[0].type: unknown action type"),
    (lambda h: h["decisions"][0]["plan"]["actions"][0].update(to=-1), "decisions[0].plan.actions[0].to: expected an"),
    (lambda h: h["decisions"][0].update(decided_at=float("nan")), "decisions[0].decided_at: expected a number"),
    (lambda h: h["decisions"][0]["observation"].update(figures={"backlog": 1e308}),
     "decisions[0].observation.figures.backlog: expected a number"),
    (lambda h: h.update(decisions=[*h["decisions"], {**h["decisions"][0], "decided_at": 1.0}]),
     "decisions[1].decided_at: earlier than the decision before it"),
    (lambda h: h.update(last_action_at="yesterday"), "last_action_at: expected a number"),
    (lambda h: h.update(last_action_direction=2), "last_action_direction: expected an integer >= -1 and <= 1"),
    (lambda h: h.update(partitions={"counts": 0}), "partitions.counts: expected an integer >= 1"),
    (lambda h: h.update(scalability=[{"at": 1.0}]), "scalability[0].cores_before: missing"),
    (lambda h: h.update(last_action_at_=1.0), "last_action_at_: unknown key (known keys here: version,"),
    (lambda h: h["decisions"][0]["plan"].update(extra=1), "decisions[0].plan.extra: unknown key"),
])
def test_a_bad_history_is_refused_naming_the_field(tmp_path, change, fragment):
    # Was "malformed decision history: KeyError('decided_at')" or a traceback (OverflowError, an
    # unknown action type's ValueError), or NaN times accepted.
    history = _history()
    change(history)
    path = tmp_path / "h.json"
    path.write_text(json.dumps(history))
    refused(invoke("plan", str(FIXTURE), "--history", str(path)), f"invalid history: {path}: {fragment}")


def test_a_history_round_trips():
    history = DecisionHistory.from_dict(_history())
    assert DecisionHistory.from_dict(history.to_dict()) == history
    with pytest.raises(HistoryError, match=r"^history: expected an object"):
        DecisionHistory.from_dict([])


# -- config -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "fragment"), [
    (b"\xff\xfeloop: {}\n", ": not UTF-8 text (byte 0xff at offset 0)"),  # was a UnicodeDecodeError traceback
    (b"loop:\n  interval_s: .inf\n", ": loop.interval_s: expected a finite number (got inf)"),  # was accepted
    (b"policy:\n  threshold:\n    rules: [{metric: cpu, op: '>', value: .nan, executors_delta: 1}]\n",
     ": policy.threshold.rules.0.value: expected a finite number"),  # a rule that never fires, accepted
    (b"spark:\n  rest_timeout_s: 1\nspark:\n  rest_timeout_s: 2\n", ":3:1: invalid YAML: found duplicate key 'spark'"),
    (b"x: " + b"[" * 5000 + b"]" * 5000 + b"\n", ": invalid YAML: nested too deeply"),  # was a RecursionError
    (b"apps:\n  - {name: a, max_executors: 1000000000000}\n", "apps.0.max_executors: expected less than or equal"),
    (b"apps:\n  - {name: a, spark_conf: {spark.sql.shuffle.partitions: '0'}}\n",
     "spark.sql.shuffle.partitions: expected an integer in [1, 4096] (got '0')"),
    (b"policy:\n  target_utilization: 1.0e-300\n", "policy.target_utilization: expected greater than or equal to 0.01"),
    (b"guards:\n  partitions_per_core_min: 20\n", "guards: partitions_per_core_min (20) is above"),  # an empty band
])
@pytest.mark.timeout(120)  # a hang fails, not a slow machine: 1e12 max_executors made loading search divisors for ever
def test_a_bad_config_is_refused_in_one_line_naming_the_key(tmp_path, text, fragment):
    path = tmp_path / "c.yaml"
    path.write_bytes(text)
    for args in (["check-config", str(path)], ["plan", str(FIXTURE), "--config", str(path)]):
        refused(invoke(*args), f"invalid config: {path}", fragment)


def test_a_duplicate_key_in_a_set_value_is_refused():
    with pytest.raises(ConfigError, match="duplicate key 'name'"):
        load_config(None, ["apps=[{name: a, name: b}]"])


def test_yaml_merge_keys_still_work(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("loop: {<<: {interval_s: 3, window_s: 9}, window_s: 12}\n")  # a merge is no duplicate
    cfg = load_config(path)
    assert (cfg.loop.interval_s, cfg.loop.window_s) == (3, 12)


def test_the_derived_shuffle_partitions_stay_within_their_bound():
    app = AppConfig(name="big", max_executors=1_000_000, executor_cores=100)
    assert app.shuffle_partitions == 4096


# -- arithmetic that an extreme (valid) input made endless ------------------------------------------


@pytest.mark.timeout(60)  # endless before: a hang fails the test, a slow machine does not
def test_many_divisor_count_beyond_its_range_answers_at_once():
    assert many_divisor_count(10**30, at_most=64) == 10**30
    assert many_divisor_count(7, at_most=10) == 7 and many_divisor_count(5) == 6


@pytest.mark.timeout(60)  # endless before: a hang fails the test, a slow machine does not
def test_a_two_tier_band_far_above_the_cap_answers_at_once():
    snapshot = load_snapshot(FIXTURE)
    app = AppConfig(name="wordcount", shuffle_partitions=2)
    plan = Plan("ds2", "wordcount")
    out = band_migrations(plan, snapshot, app, {"counts": 2}, 1e12, 1e13, {})
    assert [(a.from_, a.to) for a in out.actions] == [(2, 4096)]


def test_a_vanishing_catch_up_time_is_refused_by_the_config(tmp_path):
    # DS2 drains the backlog over policy.ds2.catch_up_s: a 1e-320 s catch-up made any backlog an
    # infinite rate; the config now asks for at least 1 s and names the key.
    path = snapshot_with(tmp_path, lambda d: d["operators"][0].update(backlog=1000))
    result = invoke("plan", str(path), "--set", "policy.ds2.catch_up_s=1e-320")
    assert result.exit_code == 2 and "policy.ds2.catch_up_s" in result.output, result.output
    assert "Traceback" not in result.output
