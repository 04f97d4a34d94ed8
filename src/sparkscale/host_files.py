"""What `sparkscale init [DIR]` writes for this host: the shipped commented config and the systemd
units filled in with this install's `sparkscale`, the service's user and the config's path, and the
next steps to take with them.

Why: an installed wheel has no checkout to copy configs/ and systemd/ from (issue 34), and a unit
copied by hand keeps /opt/sparkscale/.venv/bin/sparkscale, the path of systemd/README.md's install.
"""

from __future__ import annotations

import grp
import os
import pwd
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from sparkscale import resources


@dataclass(frozen=True)
class HostFile:
    path: Path
    text: str


@dataclass(frozen=True)
class HostSetup:
    """Where the files go and what the units run: `executable` as `user`:`group`."""

    directory: Path
    executable: str
    user: str
    group: str

    @property
    def config_path(self) -> Path:
        return self.directory / resources.CONFIG

    def files(self) -> list[HostFile]:
        """The config, then each unit, as they are written."""
        out = [HostFile(self.config_path, resources.shipped_config())]
        for name in resources.UNITS:
            text = resources.fill_unit(resources.unit_text(name), self.executable, self.user, self.group,
                                       str(self.config_path))
            out.append(HostFile(self.directory / name, text))
        return out


def host_setup(directory: str | Path, user: str | None = None, executable: str | None = None) -> HostSetup:
    """This host's setup in `directory` (made absolute): the units run `executable` (default: this
    install's `sparkscale`, `installed_executable`) as `user` (default: the current one) and that
    user's primary group (the user's own name when this host does not know the user)."""
    user = user or pwd.getpwuid(os.getuid()).pw_name
    try:
        group = grp.getgrgid(pwd.getpwnam(user).pw_gid).gr_name
    except KeyError:  # a user made later (systemd/README.md's `useradd --system sparkscale`)
        group = user
    return HostSetup(Path(directory).expanduser().absolute(), executable or installed_executable(), user, group)


def installed_executable() -> str:
    """The `sparkscale` script of the installation running now: beside this interpreter (a virtual
    environment's bin/, not resolved: its python is a link out of it), else the first on PATH.
    FileNotFoundError when there is none (an uninstalled checkout)."""
    beside = shutil.which("sparkscale", path=str(Path(sys.executable).parent))
    found = beside or shutil.which("sparkscale")
    if found is None:
        raise FileNotFoundError(f"no `sparkscale` script beside {sys.executable} or on PATH: install the package "
                                "(pip install sparkscale-*.whl), or give --executable")
    return str(Path(found).absolute())


def existing(files: list[HostFile]) -> list[Path]:
    """The files that are there already (which `init` does not overwrite without --force)."""
    return [f.path for f in files if f.path.exists() or f.path.is_symlink()]


def write(files: list[HostFile]) -> None:
    """Write each file (its directory made if need be); the config 0640: it may name secret files.
    A link in the way is replaced, not written through (configs/sparkscale.yaml links to the package)."""
    for f in files:
        f.path.parent.mkdir(parents=True, exist_ok=True)
        if f.path.is_symlink():
            f.path.unlink()
        f.path.write_text(f.text, encoding="utf-8")
        if f.path.name == resources.CONFIG:
            f.path.chmod(0o640)


def next_steps(setup: HostSetup) -> str:
    """What to do with the written files, in order, with this host's paths (commands to paste)."""
    config, exe = shlex.quote(str(setup.config_path)), shlex.quote(setup.executable)
    units = " ".join(shlex.quote(str(setup.directory / name)) for name in resources.UNITS)
    steps = [
        f"1. Edit {config}: list your pipelines under `apps:` and point spark, redis and zookeeper at your "
        "cluster (a key left out keeps its default; each key is explained in the file).",
        f"2. Check it: {exe} check-config {config}   (exit 0 = usable; 2 names the key and the problem)",
        "3. Identities: set `security.identity_dir` (a directory of mode 0700) for one identity per role "
        "(daemon, operator, each app's agent); `sparkscale cluster up` and `pipeline submit` make the secrets. "
        "Left null, the one shared identity of redis.password_file and zookeeper.auth_file is used.",
        f"4. Install the units (as root; they run as {setup.user}:{setup.group}):\n"
        f"     cp {units} /etc/systemd/system/\n"
        "     systemd-analyze verify /etc/systemd/system/sparkscale.service\n"
        "     systemctl daemon-reload && systemctl enable --now sparkscale\n"
        "     systemctl status sparkscale   # active (running)",
    ]
    notes = []
    if setup.config_path.is_relative_to("/home"):
        notes.append(f"Note: the units set ProtectHome=yes, so the service cannot read {config}: copy it "
                     "to /etc/sparkscale/ and put SPARKSCALE_CONFIG=/etc/sparkscale/sparkscale.yaml in "
                     "/etc/default/sparkscale (both units read it).")
    return "\n".join(["Next steps:", *steps, *notes, "More: systemd/README.md of the source tree (reload, logs, "
                      "watchdog, metrics, polkit for drivers.supervisor: systemd)."])
