"""Drivers as systemd units (`drivers.supervisor: systemd`): start, stop and find one with systemctl.

Why: a driver the daemon starts with a plain fork lives in the daemon's cgroup, and systemd stops
that whole cgroup when the daemon restarts. Started as `sparkscale-app@APP.service` (the template in
systemd/), it lives in a cgroup of its own and systemd restarts its supervisor if that dies. The
daemon's user needs the right to start and stop these units: `polkit_rule` renders the polkit rule
that grants it (systemd/README.md), scoped so that an app's driver may restart its own unit only.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Mapping

import structlog

from sparkscale.config.drivers import DriversConfig

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


DAEMON_VERBS = ("start", "stop", "restart")


def polkit_rule(units: Mapping[str, str], daemon_user: str = "sparkscale") -> str:
    """The polkit rule (/etc/polkit-1/rules.d/50-sparkscale.rules) for `units`, each driver unit
    (`drivers.unit(app)`) with the user its driver runs as: the daemon's user may start, stop and
    restart exactly these units; a driver's user may restart its own unit and no other. Why a list
    and not a pattern: a unit not named here (another app's, an app removed from the config) is
    nobody's to touch. polkit tells callers apart by user only, so a driver that runs as the
    daemon's user (the shipped unit's User=sparkscale) has the daemon's rights: give each app's
    unit a user of its own (a drop-in with User=) for the per-app scoping to bite."""
    for unit, user in units.items():
        if not re.fullmatch(r"[A-Za-z0-9:_.@\\-]+\.service", unit):
            raise ValueError(f"not a unit name: {unit!r}")
        if not re.fullmatch(r"[a-z_][a-z0-9_-]*\$?", user):
            raise ValueError(f"not a user name: {user!r}")
    if not re.fullmatch(r"[a-z_][a-z0-9_-]*\$?", daemon_user):
        raise ValueError(f"not a user name: {daemon_user!r}")
    owners = json.dumps(dict(sorted(units.items())), indent=8).replace("\n}", "\n    }")
    return f"""// sparkscale's driver units: rendered by sparkscale.apps.systemd_units.polkit_rule.
polkit.addRule(function (action, subject) {{
    if (action.id != "org.freedesktop.systemd1.manage-units") {{
        return polkit.Result.NOT_HANDLED;
    }}
    // Each managed app's unit, with the user its driver runs as.
    var owners = {owners};
    var unit = action.lookup("unit");
    var verb = action.lookup("verb");
    if (!Object.prototype.hasOwnProperty.call(owners, unit)) {{
        return polkit.Result.NOT_HANDLED;
    }}
    // The daemon starts, stops and restarts every app's driver.
    if (subject.user == {json.dumps(daemon_user)} && {json.dumps(list(DAEMON_VERBS))}.indexOf(verb) >= 0) {{
        return polkit.Result.YES;
    }}
    // A driver restarts its own unit, and only that one.
    if (subject.user == owners[unit] && verb == "restart") {{
        return polkit.Result.YES;
    }}
    return polkit.Result.NOT_HANDLED;
}});
"""


def app_units(drivers: DriversConfig, app_users: Mapping[str, str]) -> dict[str, str]:
    """{unit: user} for `polkit_rule`, from {app: the user its driver runs as}."""
    return {drivers.unit(app): user for app, user in app_users.items()}
