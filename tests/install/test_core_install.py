"""The wheel, built from this checkout and installed without extras into a fresh virtual environment
outside the repository, stands alone (issue 34): `sparkscale init` writes the packaged config and
units, `check-config` accepts that config, `--version` is pyproject's; and it runs its own commands
without matplotlib (which only the `lab` extra brings) and without loading the lab. About a minute:
pip builds the wheel and installs the pinned dependencies from its cache (`scripts/setup.sh` filled it)."""

from __future__ import annotations

import os
import subprocess
import tomllib
import venv
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# The new environment sees only what it installed: not a PYTHONPATH this run may have.
ENV = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


def test_a_core_install_runs_the_products_commands_without_the_lab_extra(tmp_path):
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    bin_dir = env_dir / "bin"
    pip = [bin_dir / "pip", "--disable-pip-version-check"]
    built = subprocess.run([*pip, "wheel", "--quiet", "--no-deps", "--wheel-dir", tmp_path / "dist", str(REPO)],
                           capture_output=True, text=True, timeout=900, cwd=tmp_path, check=False, env=ENV)
    assert built.returncode == 0, built.stderr[-3000:]
    [wheel] = (tmp_path / "dist").glob("sparkscale-*.whl")
    done = subprocess.run([*pip, "install", "--quiet", wheel], capture_output=True, text=True, timeout=900,
                          cwd=tmp_path, check=False, env=ENV)
    assert done.returncode == 0, done.stderr[-3000:]
    python = bin_dir / "python"
    missing = subprocess.run([python, "-c", "import matplotlib"], capture_output=True, text=True, cwd=tmp_path,
                             check=False, env=ENV)
    assert missing.returncode == 1 and "No module named 'matplotlib'" in missing.stderr  # the extra is not there

    def sparkscale(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([bin_dir / "sparkscale", *args], capture_output=True, text=True, timeout=120,
                              cwd=tmp_path, check=False, env=ENV)

    assert (out := sparkscale("--help")).returncode == 0 and "check-config" in out.stdout, out.stderr
    # What the wheel ships is enough to start from: init into an empty directory, its config checks.
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert (out := sparkscale("--version")).returncode == 0 and out.stdout.split()[-1] == version, out.stdout
    out = sparkscale("init", str(tmp_path / "etc"))
    assert out.returncode == 0 and "Next steps" in out.stdout, out.stdout + out.stderr
    out = sparkscale("check-config", str(tmp_path / "etc" / "sparkscale.yaml"))
    assert out.returncode == 0 and "ok (1 app(s)" in out.stdout, out.stderr
    unit = (tmp_path / "etc" / "sparkscale.service").read_text()
    assert f"ExecStart={bin_dir / 'sparkscale'} run --config" in unit, unit
    assert f"Environment=SPARKSCALE_CONFIG={tmp_path / 'etc' / 'sparkscale.yaml'}" in unit, unit
    assert (out := sparkscale("init", str(tmp_path / "etc"))).returncode == 2 and "exists" in out.stderr
    out = sparkscale("check-config", str(REPO / "configs" / "sparkscale.yaml"))
    assert out.returncode == 0 and "ok (1 app(s)" in out.stdout, out.stderr
    out = sparkscale("plan", str(REPO / "tests" / "unit" / "fixtures" / "design_snapshot.json"), "--json")
    assert out.returncode == 0 and '"actions"' in out.stdout, out.stderr
    out = sparkscale("run", "--max-cycles", "1", "--set", "loop.dry_run=true", "--set", "redis.port=1",
                     "--set", "zookeeper.hosts=127.0.0.1:1", "--set", "loop.interval_s=1")
    assert out.returncode == 0 and "cycle.unreachable" in out.stderr, out.stderr[-2000:]
    # Nothing of the lab was loaded by those commands (the installed package, not this checkout).
    probe = ("import sys; from sparkscale.cli import main\n"
             "try:\n    main(['check-config', sys.argv[1]])\nexcept SystemExit:\n    pass\n"
             "assert 'sparkscale' in sys.modules['sparkscale.cli'].__file__ and sys.prefix != sys.base_prefix\n"
             "print(sorted(m for m in sys.modules if m.split('.')[0] in ('sparkscale_lab', 'matplotlib')))")
    out = subprocess.run([python, "-c", probe, str(REPO / "configs" / "sparkscale.yaml")], capture_output=True,
                         text=True, timeout=120, cwd=tmp_path, check=False, env=ENV)
    assert out.returncode == 0 and out.stdout.strip().endswith("[]"), out.stdout + out.stderr
    assert str(env_dir) in subprocess.run([python, "-c", "import sparkscale; print(sparkscale.__file__)"],
                                          capture_output=True, text=True, cwd=tmp_path, check=False, env=ENV).stdout
    # A lab command says what it needs instead of failing half-way.
    out = sparkscale("demo")
    assert out.returncode == 1 and "pip install 'sparkscale[lab]'" in out.stderr, out.stderr
