"""The shape of the code, checked: the head side never imports PySpark, packages depend on each
other one way only, and no module grows past 500 lines."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import sparkscale

ROOT = Path(sparkscale.__file__).parent
HEAD_SIDE = ("daemon", "monitors", "policies", "actuators", "protocol")


def test_the_head_side_imports_no_pyspark():
    # Every module of the daemon's packages, and every plug-in its registries find (in a fresh
    # interpreter: this test process may have imported PySpark for other tests).
    code = (
        "import importlib, pkgutil, sys, sparkscale\n"
        f"for package in {HEAD_SIDE!r}:\n"
        "    pkg = importlib.import_module('sparkscale.' + package)\n"
        "    for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + '.'):\n"
        "        importlib.import_module(m.name)\n"
        "from sparkscale.registry import ACTUATORS, POLICIES, STRATEGIES, WORKLOADS\n"
        "for registry in (ACTUATORS, POLICIES, STRATEGIES, WORKLOADS):\n"
        "    assert registry.names(), registry.kind\n"
        "import sparkscale.cli, sparkscale.config, sparkscale_lab.pipelines.verify, sparkscale_lab.pipelines.check\n"
        "from sparkscale_lab.pipelines.workloads import workload\n"
        "w = workload('wordcount')\n"  # the daemon looks workloads up: no PySpark until a driver builds one
        "assert w.name == 'wordcount' and w.query and w.fields and callable(w.build), w\n"
        "assert {'wordcount', 'dag', 'taxi_top_routes'} <= set(WORKLOADS.names())\n"
        "leaked = sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'py4j'))\n"
        "assert not leaked, leaked\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def _unit(module: str) -> str:
    """The package (or top-level module) a module belongs to: sparkscale.x.y -> x."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def package_dependencies() -> dict[str, dict[str, str]]:
    """Package -> {package it imports: one module that does}, counting imports inside functions too
    (a lazy import is still a dependency), but not those only for type checking."""
    deps: dict[str, dict[str, str]] = {}
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT.parent).with_suffix("")
        module = ".".join(rel.parts).removesuffix(".__init__")
        unit = _unit(module)

        def visit(node: ast.AST, unit: str = unit, module: str = module) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                    continue
                targets: list[str] = []
                if isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                    targets = [child.module]
                elif isinstance(child, ast.Import):
                    targets = [a.name for a in child.names]
                for target in targets:
                    if target.startswith("sparkscale.") and _unit(target) != unit:
                        deps.setdefault(unit, {}).setdefault(_unit(target), module)
                visit(child)

        visit(ast.parse(path.read_text()))
    return deps


def test_packages_depend_on_each_other_one_way_only():
    deps = package_dependencies()
    assert "protocol" in deps.get("daemon", {}) and "protocol" in deps.get("agent", {})  # the check sees imports
    cycles = []

    def walk(unit: str, path: list[str]) -> None:
        for nxt in deps.get(unit, {}):
            if nxt in path:
                cycle = path[path.index(nxt):] + [nxt]
                cycles.append(" -> ".join(f"{a} ({deps[a][b]})" for a, b in zip(cycle, cycle[1:])))
            elif len(path) < 20:
                walk(nxt, [*path, nxt])

    for unit in deps:
        walk(unit, [unit])
    assert not cycles, "\n".join(sorted(set(cycles)))
    # The two sides share protocol/ and depend on nothing of each other.
    assert "agent" not in deps.get("daemon", {}) and "daemon" not in deps.get("agent", {})
    assert not {"daemon", "cli", "bench"} & set(deps.get("actuators", {}))
    assert not {"daemon", "actuators", "monitors", "cli"} & set(deps.get("policies", {}))


def test_no_module_is_over_500_lines():
    long = {str(p.relative_to(ROOT)): n for p in ROOT.rglob("*.py") if (n := len(p.read_text().splitlines())) > 500}
    assert not long, long
