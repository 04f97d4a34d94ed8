"""The linters as tests, so that `./dev test` (pytest) fails on a lint or type error: ruff with the rule set
and mypy --strict as pyproject.toml configures them, from the repository root."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT / "src"), str(REPO_ROOT)])}
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=600, env=env, check=False)


def test_ruff_finds_nothing() -> None:
    done = _run("ruff", "check", "src", "tests", "benchmarks")
    assert done.returncode == 0, done.stdout + done.stderr


def test_mypy_strict_finds_nothing() -> None:
    done = _run("mypy")  # the files and flags of [tool.mypy] in pyproject.toml
    assert done.returncode == 0, done.stdout + done.stderr
