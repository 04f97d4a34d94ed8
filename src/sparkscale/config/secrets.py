"""Secrets (the Redis password, ZooKeeper's digest identity): read from a file, or the environment,
when a connection is made; the config keeps only the file's path. So no repr, log line, `--show`
dump or error message can carry a secret.

A secret file must be a regular file that neither group nor others can read or write (mode & 0o077
== 0): a password others can read is no longer one, and one others can write lets them choose it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sparkscale.config.loading import ConfigError
    from sparkscale.config.sections import Config, RedisConfig, ZooKeeperConfig

# Used when the config names no file for the secret (a systemd unit's Environment=, a CI secret).
REDIS_PASSWORD_ENV = "SPARKSCALE_REDIS_PASSWORD"
ZOOKEEPER_AUTH_ENV = "SPARKSCALE_ZOOKEEPER_AUTH"  # USER:PASSWORD


class SecretFileProblem(ValueError):
    """A secret file that cannot be used. The message names the file and the fix, never its content
    (a ValueError, so a config validator reports it under its key)."""


def read_secret_file(path: str | Path) -> str:
    """The secret in `path`, one trailing newline stripped; SecretFileProblem if the file is missing,
    not a regular file, open to group or others, unreadable, empty or not UTF-8 text."""
    p = Path(path).expanduser()
    try:
        # O_NONBLOCK: a FIFO put in a secret's place must not hang the opener.
        with open(p, "rb", opener=lambda name, flags: os.open(name, flags | os.O_NONBLOCK)) as f:
            info = os.fstat(f.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise SecretFileProblem(f"secret file {p} is not a regular file")
            mode = stat.S_IMODE(info.st_mode)
            if mode & 0o077:
                raise SecretFileProblem(
                    f"secret file {p} is open to group or others (mode {mode:04o}); "
                    f"run: chmod 600 {p}"
                )
            raw = f.read()
    except FileNotFoundError:
        raise SecretFileProblem(f"secret file {p} does not exist") from None
    except IsADirectoryError:
        raise SecretFileProblem(f"secret file {p} is not a regular file") from None
    except OSError as exc:
        raise SecretFileProblem(f"cannot read secret file {p}: {exc.strerror}") from None
    text = _decoded(raw)
    if text is None:  # outside the except block: the decode error (holding the bytes) is not chained
        raise SecretFileProblem(f"secret file {p} is not UTF-8 text")
    if text.endswith("\r\n"):
        text = text[:-2]
    elif text.endswith("\n"):
        text = text[:-1]
    if not text:
        raise SecretFileProblem(f"secret file {p} is empty")
    return text


def _decoded(raw: bytes) -> str | None:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def split_digest(text: str, where: str) -> tuple[str, str]:
    """(user, password) of a ZooKeeper digest identity `USER:PASSWORD`; ValueError naming `where`."""
    user, sep, password = text.partition(":")
    if not sep or not user or not password or any(c in text for c in "\r\n"):
        raise SecretFileProblem(f"{where} must hold one line USER:PASSWORD (a user and a password, both non-empty)")
    return user, password


# -- on use -----------------------------------------------------------------------------------------


def redis_password(cfg: RedisConfig) -> str | None:
    """The Redis password: `redis.password_file`'s content, else $SPARKSCALE_REDIS_PASSWORD, else None."""
    if cfg.password_file is not None:
        return _from_file(cfg.password_file, "redis.password_file")
    return os.environ.get(REDIS_PASSWORD_ENV) or None


def zookeeper_auth(cfg: ZooKeeperConfig) -> tuple[str, str] | None:
    """(user, password) for ZooKeeper digest auth: `zookeeper.auth_file`, else
    $SPARKSCALE_ZOOKEEPER_AUTH, else None (no auth)."""
    if cfg.auth_file is not None:
        text = _from_file(cfg.auth_file, "zookeeper.auth_file")
        source, key, where = cfg.auth_file, "zookeeper.auth_file", f"secret file {cfg.auth_file}"
    else:
        text = os.environ.get(ZOOKEEPER_AUTH_ENV) or ""
        if not text:
            return None
        source, key, where = "environment", ZOOKEEPER_AUTH_ENV, "its value"
    try:
        return split_digest(text, where)
    except SecretFileProblem as exc:
        raise _config_error(source, key, str(exc)) from None


def check_secrets(cfg: Config, source: str = "<defaults>") -> None:
    """Read every secret the config (from `source`) points at, files or the environment, as a command
    does before it connects: a ConfigError (exit 2) now rather than a failed connection later."""
    password = redis_password(cfg.redis)
    if cfg.redis.username is not None and password is None:
        raise _config_error(source, "redis.username",
                            f"a username needs a password: set redis.password_file (or {REDIS_PASSWORD_ENV})")
    zookeeper_auth(cfg.zookeeper)


def _from_file(path: str, key: str) -> str:
    try:
        return read_secret_file(path)
    except SecretFileProblem as exc:
        raise _config_error(path, key, str(exc)) from None


def _config_error(source: str, key: str, message: str) -> ConfigError:
    # Imported here: loading imports sections, which imports this module.
    from sparkscale.config.loading import ConfigError, ConfigProblem

    return ConfigError([ConfigProblem(source, key, message)])
