"""Every `typing.Any` in the product (src/sparkscale), each with the reason it is there (issue 31:
`Any` only where a value truly is arbitrary JSON or a library gives no type).

A use is classified by where it stands, the first rule that applies:

- the reason `REASONS` gives for its function or class (`path::Qualified.name`, innermost first);
- library: anywhere in a module `REASONS` gives "library" (its `dict[str, Any]` are keyword
  arguments of the library's calls, not JSON);
- json: the value type of `dict[str, Any]` / `Mapping[str, Any]` (a JSON object read by key: an
  event, a REST answer before parsing, a snapshot extension, a journal's marks);
- structlog: in the signature of a structlog processor (a parameter `event_dict`) or the type of one
  (`Callable[[Any, str, Any], Any]`): structlog's own types are Any there;
- pydantic: in a pydantic hook (`__get_pydantic_core_schema__`, a `*validator` / `*serializer`);
- else the reason `REASONS` gives for its module (`path`). The reasons: json, py4j (a py4j proxy of
  a JVM object), pydantic, structlog, library (kazoo, redis, click, PyYAML, SciPy: values their
  libraries leave untyped);
- else other: a use that should get a precise type.

Run `python tests/unit/any_audit.py` for the table (per category, and per file with -v).
"""

from __future__ import annotations

import ast
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

PRODUCT = Path(__file__).resolve().parents[2] / "src" / "sparkscale"
CATEGORIES = ("json", "py4j", "pydantic", "structlog", "library", "other")
_MAPPINGS = {"dict", "Mapping", "MutableMapping"}

# Reviewed reasons for the uses no syntax rule classifies (issue 31); keys are paths under
# src/sparkscale, optionally with `::` and the qualified name of the enclosing function or class.
REASONS: dict[str, str] = {
    # the control agent's answer to a command (protocol/commands.py's Ack.detail), read by key
    "actuators/executors.py::ExecutorChange._command": "json",
    "actuators/migration/recovery.py": "json",
    "actuators/migration/session.py::MigrationSession._command": "json",
    "monitors/spark_master.py::get_json": "json",  # the master's /json/ answer, read by key
    "protocol/streams.py::read_source_status.js": "json",  # a JSON field of the source status hash
    # the driver side: py4j proxies of JVM objects (the JVM view, Scala objects, a Java Trigger)
    "agent/executors.py": "py4j",
    "agent/hooks.py": "py4j",
    # pydantic: core schema dicts, a serializer's return type, a sectioned config's extra sections
    # (pydantic types `__pydantic_extra__` values Any; each is its component's own model)
    "model/codec.py": "pydantic",
    "config/sectioned.py::SectionedConfig.section": "pydantic",
    "config/sectioned.py::SectionedConfig.__getattr__": "pydantic",
    # libraries' own signatures and untyped values
    "cli/common.py": "library",  # click decorators take and give any command function
    "cli/offline.py::FiniteRange.convert": "library",  # click's ParamType.convert
    "cli/reference.py": "library",  # click.ParamType[Any, Any]
    "config/loading.py::_Loader.construct_mapping": "library",  # PyYAML's constructor
    "policies/placement/edrp.py::_Milp.solve": "library",  # SciPy's OptimizeResult (no stubs)
    "redisconn.py": "library",  # keyword arguments of redis.Redis
    "zkconn.py": "library",  # KazooClient's keyword arguments and async results (kazoo has no types)
}


@dataclass(frozen=True)
class AnyUse:
    path: str  # under src/sparkscale
    line: int
    scope: str  # qualified name of the enclosing function or class, "" at module level
    category: str


def _name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _in_json_object(node: ast.Name, parents: dict[ast.AST, ast.AST]) -> bool:
    parent = parents.get(node)
    if not isinstance(parent, ast.Tuple) or len(parent.elts) != 2 or parent.elts[1] is not node:
        return False
    sub = parents.get(parent)
    key = parent.elts[0]
    return (isinstance(sub, ast.Subscript) and _name(sub.value) in _MAPPINGS
            and isinstance(key, ast.Name) and key.id == "str")


