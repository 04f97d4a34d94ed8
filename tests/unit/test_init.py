"""`sparkscale init`, `--version` and `completion` (issue 34): the shipped config and units live once,
in the package; init writes them filled in for this host, refuses to overwrite, and what it writes
passes check-config and `systemd-analyze verify`."""

from __future__ import annotations

import os
import pwd
import subprocess
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from sparkscale import resources
from sparkscale.cli import main
from sparkscale.host_files import host_setup, next_steps
from tests.unit.test_systemd_unit import _directives, _systemd_analyze, _values

REPO = Path(__file__).resolve().parents[2]
EXE = "/srv/sparkscale venv/bin/sparkscale"  # a space: the unit must quote it


def invoke(*args: str) -> Result:
    return CliRunner(env={"SPARKSCALE_CONFIG": None}).invoke(main, list(args))


def test_the_repositorys_config_and_units_are_links_to_the_packaged_files():
    packaged = Path(resources.__file__).parent
    for old, new in ((REPO / "configs" / "sparkscale.yaml", packaged / resources.CONFIG),
                     *((REPO / "systemd" / name, packaged / "systemd" / name) for name in resources.UNITS)):
        assert old.is_symlink() and not os.path.isabs(os.readlink(old)), old  # relative: works in any clone
        assert old.resolve() == new.resolve() and not new.is_symlink(), (old, new)
    assert resources.shipped_config() == (REPO / "configs" / "sparkscale.yaml").read_text()
    assert resources.unit_text(resources.DAEMON_UNIT) == (REPO / "systemd" / "sparkscale.service").read_text()
    package_data = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert {"resources/*.yaml", "resources/systemd/*.service"} <= set(package_data["sparkscale"])
    with pytest.raises(ValueError, match=r"no shipped unit 'x\.service'"):
        resources.unit_text("x.service")


def test_init_writes_the_config_and_the_units_filled_in_for_this_host(tmp_path):
    out = invoke("init", str(tmp_path / "here"), "--user", "nobody", "--executable", EXE)
    assert out.exit_code == 0, out.output
    config = tmp_path / "here" / "sparkscale.yaml"
    assert config.read_text() == resources.shipped_config() and config.stat().st_mode & 0o777 == 0o640
    assert invoke("check-config", str(config)).exit_code == 0
    daemon = _directives((tmp_path / "here" / "sparkscale.service").read_text())
    assert _values(daemon, "Service", "ExecStart") == [f'"{EXE}" run --config ${{SPARKSCALE_CONFIG}}']
    assert _values(daemon, "Service", "User") == ["nobody"]
    assert _values(daemon, "Service", "Group") == [host_setup(tmp_path, "nobody").group]
    assert f"SPARKSCALE_CONFIG={config}" in _values(daemon, "Service", "Environment")
    assert _values(daemon, "Service", "Type") == ["notify"]  # the rest as shipped
    driver = _directives((tmp_path / "here" / "sparkscale-app@.service").read_text())
    assert _values(driver, "Service", "ExecStart") == [f'"{EXE}" pipeline run %i --config ${{SPARKSCALE_CONFIG}}']
    for step in ("Next steps", "check-config", "systemctl daemon-reload", "identity_dir", "apps:"):
        assert step in out.output, step


def test_init_refuses_to_overwrite_unless_forced(tmp_path):
    (tmp_path / "sparkscale.service").write_text("mine\n")
    out = invoke("init", str(tmp_path), "--executable", EXE)
    assert out.exit_code == 2 and f"{tmp_path / 'sparkscale.service'} exists" in out.output
    assert (tmp_path / "sparkscale.service").read_text() == "mine\n" and not (tmp_path / "sparkscale.yaml").exists()
    out = invoke("init", str(tmp_path), "--executable", EXE, "--force")
    assert out.exit_code == 0 and "run --config" in (tmp_path / "sparkscale.service").read_text()
    # A link in the way is replaced, never written through (configs/sparkscale.yaml is one).
    elsewhere = tmp_path / "elsewhere.yaml"
    elsewhere.write_text("kept: true\n")
    (tmp_path / "sparkscale.yaml").unlink()
    (tmp_path / "sparkscale.yaml").symlink_to(elsewhere)
    assert invoke("init", str(tmp_path), "--executable", EXE).exit_code == 2  # a link counts as there
    assert invoke("init", str(tmp_path), "--executable", EXE, "--force").exit_code == 0
    assert elsewhere.read_text() == "kept: true\n" and not (tmp_path / "sparkscale.yaml").is_symlink()


