"""Reading user JSON (snapshot and decision-history files) field by field.

A file a user hands to a command is untrusted input: it is read once, here, and every error names
the file, the field path (`operators[2].instances[0].useful_time_s`) and the problem, so that the
command can print one line and exit 2 instead of failing somewhere inside a policy. Numbers are
finite and within stated bounds, because a policy's arithmetic on 1e308 or 5e-324 overflows (or
divides by what is zero in effect) long after the field that caused it is forgotten.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeGuard

from pydantic import JsonValue

from sparkscale.bounded import DATA_MAX_BYTES, BoundedInts, InputFileError, find_huge, printable, read_user_file

MAX_DEPTH = 100  # nesting of a JSON document; deeper ones are refused before anything recurses on them
MAX_TIME = 1e11  # seconds since the epoch (the year 5138): the latest time a record may name

MISSING = object()


class FieldError(ValueError):
    """A field that cannot be used: `path` is the field path (`operators[2].parallelism`, "" for the
    whole document), `source` the file it came from (None: not from a file)."""

    def __init__(self, path: str, problem: str, source: str | None = None):
        self.path = path
        self.problem = problem
        self.source = source
        where = f"{source}: " if source else ""
        super().__init__(printable(f"{where}{path}: {problem}" if path else f"{where}{problem}"))

    def under(self, prefix: str) -> FieldError:
        """The same error for the document found at `prefix` of a larger one (`[1]` of a list)."""
        path = self.path if not prefix else prefix + (self.path if self.path.startswith("[") else
                                                      f".{self.path}" if self.path else "")
        return type(self)(path, self.problem, self.source)

    def in_file(self, source: str) -> FieldError:
        return type(self)(self.path, self.problem, source)


def read_json(path: str | Path) -> JsonValue:
    """The JSON document in the file `path`; a FieldError (path "") names the file and what is
    wrong with it: unreadable, not a regular file, above the size cap (bounded.py), not UTF-8, not
    JSON, nested too deeply."""
    source = str(path)
    try:
        data = read_user_file(path, DATA_MAX_BYTES, "snapshot or history file")
    except InputFileError as exc:
        raise FieldError("", exc.problem, source) from None
    return parse_json(data, source)


def parse_json(data: str | bytes, source: str | None = None) -> JsonValue:
    """A JSON document from text or UTF-8 bytes; a FieldError (path "") says why it is not one."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise FieldError("", f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})",
                             source) from None
    ints = BoundedInts()
    document: JsonValue = None
    try:
        document = json.loads(data, parse_int=ints)
        too_deep = _depth_exceeds(document, MAX_DEPTH)
    except json.JSONDecodeError as exc:
        raise FieldError("", f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}", source) from None
    except RecursionError:
        too_deep = True
    if too_deep:
        raise FieldError("", f"invalid JSON: nested deeper than {MAX_DEPTH} levels", source)
    huge = find_huge(document) if ints.met_huge else None
    if huge is not None:
        where = ""
        for key in huge[0]:
            where = join(where, key)
        raise FieldError(where, huge[1].problem(), source)
    return document


def _depth_exceeds(document: object, limit: int) -> bool:
    """Whether lists and objects nest deeper than `limit` (iterative: a deep one must not recurse)."""
    stack = [(document, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        for child in children:
            if isinstance(child, (dict, list)):
                if depth + 1 > limit:
                    return True
                stack.append((child, depth + 1))
    return False


# -- typed fields ---------------------------------------------------------------------------------


def join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def describe(value: object) -> str:
    """A short rendering of a bad value for an error message."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**40:
        return f"an integer of {len(str(abs(value)))} digits"
    text = json.dumps(value) if isinstance(value, (str, int, float, bool, type(None))) else type(value).__name__
    return text if len(text) <= 40 else text[:37] + "..."


def get(obj: Mapping[str, JsonValue], key: str, path: str, default: object = MISSING) -> object:
    if key in obj:
        return obj[key]
    if default is MISSING:
        raise FieldError(join(path, key), "missing")
    return default


def only_known(obj: Mapping[str, JsonValue], known: Sequence[str], path: str) -> None:
    """Refuse keys outside `known` (a typo must not be silently ignored), naming the first."""
    for key in obj:
        if key not in known:
            raise FieldError(join(path, str(key)), f"unknown key (known keys here: {', '.join(known)})")


def object_at(value: object, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise FieldError(path, f"expected an object (got {describe(value)})")
    return value


def list_at(value: object, path: str) -> Sequence[object]:
    if not isinstance(value, list):
        raise FieldError(path, f"expected a list (got {describe(value)})")
    return value


def string(value: object, path: str) -> str:
    if not isinstance(value, str) or not value:
        raise FieldError(path, f"expected a non-empty string (got {describe(value)})")
    return value


def optional_string(value: object, path: str) -> str | None:
    return None if value is None else string(value, path)


def boolean(value: object, path: str) -> bool:
    if not isinstance(value, bool):
        raise FieldError(path, f"expected true or false (got {describe(value)})")
    return value


def is_number(value: object) -> TypeGuard[float]:
    """A JSON number that is finite as a float (an integer too large for a float is not)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def number(value: object, path: str, low: float | None = None, high: float | None = None, strict: bool = False,
           smallest: float | None = None) -> float:
    """A finite number in [low, high] (`strict`: above `low`); `smallest`: a value other than 0
    must be at least that (a smaller one is noise, and dividing by it overflows)."""
    if not (is_number(value) and (low is None or (value > low if strict else value >= low))
            and (high is None or value <= high) and (smallest is None or value == 0 or abs(value) >= smallest)):
        raise FieldError(path, f"expected {_range(low, high, strict, smallest)} (got {describe(value)})")
    return value  # an int stays one: written back as it was read


def optional_number(value: object, path: str, low: float | None = None, high: float | None = None,
                    strict: bool = False, smallest: float | None = None) -> float | None:
    return None if value is None else number(value, path, low, high, strict, smallest)


def integer(value: object, path: str, low: int, high: int | None = None) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f">= {low} and <= {high}"
        raise FieldError(path, f"expected an integer {bound} (got {describe(value)})")
    return value


def optional_integer(value: object, path: str, low: int, high: int | None = None) -> int | None:
    return None if value is None else integer(value, path, low, high)


def _range(low: float | None, high: float | None, strict: bool, smallest: float | None) -> str:
    text = "a number"
    if low is not None:
        text += f" {'>' if strict else '>='} {low:g}"
        if smallest is not None and (strict or low != 0):
            text += f" (at least {smallest:g})"
    if high is not None:
        text += f"{' and' if low is not None else ''} <= {high:g}"
    if smallest is not None and low == 0 and not strict:
        text += f", 0 or at least {smallest:g}"
    return text
