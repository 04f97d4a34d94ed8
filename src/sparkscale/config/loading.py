"""Reading the config file: YAML, `--set` overrides, and errors that name the file, the key and
the problem (`sparkscale check-config` exits 2 with them)."""

from __future__ import annotations

import copy
import difflib
import functools
import types
import typing
from pathlib import Path
from typing import Any, TypeGuard

import yaml
from pydantic import BaseModel, JsonValue, ValidationError
from pydantic_core import ErrorDetails

from sparkscale.bounded import (
    CONFIG_MAX_BYTES,
    MAX_INTEGER_DIGITS,
    HugeInteger,
    InputFileError,
    find_huge,
    printable,
    read_user_file,
)
from sparkscale.config.problems import ConfigError, ConfigProblem
from sparkscale.config.secrets import SPARK_SECRET_KEY
from sparkscale.config.sectioned import SectionedConfig
from sparkscale.config.sections import Config


def load_config(path: str | Path | None = None, overrides: typing.Sequence[str] = ()) -> Config:
    """Read a YAML config (or only defaults when `path` is None) and apply `--set` overrides."""
    source = str(path) if path is not None else "<defaults>"
    raw: dict[str, Any] = {}
    if path is not None:
        raw = _read_yaml(Path(path))
    set_keys = [_apply_override(raw, item) for item in overrides]
    try:
        return Config.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError([_problem(err, source, set_keys, raw) for err in exc.errors()]) from None


class _Loader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping: YAML keeps the last silently,
    so a second `spark:` section would drop the first without a word. Integers are bounded
    (`construct_bounded_int`); `met_huge` says whether one was too long."""

    met_huge = False

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            seen: set[tuple[str, str]] = set()
            for key_node, _value in node.value:
                if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = (key_node.tag, key_node.value)
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping", node.start_mark,
                        f"found duplicate key {key_node.value!r}", key_node.start_mark)
                seen.add(key)
        return super().construct_mapping(node, deep=deep)

    def construct_bounded_int(self, node: yaml.ScalarNode) -> int | HugeInteger:
        """An integer of at most MAX_INTEGER_DIGITS digits, else a HugeInteger (`_refuse_huge` names
        its key): `int()` of more than 4,300 digits raises ValueError from inside the parser."""
        text = str(self.construct_scalar(node)).replace("_", "").lstrip("+-").removeprefix("0x").removeprefix("0b")
        if len(text) > MAX_INTEGER_DIGITS:  # hexadecimal, octal, binary or base 60 digits count too
            self.met_huge = True
            return HugeInteger(sum(1 for c in text if c.isalnum()))
        value: int = self.construct_yaml_int(node)
        digits = len(str(abs(value)))  # at most ~1,200 from 1,000 hexadecimal digits: printable
        if digits > MAX_INTEGER_DIGITS:
            self.met_huge = True
            return HugeInteger(digits)
        return value


_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_bounded_int)


def _load_yaml(text: str) -> tuple[object, bool]:
    """The YAML document in `text` (as `yaml.load` with the safe `_Loader` does), and whether it
    holds a too long integer (then `_refuse_huge` names its key)."""
    loader = _Loader(text)
    try:
        return loader.get_single_data(), loader.met_huge
    finally:
        loader.dispose()


def _refuse_huge(document: object, source: str, key: str = "") -> None:
    """A ConfigError naming the key of the first too long integer in `document` (under `key`)."""
    huge = find_huge(document)
    if huge is not None:
        path, marker = huge
        where = ".".join([*([key] if key else []), *map(str, path)])
        raise ConfigError([ConfigProblem(source, where, marker.problem())])


def _read_yaml(path: Path) -> dict[str, JsonValue]:
    try:
        data = read_user_file(path, CONFIG_MAX_BYTES, "config file")
    except InputFileError as exc:
        raise ConfigError([ConfigProblem(str(path), "", exc.problem)]) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        problem = f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})"
        raise ConfigError([ConfigProblem(str(path), "", problem)]) from None
    try:
        document, huge = _load_yaml(text)  # a SafeLoader
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError([ConfigProblem(where, "", f"invalid YAML: {problem}")]) from None
    except RecursionError:
        raise ConfigError([ConfigProblem(str(path), "", "invalid YAML: nested too deeply")]) from None
    if huge:
        _refuse_huge(document, str(path))
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise ConfigError([ConfigProblem(str(path), "", "expected a mapping of sections at the top level")])
    return document


@functools.cache
def _defaults_json() -> dict[str, JsonValue]:
    """The defaults as JSON, built once: an override's key is checked against them."""
    return Config().model_dump(mode="json")


def _refuse_secret(key: str, value: object) -> None:
    """A Spark secret (a spark_conf key Spark would redact) given with `--set`: refused, as `ps` shows
    it and the supervisor and the driver would be started with it on their command lines too."""
    parts = key.split(".")
    if "spark_conf" not in parts:
        return
    below = ".".join(parts[parts.index("spark_conf") + 1:])
    keys = [below] if below else [str(k) for k in value] if isinstance(value, dict) else []
    secret = next((k for k in keys if SPARK_SECRET_KEY.search(k)), None)
    if secret is not None:
        raise ConfigError([ConfigProblem("--set", key, (
            f"{printable(secret)} is a secret (Spark redacts it): on the command line `ps` shows it to "
            "every user of the host, and the app's supervisor and driver would carry it too; put it in "
            "the config file's apps[].spark_conf (mode 0600)"))])


