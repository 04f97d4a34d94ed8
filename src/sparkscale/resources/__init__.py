"""The files sparkscale ships inside its package: the commented config (sparkscale.yaml) and the
systemd units (systemd/*.service), and how one host fills the units in.

Why here: an installed wheel has no checkout, so `sparkscale init` reads them with
importlib.resources. Each exists once: the repository's configs/sparkscale.yaml and
systemd/*.service are relative links to these files (systemd/README.md installs from them).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from importlib import resources

CONFIG = "sparkscale.yaml"
DAEMON_UNIT = "sparkscale.service"
DRIVER_UNIT = "sparkscale-app@.service"  # one managed driver (drivers.supervisor: systemd)
UNITS = (DAEMON_UNIT, DRIVER_UNIT)

# What the shipped units say for the host-specific settings, which `fill_unit` replaces.
SHIPPED_EXECUTABLE = "/opt/sparkscale/.venv/bin/sparkscale"
SHIPPED_CONFIG_PATH = "/etc/sparkscale/sparkscale.yaml"
SHIPPED_USER = "sparkscale"


def shipped_config() -> str:
    """The commented config: every key with its default and why (the embedded environment's)."""
    return resources.files(__name__).joinpath(CONFIG).read_text(encoding="utf-8")


def unit_text(name: str) -> str:
    """The shipped unit `name` (one of UNITS), as systemd/README.md installs it."""
    if name not in UNITS:
        raise ValueError(f"no shipped unit {name!r} (shipped: {', '.join(UNITS)})")
    return resources.files(__name__).joinpath("systemd", name).read_text(encoding="utf-8")


def fill_unit(text: str, executable: str, user: str, group: str, config_path: str) -> str:
    """The shipped unit `text` for one host: its ExecStart= runs `executable` (this install's
    `sparkscale`), as `user`:`group`, on the config at `config_path` (its one Environment= line).
    Every other line is kept, comments and hardening included. ValueError if the unit does not say
    what is replaced (a changed unit must change this too) or a value cannot go into a unit."""
    for what, value in (("executable", executable), ("config path", config_path)):
        if not value.startswith("/"):
            raise ValueError(f"the {what} must be an absolute path: {value!r}")
    for what, value in (("user", user), ("group", group)):
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*\$?", value):
            raise ValueError(f"not a {what} name systemd takes: {value!r}")
    replacements = (
        (re.escape(SHIPPED_EXECUTABLE), _word(executable).replace("$", "$$")),  # ExecStart= expands $
        (r"(?m)^User=.*$", f"User={user}"),
        (r"(?m)^Group=.*$", f"Group={group}"),
        (rf"(?m)^Environment=SPARKSCALE_CONFIG={re.escape(SHIPPED_CONFIG_PATH)}$",
         "Environment=" + _word(f"SPARKSCALE_CONFIG={config_path}")),
    )
    for pattern, replacement in replacements:
        # A function, not a template: the replacement's backslashes and \1 are meant literally.
        text, count = re.subn(pattern, _literal(replacement), text)
        if count != 1:
            raise ValueError(f"the unit has {count} lines matching {pattern!r}, not one")
    return text


def _literal(text: str) -> Callable[[re.Match[str]], str]:
    return lambda _match: text


def _word(value: str) -> str:
    """`value` as one word of a unit's line: `%` escaped (systemd's specifiers), quoted when it
    holds white space or quotes (systemd.syntax(7))."""
    value = value.replace("%", "%%")
    if re.search(r"[\s\"'\\]", value):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return value
