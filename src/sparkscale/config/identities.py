"""One identity per role (issue 32, "One identity per role"): the daemon, the operator (the CLI and
the lab) and each app's agent (in the driver, which also runs the user's script) each authenticate
to ZooKeeper and Redis under a name of their own, so ACLs can tell them apart.

With `security.identity_dir` set, that directory (mode 0700) holds one secret file per identity,
`<name>.secret` (mode 0600, one random password); the user name is `sparkscale-<name>` for ZooKeeper
digest auth and Redis ACL users alike. A driver is given only its own file (IDENTITY_FILE_ENV).
Unset, nothing here is used and every process connects as before (one identity, or none).
"""

from __future__ import annotations

import os
import re
import secrets
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from kazoo.security import make_digest_acl_credential

from sparkscale.config.secret_files import read_secret_file

USER_PREFIX = "sparkscale-"
SECRET_SUFFIX = ".secret"
# The agent's own secret file, set by `pipeline submit` for the driver (apps/submit.py).
IDENTITY_FILE_ENV = "SPARKSCALE_IDENTITY_FILE"
_APP_NAME = re.compile(r"[A-Za-z0-9_.-]+")


class Role(StrEnum):
    DAEMON = "daemon"
    OPERATOR = "operator"
    AGENT = "agent"


@dataclass(frozen=True)
class Identity:
    """Who a process is: a role, and for an agent its app."""

    role: Role
    app: str | None = None

    @property
    def name(self) -> str:
        """`daemon`, `operator` or `agent-<app>`: the secret file's stem."""
        return self.role.value if self.app is None else f"{self.role.value}-{self.app}"

    @property
    def user(self) -> str:
        """The ZooKeeper digest user and the Redis ACL user."""
        return USER_PREFIX + self.name

    def secret_path(self, identity_dir: str | Path) -> Path:
        return Path(identity_dir).expanduser() / f"{self.name}{SECRET_SUFFIX}"


def identity_for(role: Role | str, app: str | None = None) -> Identity:
    """The identity of `role`; an agent's needs its app, the others take none (ValueError)."""
    role = Role(role)
    if (role is Role.AGENT) != (app is not None):
        raise ValueError(f"the {role.value} identity {'needs' if role is Role.AGENT else 'takes no'} app name")
    if app is not None and not _APP_NAME.fullmatch(app):
        raise ValueError(f"app name {app!r} cannot name an identity (expected letters, digits, '_', '.', '-')")
    return Identity(role, app)


DAEMON = identity_for(Role.DAEMON)
OPERATOR = identity_for(Role.OPERATOR)


_process: list[Identity] = [OPERATOR]  # the CLI's and the lab's; the daemon and the driver say theirs


def process_identity() -> Identity:
    """Whom this process connects as where a shared helper (a monitor, a store) opens a client."""
    return _process[0]


def set_process_identity(identity: Identity) -> None:
    """Called once at a process's entry: `sparkscale run` (daemon), the driver's bootstrap (agent)."""
    _process[0] = identity


@dataclass(frozen=True)
class Credentials:
    """An identity with its password read. `repr` leaves the password out."""

    identity: Identity
    password: str = field(repr=False)

    @property
    def user(self) -> str:
        return self.identity.user

    @property
    def digest_id(self) -> str:
        """ZooKeeper's digest id `user:base64(sha1(user:password))`, as ACLs name it."""
        return str(make_digest_acl_credential(self.user, self.password))


def read_credentials(identity: Identity, secret_file: str | Path) -> Credentials:
    """The identity with the password in `secret_file` (SecretFileProblem if it is unusable)."""
    return Credentials(identity, read_secret_file(secret_file))


def credentials_for(identity_dir: str | None, identity: Identity) -> Credentials | None:
    """How `identity` authenticates: None when identities are off (no `security.identity_dir`). An
    agent reads the file its driver was given ($SPARKSCALE_IDENTITY_FILE) if there is one, so a
    driver need not see the directory."""
    if identity.role is Role.AGENT and os.environ.get(IDENTITY_FILE_ENV):
        return read_credentials(identity, os.environ[IDENTITY_FILE_ENV])
    if identity_dir is None:
        return None
    return read_credentials(identity, identity.secret_path(identity_dir))


def digest_user(digest_id: str) -> str:
    """The user part of a digest id `user:hash`."""
    return digest_id.rsplit(":", 1)[0]


def ensure_secret(identity_dir: str | Path, identity: Identity) -> Path:
    """Create `identity`'s secret (and the directory, mode 0700) unless it exists; its path. An
    existing secret is kept: the ACLs and Redis users made from it stay valid."""
    directory = Path(identity_dir).expanduser()
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    path = identity.secret_path(directory)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        read_secret_file(path)  # still private and readable, or SecretFileProblem now
        return path
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_urlsafe(32) + "\n")
    return path
