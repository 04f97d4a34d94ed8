"""`sparkscale plan SNAPSHOT`: table and JSON output, policy choice, config and snapshot errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from sparkscale.cli.offline import plan_command

FIXTURE = Path(__file__).parent / "fixtures" / "design_snapshot.json"


def invoke(*args: str) -> Result:
    # Without SPARKSCALE_CONFIG, so that a developer's environment cannot change the result.
    return CliRunner(env={"SPARKSCALE_CONFIG": None}).invoke(plan_command, list(args))


def test_prints_a_table_with_the_explanation():
    result = invoke(str(FIXTURE))
    assert result.exit_code == 0, result.output
    assert result.output.startswith("plan by ds2 for app wordcount")
    assert "operator  target parallelism" in result.output
    assert "split     1" in result.output  # DS2: ceil(400 / (0.8 x 500)) = 1
    assert "explanation:" in result.output and "π = ceil(400 / (0.8 x 500)) = 1" in result.output


def test_prints_the_design_plan_json():
    result = invoke(str(FIXTURE), "--json")
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output)
    assert list(plan) == ["policy", "app", "parallelism", "actions", "explanation"]
    assert plan["policy"] == "ds2" and plan["app"] == "wordcount"
    assert plan["parallelism"] == {"source": 2, "split": 1}
    assert plan["actions"] == []
    assert any(line.startswith("total: ") and "executors needed" in line for line in plan["explanation"])


@pytest.mark.parametrize("policy", ["dhalion", "threshold"])
def test_policy_option_overrides_the_config(policy):
    result = invoke(str(FIXTURE), "--policy", policy, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["policy"] == policy


def test_set_overrides_apply(tmp_path):
    result = invoke(str(FIXTURE), "--set", "policy.name=threshold", "--json")
    assert json.loads(result.output)["policy"] == "threshold"
    # batch ratio 0.8: the DStreams preset stays; a custom rule at 0.7 scales up (1 -> 2, within [1, 8]).
    rule = "policy.threshold.rules=[{metric: batch_ratio, op: '>', value: 0.7, executors_delta: 1}]"
    result = invoke(str(FIXTURE), "--set", "policy.name=threshold", "--set", rule, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["actions"][0] == {
        "type": "scale_executors", "from": 1, "to": 2, "reason": "batch_ratio > 0.7 for 1 window(s)"}


def test_guards_use_the_app_of_the_snapshot_from_the_config(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("apps:\n  - {name: wordcount, min_executors: 3, initial_executors: 3}\n")
    result = invoke(str(FIXTURE), "--config", str(config), "--json")
    assert result.exit_code == 0, result.output
    [action] = json.loads(result.output)["actions"]
    # DS2 asks for min_executors 3, reached in one step (no cap on scale-ups by default).
    assert (action["type"], action["from"], action["to"]) == ("scale_executors", 1, 3)
    config.write_text("apps:\n  - {name: other, min_executors: 3, initial_executors: 3}\n")
    result = invoke(str(FIXTURE), "--config", str(config), "--json")
    assert json.loads(result.output)["actions"] == []  # wordcount is not configured: default app settings


def test_changes_nothing(tmp_path):
    copy = tmp_path / "s.json"
    copy.write_bytes(FIXTURE.read_bytes())
    assert invoke(str(copy)).exit_code == 0
    assert copy.read_bytes() == FIXTURE.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.json"]


def test_an_invalid_config_exits_2_naming_the_key():
    result = invoke(str(FIXTURE), "--set", "policy.target_utilization=2")
    assert result.exit_code == 2
    assert "policy.target_utilization" in result.output


def test_a_missing_config_file_exits_2(tmp_path):
    result = invoke(str(FIXTURE), "--config", str(tmp_path / "nope.yaml"))
    assert result.exit_code == 2
    assert "cannot read file" in result.output


def test_an_invalid_snapshot_exits_2_naming_the_field(tmp_path):
    data = json.loads(FIXTURE.read_text())
    data["operators"][1]["instances"][0]["useful_time_s"] = -1
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    result = invoke(str(bad))
    assert result.exit_code == 2
    assert "operators[1].instances[0].useful_time_s" in result.output
    assert str(bad) in result.output


def test_a_missing_or_broken_snapshot_file_exits_2(tmp_path):
    assert invoke(str(tmp_path / "none.json")).exit_code == 2
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    result = invoke(str(broken))
    assert result.exit_code == 2 and "invalid JSON" in result.output


def test_an_unknown_policy_is_a_usage_error():
    result = invoke(str(FIXTURE), "--policy", "magic")
    assert result.exit_code == 2
    assert "magic" in result.output


def test_a_history_file_replays_the_learned_scalability_coefficient(tmp_path):
    # Three judged scale-ups that each brought half the capacity expected: DS2 adds twice the cores.
    history = {"version": 1, "scalability": [
        {"query": None, "at": float(k), "cores_before": 1, "cores_after": 3, "before_rps": 10.0,
         "expected_rps": 30.0, "observed_rps": 20.0} for k in range(3)]}
    path = tmp_path / "history.json"
    path.write_text(json.dumps(history))
    snapshot = json.loads(FIXTURE.read_text())
    snapshot["operators"][0]["arrival_rate"] = 800.0  # 2 cores needed at linear scaling, 1 now
    busy = tmp_path / "busy.json"
    busy.write_text(json.dumps(snapshot))
    plain = json.loads(invoke(str(busy), "--json").output)
    result = invoke(str(busy), "--history", str(path), "--json")
    assert result.exit_code == 0, result.output
    replayed = json.loads(result.output)
    line = next(x for x in replayed["explanation"] if "observed scalability coefficient" in x)
    assert "0.50" in line and "3 judged scale-ups" in line
    ups = [a["to"] for p in (plain, replayed) for a in p["actions"] if a["type"] == "scale_executors"]
    assert ups == [2, 3]  # 1 core added at linear scaling; 1 / 0.5 = 2 added with the coefficient
