"""Every key of the config file, read off the models (issue 34): its dotted path, type, default,
bounds, description and an example. One walk serves the generated reference (reference.py), the
check that every key is described (tests/unit/test_config_reference.py) and `check-config --explain`.

Paths name list items `[]` (`apps[].mode`); a registered component's settings section is its name
under the section that holds it (`policy.ds2.catch_up_s`, `placement.edrp.downtime.sync_s`).
"""

from __future__ import annotations

import enum
import math
import types
import typing
from dataclasses import dataclass
from typing import TypeGuard

import annotated_types
import yaml
from pydantic import BaseModel, JsonValue, TypeAdapter
from pydantic.fields import FieldInfo
from typing_extensions import TypeForm

from sparkscale.config.sectioned import SectionedConfig
from sparkscale.config.sections import Config

_NO_EXAMPLE: tuple[object, ...] = (None, [], {}, "")


@dataclass(frozen=True)
class KeyDoc:
    """One key of the config file: a setting, or a section (a model, or a list of models)."""

    key: str  # the dotted path, list items as `[]`
    model: type[BaseModel]  # the model that declares it
    name: str  # its name there
    field: FieldInfo | None  # None: a registered component's section (`policy.ds2`)
    section_model: type[BaseModel] | None  # the model of a section's items; None for a setting

    @property
    def is_section(self) -> bool:
        return self.section_model is not None

    @property
    def is_list(self) -> bool:
        return self.key.endswith("[]")

    @property
    def description(self) -> str:
        if self.field is not None:
            return " ".join((self.field.description or "").split())
        doc = (self.section_model.__doc__ or "") if self.section_model is not None else ""
        return " ".join(doc.strip().split("\n\n")[0].split())

    @property
    def type_text(self) -> str:
        if self.field is None:
            return "section"
        return type_text(self.field.annotation)

    @property
    def has_default(self) -> bool:
        return self.field is None or not self.field.is_required()

    def default(self) -> JsonValue:
        """The default as JSON would hold it (a section's: its model's defaults)."""
        if self.field is None:
            return _json(self.section_model, self.section_model() if self.section_model else None)
        value = self.field.get_default(call_default_factory=True)
        if isinstance(value, list) and value and all(isinstance(v, BaseModel) for v in value):
            return [v.model_dump(mode="json", exclude_unset=True) for v in value]
        return _json(self.field.annotation, value)

    @property
    def default_text(self) -> str:
        return yaml_text(self.default()) if self.has_default else "required"

    @property
    def bounds_text(self) -> str:
        return "" if self.field is None else bounds_text(self.field)

    def example(self) -> JsonValue:
        """The field's first example, else its default if that shows a value (not null or empty);
        None: none (the reference test asks every setting for one)."""
        if self.field is not None and self.field.examples:
            first: JsonValue = self.field.examples[0]
            return first
        default = self.default() if self.has_default else None
        return None if default in _NO_EXAMPLE else default

    @property
    def example_text(self) -> str:
        example = self.example()
        return "" if example is None else yaml_text(example)


def config_keys(model: type[BaseModel] = Config, prefix: str = "", builtin_only: bool = False) -> list[KeyDoc]:
    """Every key under `model`, depth first: a section's settings, then its sections (each followed
    by its own keys), then the settings sections of the components registered under it (with
    `builtin_only`, only those of the product's own components, not a plug-in's)."""
    settings: list[KeyDoc] = []
    nested: list[KeyDoc] = []
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        item, many = section_of(field.annotation)
        if item is None:
            settings.append(KeyDoc(path, model, name, field, None))
        else:
            section = KeyDoc(f"{path}[]" if many else path, model, name, field, item)
            nested += [section, *config_keys(item, section.key + ".", builtin_only)]
    if isinstance(model, type) and issubclass(model, SectionedConfig):
        for name in sorted(model.registry.names()):  # by name: registration follows import order
            component = model.section_model(name)
            if component is None or (builtin_only and not _builtin(model, name)):
                continue
            section = KeyDoc(f"{prefix}{name}", model, name, None, component)
            nested += [section, *config_keys(component, section.key + ".", builtin_only)]
    return settings + nested


