"""The shipped systemd unit: `systemd-analyze verify` finds nothing wrong, and it has the settings the daemon relies on.

verify works offline (no systemd as PID 1 needed) but checks that ExecStart='s program exists, so it
runs on a copy whose ExecStart= points at this venv's `sparkscale` and whose User=/Group= is the
current user: the result then does not depend on what is installed on the machine.
"""

from __future__ import annotations

import grp
import os
import pwd
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

UNIT = Path(__file__).resolve().parents[2] / "systemd" / "sparkscale.service"
SHIPPED_EXEC = "/opt/sparkscale/.venv/bin/sparkscale"
CONFIG_PATH = "/etc/sparkscale/sparkscale.yaml"


def _directives(text: str) -> list[tuple[str, str, str]]:
    """(section, key, value) of every directive, in order; repeated keys (Environment=) all kept."""
    out, section = [], ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            continue
        key, sep, value = line.partition("=")
        assert sep, f"not a KEY=VALUE line in {UNIT.name}: {raw!r}"
        assert not value.endswith("\\"), "line continuations are not expected in the unit"
        out.append((section, key.strip(), value.strip()))
    return out


def _values(directives, section: str, key: str) -> list[str]:
    return [v for s, k, v in directives if s == section and k == key]


def _systemd_analyze() -> str:
    """The path of systemd-analyze, installing Debian's systemd package if it is missing (never a skip)."""
    found = shutil.which("systemd-analyze")
    if found:
        return found
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    if sudo and not shutil.which("sudo"):
        pytest.fail("systemd-analyze is missing and cannot be installed: not root and no sudo. "
                    "Install it with: apt-get install systemd")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    attempts = []
    for cmd in ([*sudo, "apt-get", "install", "-y", "-qq", "--no-install-recommends", "systemd"],
                [*sudo, "apt-get", "update", "-qq"],
                [*sudo, "apt-get", "install", "-y", "-qq", "--no-install-recommends", "systemd"]):
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, check=False)
        attempts.append(f"$ {' '.join(cmd)} -> exit {proc.returncode}\n{proc.stderr[-2000:]}")
        if cmd[-1] == "systemd" and proc.returncode == 0 and shutil.which("systemd-analyze"):
            return shutil.which("systemd-analyze")
    pytest.fail("systemd-analyze is missing and installing Debian's systemd package failed "
                "(install it with: apt-get install systemd):\n" + "\n".join(attempts))


def _venv_sparkscale() -> str:
    bin_dir = Path(sys.executable).parent
    found = shutil.which("sparkscale", path=str(bin_dir))
    assert found, f"no sparkscale script in {bin_dir}: install the package into the venv (scripts/setup.sh)"
    return found


def test_shipped_unit_has_what_the_daemon_relies_on():
    text = UNIT.read_text()
    d = _directives(text)
    assert _values(d, "Service", "Type") == ["notify"]
    assert _values(d, "Service", "NotifyAccess") == ["main"]
    assert _values(d, "Service", "WatchdogSec") == ["60"]
    [reload] = _values(d, "Service", "ExecReload")
    assert re.fullmatch(r"/bin/kill -(HUP|SIGHUP|s HUP) \$MAINPID", reload), reload
    assert _values(d, "Service", "Restart") == ["on-failure"]
    assert _values(d, "Service", "RestartSec") == ["5"]
    assert _values(d, "Service", "User") == ["sparkscale"]
    assert _values(d, "Service", "Group") == ["sparkscale"]
    assert _values(d, "Service", "KillSignal") == ["SIGTERM"]
    assert "PYTHONUNBUFFERED=1" in _values(d, "Service", "Environment")
    assert _values(d, "Install", "WantedBy") == ["multi-user.target"]
    [exec_start] = _values(d, "Service", "ExecStart")
    assert exec_start == f"{SHIPPED_EXEC} run --config ${{SPARKSCALE_CONFIG}}"

    # The config path is set in exactly one place: one Environment= line (and nowhere else in the unit).
    assert _values(d, "Service", "Environment").count(f"SPARKSCALE_CONFIG={CONFIG_PATH}") == 1
    mentions = [f"{k}={v}" for _s, k, v in d if CONFIG_PATH in v]
    assert mentions == [f"Environment=SPARKSCALE_CONFIG={CONFIG_PATH}"], mentions
    assert _values(d, "Service", "EnvironmentFile") == ["-/etc/default/sparkscale"]