def _apply_override(raw: dict[str, Any], item: str) -> str:
    """Apply one `dotted.key=value` to the raw config; list items are addressed by index or name."""
    key, sep, text = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError([ConfigProblem("--set", item, "expected KEY=VALUE, e.g. policy.target_utilization=0.7")])
    try:
        value, huge = _load_yaml(text) if text.strip() else ("", False)  # a SafeLoader
    except yaml.YAMLError as exc:
        if text.strip().startswith(("{", "[")):  # meant as a list or mapping: say what is wrong with it
            problem = getattr(exc, "problem", None) or str(exc)
            raise ConfigError([ConfigProblem("--set", key, f"invalid YAML: {problem}", text, True)]) from None
        value, huge = text, False  # anything else that is not YAML is a plain string
    except RecursionError:
        raise ConfigError([ConfigProblem("--set", key, "invalid YAML: nested too deeply")]) from None
    if isinstance(value, (dict, list)) and not text.strip().startswith(("{", "[")):
        value, huge = text, False  # `prefix=foo:` is the string "foo:", not the mapping {"foo": None}
    if huge:
        _refuse_huge(value, "--set", key)
    _refuse_secret(key, value)
    parts = key.split(".")
    resolved: list[str] = []  # the key as validation errors will name it (list items by index)
    node: object = raw
    default: object = _defaults_json()
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if isinstance(node, list):
            index = _list_index(node, part)
            if index is None:
                raise ConfigError([ConfigProblem("--set", key, f"no list item {part!r} (use an index or a name)")])
            resolved.append(str(index))
            if last:
                node[index] = value
            else:
                node, default = node[index], None
            continue
        if not isinstance(node, dict):
            raise ConfigError([ConfigProblem("--set", key, f"{'.'.join(parts[:i])} is not a section")])
        resolved.append(part)
        if last:
            node[part] = value
            break
        child_default = default.get(part) if isinstance(default, dict) else None
        if part not in node:
            # A list the file did not mention starts from its default (e.g. the default apps).
            node[part] = copy.deepcopy(child_default) if isinstance(child_default, list) else {}
        node, default = node[part], child_default
    return ".".join(resolved)


def _list_index(items: list[object], part: str) -> int | None:
    if part.isdigit():
        return int(part) if int(part) < len(items) else None
    for i, item in enumerate(items):
        if isinstance(item, dict) and item.get("name") == part:
            return i
    return None


def _problem(err: ErrorDetails, source: str, set_keys: list[str], raw: object = None) -> ConfigProblem:
    loc = tuple(err["loc"])
    key = ".".join(str(p) for p in loc)
    if any(key == k or key.startswith(k + ".") or k.startswith(key + ".") for k in set_keys):
        source = "--set"
    kind = err["type"]
    if kind == "extra_forbidden":
        fields = _fields_at(loc[:-1])
        close = difflib.get_close_matches(str(loc[-1]), fields, n=1, cutoff=0.6)
        hint = f"; did you mean {'.'.join([*map(str, loc[:-1]), close[0]])!r}?" if close else ""
        known = f" (known keys here: {', '.join(sorted(fields))})" if fields and not close else ""
        return ConfigProblem(source, key, f"unknown key{hint}{known}")
    message = err["msg"]
    if kind == "value_error":
        message = message.removeprefix("Value error, ")
    elif kind == "literal_error":
        message = message.replace("Input should be", "expected one of")
    else:
        message = message.replace("Input should be", "expected")
    app = _app_name(raw, loc)
    if app is not None:
        message = f"{message} (app {app!r})"
    value = err.get("input")
    # A whole section's value (from a cross-field check) would bury the message: leave it out.
    shown = "input" in err and kind != "missing" and not isinstance(value, (dict, list))
    return ConfigProblem(source, key, message, value, shown)


def _app_name(raw: object, loc: tuple[int | str, ...]) -> str | None:
    """The name of the app a problem under `apps.<i>` is about, so the message names it."""
    if len(loc) < 2 or loc[0] != "apps" or not isinstance(loc[1], int) or not isinstance(raw, dict):
        return None
    apps = raw.get("apps")
    if isinstance(apps, list) and loc[1] < len(apps) and isinstance(apps[loc[1]], dict):
        name = apps[loc[1]].get("name")
        return str(name) if name is not None else None
    return None


def _fields_at(loc: tuple[int | str, ...]) -> list[str]:
    """Field names of the section that `loc` points at (for "did you mean")."""
    model: object = Config
    for part in loc:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(part) if _is_model(model) else None
        if field is None:
            section = model.section_model(str(part)) if _sectioned(model) else None
            if section is None:
                return []
            model = section
            continue
        model = _unwrap(field.annotation)
    if _sectioned(model):
        names: list[str] = model.section_names()
        return names
    return list(model.model_fields) if _is_model(model) else []


def _sectioned(model: object) -> TypeGuard[type[SectionedConfig]]:
    return isinstance(model, type) and issubclass(model, SectionedConfig)


def _unwrap(annotation: object) -> object:
    origin = typing.get_origin(annotation)
    if origin in (list, typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            if _is_model(_unwrap(arg)):
                return _unwrap(arg)
    return annotation


def _is_model(obj: object) -> TypeGuard[type[BaseModel]]:
    return isinstance(obj, type) and issubclass(obj, BaseModel)