def section_of(annotation: object) -> tuple[type[BaseModel] | None, bool]:
    """The model a field's values are (a model, an optional one, or a list of them) and whether
    it is a list; (None, False) for a setting."""
    if _is_model(annotation):
        return annotation, False
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is list and args and _is_model(args[0]):
        return args[0], True
    if origin in (typing.Union, types.UnionType):
        for arg in args:
            item, many = section_of(arg)
            if item is not None:
                return item, many
    return None, False


_SCALARS: dict[object, str] = {bool: "boolean", int: "integer", float: "number", str: "string"}


def type_text(annotation: object) -> str:
    """A type as the YAML file writes it: `number`, `integer or null`, `list of string`..."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is type(None):
        return "null"
    if origin in (typing.Union, types.UnionType):
        return " or ".join(type_text(a) for a in args)
    if origin is list:
        return f"list of {type_text(args[0])}"
    if origin is dict:
        return f"mapping of {type_text(args[0])} to {type_text(args[1])}"
    if origin is typing.Literal or (isinstance(annotation, type) and issubclass(annotation, enum.Enum)):
        return "string"
    if _is_model(annotation):
        return "section"
    return _SCALARS.get(annotation, str(annotation))


def choices(annotation: object) -> tuple[str, ...]:
    """The values a Literal or an enum (or an optional one) admits; () for any other type."""
    if typing.get_origin(annotation) is typing.Literal:
        return tuple(str(a) for a in typing.get_args(annotation))
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return tuple(str(m.value) for m in annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return tuple(c for a in typing.get_args(annotation) for c in choices(a))
    return ()


def bounds_text(field: FieldInfo) -> str:
    """The field's constraints: an interval (`[1, 16]`, `(0, 1]`), one bound (`>= 0`) or its choices."""
    allowed = choices(field.annotation)
    if allowed:
        return "one of " + ", ".join(allowed)
    low = high = None
    for item in field.metadata:
        if isinstance(item, annotated_types.Ge):
            low = f"[{_number(item.ge)}"
        elif isinstance(item, annotated_types.Gt):
            low = f"({_number(item.gt)}"
        elif isinstance(item, annotated_types.Le):
            high = f"{_number(item.le)}]"
        elif isinstance(item, annotated_types.Lt):
            high = f"{_number(item.lt)})"
    if low and high:
        return f"{low}, {high}"
    if low:
        return (">= " if low[0] == "[" else "> ") + low[1:]
    if high:
        return ("<= " if high[-1] == "]" else "< ") + high[:-1]
    return ""


def yaml_text(value: object) -> str:
    """`value` as one line of YAML (flow style): `null`, `120.0`, `[Sat 00:00-06:00]`."""
    text: str = yaml.safe_dump(value, default_flow_style=True, width=math.inf, sort_keys=False)
    return text.strip().removesuffix("...").strip()


def _builtin(model: type[SectionedConfig], name: str) -> bool:
    """Whether the component registered as `name` is one of the registry's own package."""
    module = str(getattr(model.registry.get(name), "__module__", ""))
    return model.registry.package is not None and module.startswith(model.registry.package + ".")


def _json(annotation: TypeForm[object] | None, value: object) -> JsonValue:
    if value is None:
        return None
    adapter = TypeAdapter[object](type(None) if annotation is None else annotation)  # None: NoneType
    dumped: JsonValue = adapter.dump_python(value, mode="json")
    return dumped


def _number(value: object) -> str:
    return str(value) if isinstance(value, int) else f"{value:g}"


def _is_model(obj: object) -> TypeGuard[type[BaseModel]]:
    return isinstance(obj, type) and issubclass(obj, BaseModel)