def _is_processor_type(node: ast.Name, parents: dict[ast.AST, ast.AST]) -> bool:
    """`Callable[[Any, str, Any], Any]`: structlog's processor and renderer type."""
    for up in _ancestors(node, parents):
        if isinstance(up, ast.Subscript) and _name(up.value) == "Callable":
            return ast.unparse(up.slice).strip("()") == "[Any, str, Any], Any"
    return False


def _ancestors(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> list[ast.AST]:
    out = []
    while node in parents:
        node = parents[node]
        out.append(node)
    return out


Scope = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef


def _scopes(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> list[Scope]:
    return [up for up in _ancestors(node, parents)
            if isinstance(up, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]


def _category(rel: str, node: ast.Name, parents: dict[ast.AST, ast.AST], scope: str) -> str:
    parts = scope.split(".") if scope else []
    for n in range(len(parts), 0, -1):
        reason = REASONS.get(f"{rel}::{'.'.join(parts[:n])}")
        if reason is not None:
            return reason
    if REASONS.get(rel) == "library":  # its keyword-argument dicts are its library's
        return "library"
    if _in_json_object(node, parents):
        return "json"
    if _is_processor_type(node, parents):
        return "structlog"
    scopes = _scopes(node, parents)
    func = next((s for s in scopes if not isinstance(s, ast.ClassDef)), None)
    if func is not None and "event_dict" in {a.arg for a in func.args.args}:
        return "structlog"
    for s in scopes:
        hooks = [_name(d.func if isinstance(d, ast.Call) else d) for d in s.decorator_list]
        if s.name == "__get_pydantic_core_schema__" or any(h.endswith(("validator", "serializer")) for h in hooks):
            return "pydantic"
    return REASONS.get(rel, "other")


def uses_in(path: Path, root: Path = PRODUCT) -> tuple[list[AnyUse], int]:
    """The uses of `Any` in one module, and how many names `Any` its imports bring."""
    rel = path.relative_to(root).as_posix()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    imports = sum(1 for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                  for alias in node.names if alias.name == "Any")
    uses = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == "Any":
            scope = ".".join(s.name for s in reversed(_scopes(node, parents)))
            uses.append(AnyUse(rel, node.lineno, scope, _category(rel, node, parents, scope)))
    for node in ast.walk(tree):  # string annotations ("dict[str, Any]") would escape the count
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node in parents \
                and isinstance(parents[node], (ast.arg, ast.AnnAssign, ast.FunctionDef)) and "Any" in node.value:
            scope = ".".join(s.name for s in reversed(_scopes(node, parents)))
            uses.append(AnyUse(rel, node.lineno, scope, "other"))
    return sorted(uses, key=lambda u: u.line), imports


def product_uses() -> tuple[list[AnyUse], int]:
    uses: list[AnyUse] = []
    imports = 0
    for path in sorted(PRODUCT.rglob("*.py")):
        found, imported = uses_in(path)
        uses += found
        imports += imported
    return uses, imports


def counts(uses: list[AnyUse]) -> dict[str, dict[str, int]]:
    """Per file, per category."""
    out: dict[str, dict[str, int]] = {}
    for use in uses:
        per = out.setdefault(use.path, {})
        per[use.category] = per.get(use.category, 0) + 1
    return out


def table(uses: list[AnyUse], imports: int, per_file: bool = False) -> str:
    totals = Counter(u.category for u in uses)
    lines = [f"{'category':<10} {'uses':>5}"]
    lines += [f"{c:<10} {totals[c]:>5}" for c in CATEGORIES]
    lines += [f"{'total':<10} {len(uses):>5}", f"{'imports':<10} {imports:>5}",
              f"{'with imp.':<10} {len(uses) + imports:>5}"]
    if per_file:
        lines.append("")
        for path, per in sorted(counts(uses).items()):
            lines.append(f"{path:<48} " + " ".join(f"{c}={n}" for c, n in sorted(per.items())))
        lines.append("")
        lines += [f"other: {u.path}:{u.line} ({u.scope or 'module'})" for u in uses if u.category == "other"]
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(*product_uses(), per_file="-v" in sys.argv[1:]))
