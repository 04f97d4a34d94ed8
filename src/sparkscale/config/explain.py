"""`sparkscale check-config FILE --explain KEY`: one key's type, default, bounds, description and
example (keys.py), and the value a loaded config gives it (each app's for an app key). Pure: text.

A key is written as the reference writes it (`apps[].mode`), without the brackets (`apps.mode`), or
as `--set` addresses it (`apps.wordcount.mode`, `apps.0.mode`: that app only).
"""

from __future__ import annotations

import difflib
import textwrap
from dataclasses import dataclass

from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from sparkscale.config.keys import KeyDoc, config_keys, yaml_text
from sparkscale.config.sections import Config

MAX_SUGGESTIONS = 3


class UnknownKey(ValueError):
    """A key no model declares; `close` are the known keys nearest to it (best first)."""

    def __init__(self, key: str, close: list[str], problem: str = "unknown key"):
        self.key = key
        self.close = close
        hint = f"; closest known: {', '.join(close)}" if close else "; docs/configuration.md lists every key"
        super().__init__(f"{problem} {key!r}{hint}")


@dataclass(frozen=True)
class KeyRef:
    """A key as asked for: its documentation and, for a list item named by index or name, which one."""

    doc: KeyDoc
    item: str | None = None  # e.g. "wordcount" of `apps.wordcount.mode`


def find_key(text: str, keys: list[KeyDoc] | None = None) -> KeyRef:
    """The key `text` names; UnknownKey naming the closest known ones otherwise."""
    known = {k.key: k for k in (keys if keys is not None else config_keys())}
    found = _resolve(known, text.strip().split("."), "", None)
    if found is None:
        raise UnknownKey(text, closest(text, list(known)))
    path, item = found
    return KeyRef(known[path], item)


def _resolve(known: dict[str, KeyDoc], parts: list[str], path: str, item: str | None) -> tuple[str, str | None] | None:
    """(the documented key, the list item named) that `parts` after `path` lead to, or None. Right after
    a list, a part is tried as a key first, then as the item's index or name (`apps.taxi.mode`: the
    app taxi, though `apps[].taxi` is a section too)."""
    if not parts:
        return (path, item) if path else None
    part, rest = parts[0], parts[1:]
    name = part.removesuffix("[]")
    candidate = f"{path}.{name}" if path else name
    for key in (candidate, candidate + "[]"):
        if key in known:
            found = _resolve(known, rest, key, item)
            if found is not None:
                return found
    if path.endswith("[]") and item is None and rest and not part.endswith("[]"):
        return _resolve(known, rest, path, part)
    return None


def closest(text: str, keys: list[str]) -> list[str]:
    """Up to MAX_SUGGESTIONS known keys near `text`: the same last name first, then near spellings
    of the whole path, then of the last name alone."""
    plain = {k.replace("[]", ""): k for k in keys}
    wanted = text.strip().replace("[]", "")
    leaf = wanted.rsplit(".", 1)[-1]
    leaves: dict[str, list[str]] = {}
    for p, k in plain.items():
        leaves.setdefault(p.rsplit(".", 1)[-1], []).append(k)
    found = list(leaves.get(leaf, []))
    found += [plain[p] for p in difflib.get_close_matches(wanted, list(plain), n=MAX_SUGGESTIONS, cutoff=0.6)]
    for near in difflib.get_close_matches(leaf, list(leaves), n=MAX_SUGGESTIONS, cutoff=0.75):
        found += leaves[near]
    return list(dict.fromkeys(found))[:MAX_SUGGESTIONS]


def explain(ref: KeyRef, cfg: Config, source: str) -> str:
    """What `check-config --explain` prints for `ref`, with the value(s) `cfg` (read from `source`) gives
    it; UnknownKey when `ref` names a list item `cfg` does not have."""
    doc = ref.doc
    lines = [doc.key, *textwrap.wrap(doc.description, 96, initial_indent="  ", subsequent_indent="  ")]
    if doc.is_section:
        under = [k.key for k in config_keys() if k.key.startswith(doc.key + ".") and "." not in
                 k.key[len(doc.key) + 1:]]
        lines += textwrap.wrap(f"section; its keys: {', '.join(under)}", 96, initial_indent="  ",
                               subsequent_indent="    ", break_on_hyphens=False)
        if doc.is_list:
            lines.append(f"  default: {doc.default_text}")
        return "\n".join(lines)
    lines += [f"  type:    {doc.type_text}", f"  default: {doc.default_text}"]
    if doc.bounds_text:
        lines.append(f"  bounds:  {doc.bounds_text}")
    if doc.example_text:
        lines.append(f"  example: {doc.example_text}")
    found = values(cfg, doc.key, ref.item)
    if ref.item is not None and not found:
        every = [label for label, _value, _given in values(cfg, doc.key)]
        raise UnknownKey(doc.key.replace("[]", f".{ref.item}", 1).replace("..", "."), every[:MAX_SUGGESTIONS],
                         f"no list item {ref.item!r} in {source} for the key")
    if "[]" not in doc.key:
        _label, value, given = found[0]
        lines.append(f"  in {source}: {_shown(value, given)}")
    elif not found:
        lines.append(f"  in {source}: no items")
    else:
        lines.append(f"  in {source}:")
        lines += [f"    {label}: {_shown(value, given)}" for label, value, given in found]
    return "\n".join(lines)


def values(cfg: BaseModel, key: str, item: str | None = None) -> list[tuple[str, object, bool]]:
    """(where, value, whether the file set it) of `key` in `cfg`; a list's items each named by their
    `name` (an app's) or index, as `--set` addresses them; with `item`, that item only."""
    return _values(cfg, key.split("."), "", item)


def _values(obj: BaseModel, parts: list[str], label: str, item: str | None) -> list[tuple[str, object, bool]]:
    name = parts[0].removesuffix("[]")
    value = getattr(obj, name)
    given = name in obj.model_fields_set or name in (obj.__pydantic_extra__ or {})
    here = f"{label}.{name}" if label else name
    if len(parts) == 1:
        return [(here, value, given)]
    if not parts[0].endswith("[]"):
        return _values(value, parts[1:], here, item)
    found: list[tuple[str, object, bool]] = []
    for index, element in enumerate(value):
        tag = str(getattr(element, "name", index))
        if item is None or item in (tag, str(index)):
            found += _values(element, parts[1:], f"{here}.{tag}", None)
    return found


def _shown(value: object, given: bool) -> str:
    text = yaml_text(to_jsonable_python(value))
    return text if given else f"{text} (not set: the default)"