def test_init_defaults_to_here_the_current_user_and_this_installs_sparkscale(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = invoke("init")
    if "no `sparkscale` script" in out.output:  # a checkout never installed: says so, exit 2
        assert out.exit_code == 2
        return
    assert out.exit_code == 0, out.output
    setup = host_setup(".")
    assert setup.directory == tmp_path and setup.user == pwd.getpwuid(os.getuid()).pw_name
    assert setup.executable.startswith("/") and setup.executable.endswith("sparkscale")
    assert f"ExecStart={setup.executable} run" in (tmp_path / "sparkscale.service").read_text()


def test_a_unit_takes_no_value_it_cannot_hold():
    text = resources.unit_text(resources.DAEMON_UNIT)
    with pytest.raises(ValueError, match="absolute path"):
        resources.fill_unit(text, "sparkscale", "u", "g", "/etc/x.yaml")
    with pytest.raises(ValueError, match="not a user name"):
        resources.fill_unit(text, "/bin/sparkscale", "u\nExecStartPre=/bin/evil", "g", "/etc/x.yaml")
    with pytest.raises(ValueError, match="0 lines matching"):
        resources.fill_unit(text.replace("User=", "#User="), "/bin/sparkscale", "u", "g", "/etc/x.yaml")
    filled = resources.fill_unit(text, "/opt/$HOME/100%/sparkscale", "u", "g", "/etc/50%.yaml")
    assert "ExecStart=/opt/$$HOME/100%%/sparkscale run" in filled and "SPARKSCALE_CONFIG=/etc/50%%.yaml" in filled


def test_next_steps_warn_of_a_config_the_hardened_unit_cannot_read():
    assert "ProtectHome" in next_steps(host_setup("/home/me/sparkscale", "me", "/bin/sparkscale"))
    assert "ProtectHome" not in next_steps(host_setup("/etc/sparkscale", "me", "/bin/sparkscale"))


def test_systemd_analyze_verify_is_clean_for_what_init_writes(tmp_path):
    analyze = _systemd_analyze()
    exe = tmp_path / "bin dir" / "sparkscale"  # verify checks that ExecStart='s program exists
    exe.parent.mkdir()
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    out = invoke("init", str(tmp_path / "etc"), "--executable", str(exe))
    assert out.exit_code == 0, out.output
    (tmp_path / "etc" / "sparkscale-app@.service").rename(tmp_path / "etc" / "sparkscale-app@wordcount.service")
    for name in ("sparkscale.service", "sparkscale-app@wordcount.service"):
        proc = subprocess.run([analyze, "verify", "--man=no", "--generators=no", str(tmp_path / "etc" / name)],
                              capture_output=True, text=True, timeout=120, env={**os.environ, "LC_ALL": "C"},
                              check=False)
        ours = [line for line in proc.stderr.splitlines() if name in line or "sparkscale-app@" in line]
        assert proc.returncode == 0 and not ours, proc.stderr


def test_version_is_the_installed_distributions_and_completion_prints_clicks_script():
    import importlib.metadata

    out = invoke("--version")
    assert out.exit_code == 0 and out.output.strip().endswith(f"version {importlib.metadata.version('sparkscale')}")
    bash = invoke("completion", "bash")
    assert bash.exit_code == 0 and "_SPARKSCALE_COMPLETE=bash_complete" in bash.output
    assert "complete -o nosort -F _sparkscale_completion sparkscale" in bash.output
    zsh = invoke("completion", "zsh")
    assert zsh.exit_code == 0 and "#compdef sparkscale" in zsh.output and "zsh_complete" in zsh.output
    assert invoke("completion", "fish").exit_code == 2
    assert "eval" in invoke("completion", "--help").output


def test_completion_completes_the_commands():
    env = {**os.environ, "_SPARKSCALE_COMPLETE": "bash_complete", "COMP_WORDS": "sparkscale in", "COMP_CWORD": "1"}
    out = CliRunner().invoke(main, [], prog_name="sparkscale", env=env, standalone_mode=True)
    assert "plain,init" in out.output, out.output
