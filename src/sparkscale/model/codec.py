"""Reading and writing the models' JSON with pydantic, with the project's errors.

Each persisted or sent record is a (frozen) dataclass whose field annotations say what its JSON
holds; `Codec(Model)` reads and writes it through a pydantic TypeAdapter, so that no record keeps a
hand-written parser that can drift from its writer. Input a user or another process wrote is
checked with the `fields.py` checks (`Check`, `between`, `whole`, `NAME`, ...): exact JSON types
(`true` is no number, `"5"` no integer), finite numbers within stated bounds, and the messages
users already know. A pydantic ValidationError never leaves a codec: it becomes a FieldError (or
the record's subclass of it) naming the field path (`decisions[0].plan.actions[1].to`).

A class whose JSON differs from its fields (keys kept for a newer writer, a sibling key, a list
form) says so in its own `__get_pydantic_core_schema__`, with `reshaped` and `json_form` below.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping
from enum import StrEnum
from functools import cached_property
from typing import Annotated, Any, Generic, TypeVar

from pydantic import GetCoreSchemaHandler, JsonValue, PlainSerializer, TypeAdapter, ValidationError
from pydantic_core import CoreSchema, core_schema

from sparkscale.model.fields import (
    FieldError,
    boolean,
    describe,
    integer,
    join,
    number,
    object_at,
    only_known,
    parse_json,
    string,
)

T = TypeVar("T")
F = TypeVar("F")
E = TypeVar("E", bound=FieldError)


# -- field checks ----------------------------------------------------------------------------------


class Check:
    """Annotation metadata: the field is validated by `check(value)` (a `fields.py` check, raising
    FieldError with a path relative to the field) and written back as it is (an integer stays one)."""

    def __init__(self, check: Callable[[object], object]) -> None:
        self.check = check

    def __get_pydantic_core_schema__(self, source: object, handler: GetCoreSchemaHandler) -> CoreSchema:
        return core_schema.no_info_plain_validator_function(self.check)


def between(low: float | None = None, high: float | None = None, *, strict: bool = False,
            smallest: float | None = None) -> Check:
    """A finite JSON number in [low, high] (`fields.number`)."""
    return Check(lambda value: number(value, "", low, high, strict, smallest))


def whole(low: int, high: int | None = None) -> Check:
    """A JSON integer (not `true`) in [low, high] (`fields.integer`)."""
    return Check(lambda value: integer(value, "", low, high))


def text(value: object, path: str = "") -> str:
    """A string, possibly empty (a reason, an explanation line)."""
    if not isinstance(value, str):
        raise FieldError(path, f"expected a string (got {describe(value)})")
    return value


def one_of(names: type[StrEnum]) -> Check:
    """One of the names of a StrEnum (read as its member, written as its string)."""

    def check(value: object) -> StrEnum:
        if isinstance(value, str) and value in names.__members__.values():
            return names(value)
        raise FieldError("", f"expected one of {', '.join(names)} (got {describe(value)})")

    return Check(check)


def _as_it_is(value: object) -> object:
    return value


# Arbitrary JSON (an agent's answer, a command's arguments): read as JSON, written as whatever the
# writer holds (a tuple as a list; what JSON has no form for as its string).
Json = Annotated[JsonValue, PlainSerializer(_as_it_is, return_type=Any)]

NAME = Check(lambda value: string(value, ""))  # a non-empty string
TEXT = Check(text)
FLAG = Check(lambda value: boolean(value, ""))


# -- JSON shapes that differ from the fields ---------------------------------------------------------


def reshaped(handler: GetCoreSchemaHandler, source: object, load: Callable[[object], object] | None = None,
             dump: Callable[[dict[str, Any]], object] | None = None) -> CoreSchema:
    """`source`'s own schema, its input passed through `load` first and its output through `dump`
    (which gets the fields as JSON, by alias)."""
    # The class's reference (its definition where it is used again) must name the reshaped schema,
    # not the plain one inside it: a second field of the class would be read and written plainly.
    plain = handler(source)
    schema: Any = {k: v for k, v in plain.items() if k != "ref"}
    out: Any = schema if load is None else core_schema.no_info_before_validator_function(load, schema)
    if dump is not None:
        def write(value: object, fields: core_schema.SerializerFunctionWrapHandler) -> object:
            return dump(fields(value))

        out = {**out, "serialization": core_schema.wrap_serializer_function_ser_schema(write, schema=schema)}
    ref = plain.get("ref")
    return out if ref is None else {**out, "ref": ref}


def json_form(handler: GetCoreSchemaHandler, form: object, build: Callable[[F], T],
              split: Callable[[T], F]) -> CoreSchema:
    """A class read and written as another (`form`: its JSON's own dataclass): `build` makes the
    class from a validated form, `split` the form from the class."""
    schema = handler.generate_schema(form)
    return core_schema.no_info_after_validator_function(
        build, schema, serialization=core_schema.plain_serializer_function_ser_schema(split, return_schema=schema))


def known_keys(value: object, keys: Collection[str]) -> Mapping[str, Any]:
    """`value` as an object whose keys are all among `keys` (a typo is refused, not ignored)."""
    obj = object_at(value, "")
    only_known(obj, tuple(keys), "")
    return obj


def without_nulls(obj: Mapping[str, Any], keys: Collection[str]) -> dict[str, JsonValue]:
    """`obj` without the `keys` whose value is null: for them null means absent (the default)."""
    return {k: v for k, v in obj.items() if not (k in keys and v is None)}


def ordered(data: Mapping[str, Any], keys: Collection[str]) -> dict[str, JsonValue]:
    """`data` with `keys` first, in that order, then the rest as they come."""
    return {**{k: data[k] for k in keys if k in data}, **{k: v for k, v in data.items() if k not in keys}}


# -- errors ----------------------------------------------------------------------------------------


_OBJECT_TYPES = {"dataclass_type", "dict_type", "model_type", "typed_dict_type", "model_attributes_type",
                 "mapping_type", "dataclass_exact_type"}
_LIST_TYPES = {"list_type", "tuple_type", "iterable_type", "set_type", "frozen_set_type"}


def field_error(exc: ValidationError, error: type[E], label: str = "") -> E:
    """The first problem of a ValidationError as `error`: its field path and what is wrong there.
    `label` names the whole document when the problem is with it (`history: expected an object`)."""
    first = exc.errors(include_url=False)[0]
    path = ""
    for key in first["loc"]:
        path = join(path, key)
    kind, value = first["type"], first.get("input")
    cause = (first.get("ctx") or {}).get("error")
    if isinstance(cause, FieldError):  # a check's, its path relative to the value checked
        path, problem = cause.under(path).path, cause.problem
    elif kind == "value_error" and cause is not None:
        problem = str(cause)
    elif kind == "missing":
        problem = "missing"
    elif kind in _OBJECT_TYPES:
        problem = f"expected an object (got {describe(value)})"
    elif kind in _LIST_TYPES:
        problem = f"expected a list (got {describe(value)})"
    elif kind in ("enum", "literal_error"):
        problem = f"expected {first['ctx']['expected']} (got {describe(value)})"
    elif kind == "extra_forbidden":
        problem = "unknown key"
    else:
        problem = f"{first['msg'][:1].lower()}{first['msg'][1:]} (got {describe(value)})"
    return error(path or label, problem)


class Codec(Generic[T]):
    """One model's JSON. `load` reads parsed JSON (raising `error`, a FieldError, that names the
    field; `label` names the document), `loads` JSON text or UTF-8 bytes; `dump` gives JSON-able
    data, `dumps` its text. The pydantic adapter is built on first use (the classes it reads may
    be defined after the codec)."""

    def __init__(self, model: type[T], error: type[FieldError] = FieldError, label: str = "") -> None:
        self.model = model
        self.error = error
        self.label = label

    @cached_property
    def adapter(self) -> TypeAdapter[T]:
        return TypeAdapter(self.model)

    def load(self, data: object) -> T:
        try:
            return self.adapter.validate_python(data)
        except ValidationError as exc:
            raise field_error(exc, self.error, self.label) from None

    def loads(self, data: str | bytes) -> T:
        try:
            document = parse_json(data)
        except FieldError as exc:
            raise self.error(exc.path or self.label, exc.problem, exc.source) from None
        return self.load(document)

    def dump(self, value: T) -> object:
        return self.adapter.dump_python(value, mode="json", by_alias=True, fallback=str)

    def dump_object(self, value: T) -> dict[str, JsonValue]:
        """`dump` of a model written as a JSON object."""
        data = self.dump(value)
        assert isinstance(data, dict), type(data)
        return data

    def dumps(self, value: T, indent: int | None = None) -> str:
        return json.dumps(self.dump(value), indent=indent)
