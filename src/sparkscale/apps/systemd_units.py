"""Drivers as systemd units (`drivers.supervisor: systemd`): start, stop and find one with systemctl.

Why: a driver the daemon starts with a plain fork lives in the daemon's cgroup, and systemd stops
that whole cgroup when the daemon restarts. Started as `sparkscale-app@APP.service` (the template in
systemd/), it lives in a cgroup of its own and systemd restarts its supervisor if that dies. The
daemon's user needs the right to start and stop these units: systemd/README.md gives the polkit rule.
"""

from __future__ import annotations

import subprocess

import structlog

log = structlog.get_logger(__name__)

SYSTEMCTL = "systemctl"
TIMEOUT_S = 60.0


class UnitError(RuntimeError):
    """systemctl refused or failed; the message carries its output."""


def _systemctl(*args: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run([SYSTEMCTL, *args], capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UnitError(f"systemctl {' '.join(args)}: {exc}") from None


def start(unit: str) -> None:
    done = _systemctl("start", unit)
    if done.returncode != 0:
        raise UnitError(f"systemctl start {unit} failed ({done.returncode}): {(done.stderr or done.stdout).strip()}")
    log.info("systemd.unit_started", unit=unit)


def stop(unit: str) -> bool:
    """Stop the unit; True if it was active."""
    was = is_active(unit)
    done = _systemctl("stop", unit)
    if done.returncode != 0:
        raise UnitError(f"systemctl stop {unit} failed ({done.returncode}): {(done.stderr or done.stdout).strip()}")
    return was


def is_active(unit: str) -> bool:
    return _systemctl("is-active", "--quiet", unit).returncode == 0


def main_pid(unit: str) -> int:
    """The unit's main process (the supervisor); UnitError when it has none."""
    done = _systemctl("show", "--property=MainPID", "--value", unit)
    try:
        pid = int(done.stdout.strip())
    except ValueError:
        pid = 0
    if done.returncode != 0 or pid <= 0:
        raise UnitError(f"{unit} has no main process ({(done.stderr or done.stdout).strip() or 'MainPID=0'})")
    return pid
