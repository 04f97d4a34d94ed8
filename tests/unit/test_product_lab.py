"""The product and the lab beside it: the product never imports the lab, the lab uses only the
product's public names, and the product's own commands run where neither the lab nor matplotlib
can be imported (as on a head node installed without the `lab` extra)."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import sparkscale
import sparkscale_lab

PRODUCT = Path(sparkscale.__file__).parent
LAB = Path(sparkscale_lab.__file__).parent
REPO = PRODUCT.parent.parent


def _imports(path: Path) -> list[tuple[int, str, tuple[str, ...]]]:
    """(line, module, names) of every import in `path`, inside functions too (a lazy import is still
    an import), TYPE_CHECKING blocks included (annotations must not name the lab either)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module, tuple(a.name for a in node.names)))
        elif isinstance(node, ast.Import):
            out.extend((node.lineno, a.name, ()) for a in node.names)
    return out


def _strings(path: Path) -> list[tuple[int, str]]:
    """String constants that are not docstrings (a module name handed to import_module or `-m`)."""
    tree = ast.parse(path.read_text())
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs]


def test_the_product_never_imports_the_lab():
    found = [f"{p.relative_to(REPO)}:{line}: {module}" for p in sorted(PRODUCT.rglob("*.py"))
             for line, module, _names in _imports(p) if module.split(".")[0] == "sparkscale_lab"]
    found += [f"{p.relative_to(REPO)}:{line}: {text!r}" for p in sorted(PRODUCT.rglob("*.py"))
              for line, text in _strings(p) if text.startswith("sparkscale_lab")]
    assert not found, "\n".join(found)
    assert any(m == "sparkscale.config" for _l, m, _n in _imports(LAB / "pipelines" / "loadgen.py"))  # it sees


def test_the_lab_uses_only_public_names_of_the_product():
    private = []
    for path in sorted(LAB.rglob("*.py")):
        for line, module, names in _imports(path):
            if module.split(".")[0] != "sparkscale":
                continue
            hidden = [part for part in module.split(".") if part.startswith("_") and part != "__init__"]
            hidden += [name for name in names if name.startswith("_")]
            if hidden:
                private.append(f"{path.relative_to(REPO)}:{line}: {module} {', '.join(hidden)}")
    assert not private, "\n".join(private)


def test_matplotlib_and_the_lab_are_the_lab_extras_only():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    core = [d.split("==")[0].lower() for d in project["dependencies"]]
    assert "matplotlib" not in core and "pyspark" in core
    assert any(d.startswith("matplotlib==") for d in project["optional-dependencies"]["lab"])
    # The lab joins the product as plug-ins, never by the product naming it.
    assert all(v.startswith("sparkscale_lab.") for v in project["entry-points"]["sparkscale.commands"].values())
    assert all(v.startswith("sparkscale_lab.") for v in project["entry-points"]["sparkscale.workloads"].values())


BLOCKED = """
import importlib.abc, importlib.machinery, pkgutil, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('sparkscale_lab', 'matplotlib'):
            raise ImportError(f'{name} is not installed here (blocked by the test)')
        return None
sys.meta_path.insert(0, Block())
import sparkscale
for m in pkgutil.walk_packages(sparkscale.__path__, 'sparkscale.'):
    if m.name.startswith('sparkscale.agent.') or m.name.endswith('__main__'):  # PySpark's JVM; runs the CLI
        continue
    __import__(m.name)
from sparkscale.cli import main
try:
    main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
else:
    code = 0
leaked = sorted(m for m in sys.modules if m.split('.')[0] in ('sparkscale_lab', 'matplotlib'))
print('LEAKED', leaked)
sys.exit(code if not leaked else 99)
"""


def _blocked(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", BLOCKED, *args], capture_output=True, text=True, timeout=120,
                          cwd=REPO, check=False)


def test_the_products_commands_run_without_the_lab_or_matplotlib():
    snapshot = "tests/unit/fixtures/design_snapshot.json"
    assert (done := _blocked("--help")).returncode == 0, done.stderr
    assert "plan" in done.stdout and "demo" in done.stdout  # a plug-in is listed, not loaded
    done = _blocked("check-config", "configs/sparkscale.yaml")
    assert done.returncode == 0 and "ok (1 app(s)" in done.stdout, done.stdout + done.stderr
    done = _blocked("plan", snapshot, "--json")
    assert done.returncode == 0 and '"actions"' in done.stdout, done.stdout + done.stderr
    # One daemon cycle against services that are not there: it says so and ends (no traceback).
    done = _blocked("run", "--max-cycles", "1", "--set", "loop.dry_run=true", "--set", "redis.port=1",
                    "--set", "zookeeper.hosts=127.0.0.1:1", "--set", "loop.interval_s=1",
                    "--set", "metrics.enabled=false")  # not about metrics: a port taken elsewhere must not matter
    assert done.returncode == 0 and "cycle.unreachable" in done.stderr + done.stdout, done.stderr[-2000:]
    assert "LEAKED []" in done.stdout
    # A lab command where the lab is not there: a clear error, not a traceback.
    done = _blocked("demo", "--help")
    assert done.returncode == 1 and "pip install 'sparkscale[lab]'" in done.stderr, done.stderr
