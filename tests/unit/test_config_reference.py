"""The generated references (issue 34): every config key described, docs/configuration.md and
docs/cli.md as the generators make them now, and `check-config --explain`."""

from __future__ import annotations

import types
import typing
from pathlib import Path
from typing import Annotated, Any

import pytest
from click.testing import CliRunner
from pydantic import BaseModel, Field, TypeAdapter, ValidationError

from sparkscale.cli import main
from sparkscale.cli.reference import REGENERATE as CLI_REGENERATE
from sparkscale.cli.reference import cli_markdown
from sparkscale.config import Config, ConfigSection
from sparkscale.config.explain import UnknownKey, closest, find_key
from sparkscale.config.keys import config_keys
from sparkscale.config.reference import REGENERATE as CONFIG_REGENERATE
from sparkscale.config.reference import configuration_markdown
from sparkscale.config.sectioned import SectionedConfig

REPO = Path(__file__).resolve().parents[2]


def models_in(annotation: Any) -> list[type[BaseModel]]:
    """The models a field's values may be: the type itself, or inside a union, list or mapping."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    origin = typing.get_origin(annotation)
    if origin in (list, dict, tuple, typing.Union, types.UnionType):
        return [m for arg in typing.get_args(annotation) for m in models_in(arg)]
    return []


def undescribed(model: type[BaseModel], where: str = "", seen: set[type[BaseModel]] | None = None) -> list[str]:
    """Every field under `model` (its nested models, and the registered components' sections of a
    sectioned one) without a description: written apart from config/keys.py, to check it."""
    seen = set() if seen is None else seen
    if model in seen:
        return []
    seen.add(model)
    missing = []
    for name, field in model.model_fields.items():
        if not (field.description or "").strip():
            missing.append(f"{where}{name} ({model.__name__})")
        for nested in models_in(field.annotation):
            missing += undescribed(nested, f"{where}{name}.", seen)
    if issubclass(model, SectionedConfig):
        for name in model.registry.names():
            section = model.section_model(name)
            if section is not None:
                missing += undescribed(section, f"{where}{name}.", seen)
    return missing


def test_every_field_of_every_model_reachable_from_config_has_a_description():
    missing = undescribed(Config)
    assert not missing, "give these fields Field(..., description=...): " + ", ".join(missing)


def test_the_description_check_finds_a_field_without_one_in_a_nested_list():
    class Inner(ConfigSection):
        described: int = Field(1, description="A number.")
        bare: int = 2

    class Outer(ConfigSection):
        items: list[Inner] | None = Field(None, description="Some.")

    assert undescribed(Outer) == ["items.bare (Inner)"]


def test_every_setting_has_an_example_its_field_accepts():
    for key in config_keys():
        if key.is_section or key.field is None:
            continue
        example = key.example()
        assert example is not None, f"{key.key}: give it Field(..., examples=[...]) (its default shows none)"
        checked = TypeAdapter(Annotated[key.field.annotation, key.field])
        try:
            checked.validate_python(example)
        except ValidationError as exc:
            pytest.fail(f"{key.key}: example {example!r} is not a valid value: {exc}")


def test_keys_show_types_defaults_and_bounds_from_the_models():
    keys = {k.key: k for k in config_keys()}
    workers = keys["cluster.workers"]
    assert (workers.type_text, workers.default_text, workers.bounds_text) == ("integer", "2", "[1, 16]")
    assert keys["policy.utilization_max"].bounds_text == "(0, 1]"
    assert keys["policy.utilization_max"].type_text == "number or null"
    assert keys["guards.scale_down_delay_s"].bounds_text == ">= 0"
    assert keys["migration.stable_tolerance"].bounds_text == "(0, 1)"
    assert keys["apps[].mode"].bounds_text == "one of act, advise, observe"
    assert keys["apps[].name"].default_text == "required"
    assert keys["apps[]"].default_text == "[{name: wordcount}]"
    assert keys["guards.excluded_periods"].example_text == "['Sat 00:00-06:00', 'daily 23:30-00:30']"
    # Nested and registered sections: an item list in a policy's section, a model in a placement one.
    assert "policy.threshold.rules[].metric" in keys and "placement.edrp.downtime.sync_s" in keys


def test_docs_configuration_md_is_generated_from_the_models():
    committed = (REPO / "docs" / "configuration.md").read_text()
    assert committed == configuration_markdown(), f"docs/configuration.md is stale: run `{CONFIG_REGENERATE}`"


def test_docs_cli_md_is_generated_from_the_commands():
    committed = (REPO / "docs" / "cli.md").read_text()
    assert committed == cli_markdown(main), f"docs/cli.md is stale: run `{CLI_REGENERATE}`"


def test_the_configuration_reference_lists_every_builtin_key_with_its_description():
    text = configuration_markdown()
    assert CONFIG_REGENERATE in text.split("\n\n")[1]  # said at the top
    for key in config_keys(builtin_only=True):
        if not key.is_section:
            assert f"| `{key.key}` |" in text
    assert "| `guards.scale_down_delay_s` | number | `120.0` | `>= 0` | `120.0` | Scale down only after" in text


def test_the_cli_reference_has_every_visible_command_and_not_the_hidden_or_the_labs():
    text = cli_markdown(main)
    assert CLI_REGENERATE in text.split("\n\n")[1]
    for heading in ("## `sparkscale`", "### `sparkscale check-config`", "#### `sparkscale cluster up`",
                    "#### `sparkscale pipeline submit`", "### `sparkscale migrate`"):
        assert heading + "\n" in text
    assert "`sparkscale docs" not in text.replace(CLI_REGENERATE, "")
    assert "### `sparkscale bench`" not in text and "### `sparkscale demo`" not in text
    assert "| `--limit` | integer >= 1 | `100` | At most the newest N. |" in text
    assert "| `--explain KEY` | text |  |" in text


def test_sparkscale_docs_prints_both_pages_and_stays_out_of_help():
    runner = CliRunner()
    assert runner.invoke(main, ["docs", "config"]).output == configuration_markdown()
    assert runner.invoke(main, ["docs", "cli"]).output == cli_markdown(main)
    assert " docs " not in runner.invoke(main, ["--help"]).output


# -- check-config --explain ------------------------------------------------------------------------


@pytest.fixture
def two_apps(tmp_path: Path) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text("apps:\n  - name: wordcount\n  - name: taxi\n    pipeline: taxi_top_routes\n    mode: advise\n"
                    "guards:\n  scale_down_delay_s: 300\n")
    return path


def explain(path: Path, key: str, *extra: str) -> Any:
    return CliRunner(env={"SPARKSCALE_CONFIG": None}).invoke(
        main, ["check-config", str(path), "--explain", key, *extra])


def test_explain_prints_type_default_bounds_description_and_the_files_value(two_apps):
    out = explain(two_apps, "guards.scale_down_delay_s")
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert lines[0] == "guards.scale_down_delay_s"
    assert "Scale down only after every recommendation" in lines[1]
    assert "  type:    number" in lines and "  default: 120.0" in lines and "  bounds:  >= 0" in lines
    assert f"  in {two_apps}: 300.0" in lines
    unset = explain(two_apps, "loop.interval_s")
    assert f"  in {two_apps}: 10.0 (not set: the default)" in unset.output.splitlines()


@pytest.mark.parametrize("key", ["apps[].mode", "apps.mode"])
def test_explain_of_an_app_key_gives_each_apps_value(two_apps, key):
    out = explain(two_apps, key)
    assert out.exit_code == 0, out.output
    assert out.output.splitlines()[0] == "apps[].mode"
    assert "    apps.wordcount.mode: act (not set: the default)" in out.output.splitlines()
    assert "    apps.taxi.mode: advise" in out.output.splitlines()


def test_explain_of_one_app_by_name_or_index_as_set_addresses_it(two_apps):
    # `taxi` is an app here and a section of every app (apps[].taxi): the app is meant.
    by_name = explain(two_apps, "apps.taxi.mode")
    assert by_name.exit_code == 0 and "apps.wordcount.mode" not in by_name.output
    assert "    apps.taxi.mode: advise" in by_name.output.splitlines()
    by_index = explain(two_apps, "apps.0.executor_cores")
    assert "    apps.wordcount.executor_cores: 1 (not set: the default)" in by_index.output.splitlines()


def test_explain_applies_set_overrides(two_apps):
    out = explain(two_apps, "policy.ds2.catch_up_s", "--set", "policy.ds2.catch_up_s=90")
    assert f"  in {two_apps}: 90.0" in out.output.splitlines()


def test_explain_of_a_section_lists_its_keys(two_apps):
    out = explain(two_apps, "placement.edrp.downtime")
    assert out.exit_code == 0 and "placement.edrp.downtime.sync_s" in out.output


def test_explain_of_an_unknown_key_exits_2_naming_it_and_the_closest_known(two_apps):
    out = explain(two_apps, "guards.scale_down_delay")
    assert out.exit_code == 2
    assert "unknown key 'guards.scale_down_delay'" in out.output
    assert "closest known: guards.scale_down_delay_s" in out.output
    bare = explain(two_apps, "scale_down_delay_s")
    assert bare.exit_code == 2 and "guards.scale_down_delay_s" in bare.output


def test_explain_of_an_app_the_file_lacks_exits_2_naming_those_it_has(two_apps):
    out = explain(two_apps, "apps.nope.mode")
    assert out.exit_code == 2
    assert "no list item 'nope'" in out.output and "apps.wordcount.mode, apps.taxi.mode" in out.output


def test_an_unknown_key_is_refused_before_the_file_is_read(tmp_path):
    out = explain(tmp_path / "missing.yaml", "nope.nothing")
    assert out.exit_code == 2 and "unknown key 'nope.nothing'" in out.output


def test_find_key_and_closest():
    assert find_key("apps[].dag.shape").doc.key == "apps[].dag.shape"
    assert find_key("apps.wordcount.dag.shape").item == "wordcount"
    assert find_key("policy.threshold.rules.metric").doc.key == "policy.threshold.rules[].metric"
    with pytest.raises(UnknownKey) as raised:
        find_key("loop.intervl_s")
    assert raised.value.close[0] == "loop.interval_s"
    assert closest("zookeeper.sesion_timeout_s", [k.key for k in config_keys()])[0] == "zookeeper.session_timeout_s"