def test_systemd_analyze_verify_is_clean(tmp_path):
    analyze = _systemd_analyze()
    user = pwd.getpwuid(os.getuid()).pw_name
    group = grp.getgrgid(os.getgid()).gr_name
    text = UNIT.read_text()
    assert text.count(SHIPPED_EXEC) == 1
    local = text.replace(SHIPPED_EXEC, _venv_sparkscale())
    local = re.sub(r"(?m)^User=.*$", f"User={user}", local)
    local = re.sub(r"(?m)^Group=.*$", f"Group={group}", local)
    # The copy keeps the unit's name: verify derives the unit's name (and its type) from the file name.
    copy = tmp_path / UNIT.name
    copy.write_text(local)

    # --man=no: do not look up Documentation= man pages; --generators=no: do not run the machine's
    # generators (they need a booted system and only add noise about other units).
    proc = subprocess.run([analyze, "verify", "--man=no", "--generators=no", str(copy)],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "LC_ALL": "C"}, check=False)
    # Problems with the unit are printed as "<path>:<line>: ..." or "<unit name>: ...", often with
    # exit status 0 (an unknown key is only a warning): any line naming the unit is a finding.
    # Lines about the machine's other units are not this test's business.
    ours = [line for line in proc.stderr.splitlines() if UNIT.name in line or str(copy) in line]
    report = f"systemd-analyze verify exited {proc.returncode}; stderr:\n{proc.stderr}\nstdout:\n{proc.stdout}"
    assert proc.returncode == 0, report
    assert not ours, report


def test_verify_does_catch_a_broken_unit(tmp_path):
    """The check above is only worth something if verify reports mistakes the way it expects."""
    analyze = _systemd_analyze()
    broken = UNIT.read_text().replace("Type=notify", "Type=notifyy").replace(SHIPPED_EXEC, _venv_sparkscale())
    broken = broken.replace("[Service]\n", "[Service]\nWatchdogSecs=60\n", 1)
    copy = tmp_path / UNIT.name
    copy.write_text(broken)
    proc = subprocess.run([analyze, "verify", "--man=no", "--generators=no", str(copy)],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "LC_ALL": "C"}, check=False)
    ours = [line for line in proc.stderr.splitlines() if UNIT.name in line]
    assert any("WatchdogSecs" in line for line in ours), proc.stderr
    assert any("notifyy" in line for line in ours), proc.stderr


APP_UNIT = UNIT.parent / "sparkscale-app@.service"


def test_driver_unit_runs_the_supervisor_and_restarts_it():
    d = _directives(APP_UNIT.read_text())
    [exec_start] = _values(d, "Service", "ExecStart")
    assert exec_start == f"{SHIPPED_EXEC} pipeline run %i --config ${{SPARKSCALE_CONFIG}}"
    assert _values(d, "Service", "Restart") == ["on-failure"]
    assert _values(d, "Service", "RestartPreventExitStatus") == ["2"]
    assert _values(d, "Service", "KillMode") == ["control-group"]
    assert _values(d, "Service", "Environment").count(f"SPARKSCALE_CONFIG={CONFIG_PATH}") == 1


def test_systemd_analyze_verify_is_clean_for_a_driver_instance(tmp_path):
    analyze = _systemd_analyze()
    user = pwd.getpwuid(os.getuid()).pw_name
    group = grp.getgrgid(os.getgid()).gr_name
    text = APP_UNIT.read_text().replace(SHIPPED_EXEC, _venv_sparkscale())
    text = re.sub(r"(?m)^User=.*$", f"User={user}", text)
    text = re.sub(r"(?m)^Group=.*$", f"Group={group}", text)
    # verify needs an instance of a template: the file named as the unit of app "wordcount".
    copy = tmp_path / "sparkscale-app@wordcount.service"
    copy.write_text(text)
    proc = subprocess.run([analyze, "verify", "--man=no", "--generators=no", str(copy)],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "LC_ALL": "C"}, check=False)
    ours = [line for line in proc.stderr.splitlines() if "sparkscale-app@" in line]
    report = f"systemd-analyze verify exited {proc.returncode}; stderr:\n{proc.stderr}\nstdout:\n{proc.stdout}"
    assert proc.returncode == 0, report
    assert not ours, report
