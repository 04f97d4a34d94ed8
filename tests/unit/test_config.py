"""Config: the shipped file, defaults, every kind of invalid input, and --set overrides."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from sparkscale.cli import main
from sparkscale.config import Config, ConfigError, load_config

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "configs" / "sparkscale.yaml"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return path


def problems(exc: ConfigError) -> list[tuple[str, str, str]]:
    return [(p.source, p.key, p.message) for p in exc.problems]


def test_shipped_file_documents_exactly_the_defaults():
    # The shipped file is the reference users read: it must say what the code does.
    assert load_config(SHIPPED) == Config()


def test_empty_file_and_no_file_give_the_defaults(tmp_path):
    assert load_config(write(tmp_path, "")) == Config()
    assert load_config(None) == Config()


def test_partial_file_changes_only_its_keys(tmp_path):
    cfg = load_config(write(tmp_path, "loop:\n  interval_s: 3\npolicy:\n  ds2:\n    catch_up_s: 10\n"))
    assert cfg.loop.interval_s == 3.0
    assert cfg.loop.window_s == Config().loop.window_s
    assert cfg.policy.ds2.catch_up_s == 10.0
    assert cfg.policy.ds2.max_parallelism == Config().policy.ds2.max_parallelism
    assert cfg.policy.name == "ds2"


def test_apps_given_replace_the_default_list_and_default_their_keys(tmp_path):
    cfg = load_config(write(tmp_path, "apps:\n  - name: taxi\n    pipeline: taxi_top_routes\n"))
    assert [a.name for a in cfg.apps] == ["taxi"]
    assert cfg.app("taxi").max_executors == 8
    with pytest.raises(KeyError, match="no managed app named 'wordcount'"):
        cfg.app("wordcount")


def test_wrong_type_names_file_key_value_and_expectation(tmp_path):
    path = write(tmp_path, "loop:\n  interval_s: fast\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    [(source, key, message)] = problems(err.value)
    assert (source, key) == (str(path), "loop.interval_s")
    assert "number" in message
    assert "'fast'" in str(err.value)


def test_unknown_key_suggests_the_close_one(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, "loop:\n  intervl_s: 3\n"))
    [(_, key, message)] = problems(err.value)
    assert key == "loop.intervl_s"
    assert "unknown key" in message and "did you mean 'loop.interval_s'" in message


def test_unknown_key_far_from_any_lists_the_known_ones(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, "redis:\n  zzz: 1\n"))
    [(_, key, message)] = problems(err.value)
    assert key == "redis.zzz"
    assert "known keys here" in message and "port" in message


def test_unknown_section_suggests_the_close_one(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, "polcy:\n  name: ds2\n"))
    assert "did you mean 'policy'" in str(err.value)


def test_several_problems_are_all_reported(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, "loop:\n  interval_s: -1\npolicy:\n  name: ds3\n  target_utilization: 1.5\n"))
    keys = {key for _, key, _ in problems(err.value)}
    assert keys == {"loop.interval_s", "policy.name", "policy.target_utilization"}


@pytest.mark.parametrize(
    ("text", "key", "fragment"),
    [
        ("apps:\n  - name: a\n    min_executors: 5\n    max_executors: 2\n", "apps.0", "min_executors (5) is above"),
        ("apps:\n  - name: a\n  - name: a\n", "apps", "appears twice"),
        ("apps:\n  - pipeline: dag\n", "apps.0.name", "Field required"),
        ("apps:\n  - name: a\n    pipeline: kafka\n", "apps.0.pipeline", "expected one of"),
        ("spark:\n  master_url: http://x:1\n", "spark.master_url", "spark://HOST:PORT"),
        ("zookeeper:\n  hosts: localhost\n", "zookeeper.hosts", "HOST:PORT"),
        ("zookeeper:\n  root: sparkscale\n", "zookeeper.root", "absolute znode path"),
        ("policy:\n  threshold:\n    rules:\n      - {metric: cpu, op: '>', value: 0.7, executors_delta: 0}\n",
         "policy.threshold.rules.0.executors_delta", "non-zero"),
        ("logging:\n  level: loud\n", "logging.level", "expected one of"),
    ],
)
def test_constraint_violations_name_the_key(tmp_path, text, key, fragment):
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, text))
    assert any(k == key and fragment in m for _, k, m in problems(err.value)), problems(err.value)


def test_broken_yaml_reports_the_line(tmp_path):
    path = write(tmp_path, "loop:\n  interval_s: 3\n  window_s: [1, 2\ndry_run: true\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    [problem] = err.value.problems
    assert problem.source.startswith(f"{path}:4:") and "invalid YAML" in problem.message


def test_top_level_must_be_a_mapping(tmp_path):
    with pytest.raises(ConfigError, match="mapping of sections"):
        load_config(write(tmp_path, "- a\n- b\n"))


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read file"):
        load_config(tmp_path / "nope.yaml")


def test_set_overrides_with_yaml_typed_values(tmp_path):
    cfg = load_config(
        write(tmp_path, "loop:\n  interval_s: 3\n"),
        ["loop.interval_s=7", "loop.dry_run=true", "policy.target_utilization=0.5", "logging.file=/tmp/x.log"],
    )
    assert cfg.loop.interval_s == 7.0
    assert cfg.loop.dry_run is True
    assert cfg.policy.target_utilization == 0.5
    assert cfg.logging.file == "/tmp/x.log"


def test_set_addresses_list_items_by_name_or_index_starting_from_defaults():
    assert load_config(None, ["apps.wordcount.max_executors=4"]).app("wordcount").max_executors == 4
    assert load_config(None, ["apps.0.dag.shape=star"]).apps[0].dag.shape == "star"


def test_set_errors_are_attributed_to_set(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, ""), ["loop.intervl_s=3", "apps.wordcount.min_executors=9"])
    found = {(s, k) for s, k, _ in problems(err.value)}
    assert ("--set", "loop.intervl_s") in found
    assert ("--set", "apps.0") in found


@pytest.mark.parametrize("item", ["noequals", "=3", "apps.nosuch.max_executors=1", "loop.interval_s.deeper=1"])
def test_malformed_set_is_a_config_error(item):
    with pytest.raises(ConfigError) as err:
        load_config(None, [item])
    assert all(p.source == "--set" for p in err.value.problems)


def test_check_config_cli_exit_codes_and_messages(tmp_path):
    runner = CliRunner()
    ok = runner.invoke(main, ["check-config", str(SHIPPED)])
    assert ok.exit_code == 0, ok.output
    bad = write(tmp_path, "loop:\n  interval_s: [1]\n  cooldwn_s: 3\n")
    result = runner.invoke(main, ["check-config", str(bad)])
    assert result.exit_code == 2
    assert f"{bad}: loop.interval_s" in result.output
    assert "did you mean 'loop.cooldown_s'" in result.output
    overridden = runner.invoke(main, ["check-config", str(SHIPPED), "--set", "loop.interval_s=fast"])
    assert overridden.exit_code == 2 and "--set: loop.interval_s" in overridden.output


def test_console_script_is_installed_and_exits_2_on_a_bad_file(tmp_path):
    bad = write(tmp_path, "policy:\n  target_utilization: 2\n")
    exe = Path(sys.executable).parent / "sparkscale"
    proc = subprocess.run([str(exe), "check-config", str(bad)], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2
    assert "policy.target_utilization" in proc.stderr


def test_set_keeps_a_string_that_yaml_would_read_as_a_mapping():
    assert load_config(None, ["redis.key_prefix=test:"]).redis.key_prefix == "test:"
    assert load_config(None, ["redis.key_prefix=a:b:"]).redis.key_prefix == "a:b:"


def test_a_pipeline_name_stands_for_a_default_app_of_that_name():
    cfg = load_config(None).with_app("taxi_top_routes")
    assert [a.name for a in cfg.apps] == ["wordcount", "taxi_top_routes"]
    assert cfg.app("taxi_top_routes").pipeline == "taxi_top_routes"
    assert cfg.with_app("wordcount") is cfg
    with pytest.raises(KeyError, match="no managed app named 'nope'"):
        cfg.with_app("nope")


def test_policy_name_sections_and_registry_names_are_checked_together(tmp_path):
    # Names are checked against the registries; each policy's section against its own model; one
    # run reports every problem, with "did you mean" for a misspelt section.
    text = ("policy:\n  name: ds3\n  ds2: {catch_up_s: -1}\n  dhalon: {}\napps:\n  - {name: a, pipeline: kafka}\n"
            "migration: {strategy: xyz}\n")
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, text))
    keys = {p.key: p.message for p in err.value.problems}
    assert set(keys) == {"policy.name", "policy.ds2.catch_up_s", "policy.dhalon", "apps.0.pipeline",
                         "migration.strategy"}
    assert "'ds2'" in keys["policy.name"] and "'ccr'" in keys["migration.strategy"]
    assert "did you mean 'policy.dhalion'" in keys["policy.dhalon"]


def test_the_placement_section_takes_a_registered_policy_and_its_own_settings(tmp_path):
    text = ("placement:\n  name: otdd\n  worker_selection_policy: RANDOM\n  otd: {high_load: 2}\n  edpr: {}\n"
            "  host_cpus: {10.0.0.1: 0}\n")
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, text))
    keys = {p.key: p.message for p in err.value.problems}
    assert set(keys) == {"placement.name", "placement.worker_selection_policy", "placement.otd.high_load",
                         "placement.edpr", "placement.host_cpus"}
    assert "at least 1 CPU" in keys["placement.host_cpus"]
    assert "'otd'" in keys["placement.name"] and "did you mean 'placement.edrp'" in keys["placement.edpr"]
    cfg = load_config(write(tmp_path, "placement:\n  name: otd\n  otd: {low_load: 0.25}\n"))
    assert (cfg.placement.name, cfg.placement.otd.low_load, cfg.placement.otd.high_load) == ("otd", 0.25, 0.85)
    assert load_config(None).placement.name == "spark-default"  # nothing moves unless asked
