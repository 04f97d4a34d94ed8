"""Secrets (the Redis password, ZooKeeper's digest identity): read from a file, or the environment,
when a connection is made; the config keeps only the file's path. So no repr, log line, `--show`
dump or error message can carry a secret. What makes a secret file usable is `secret_files`.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING

from sparkscale.config.connections import RedisConfig, ZooKeeperConfig
from sparkscale.config.identities import IDENTITY_FILE_ENV, Credentials, Identity, Role, credentials_for
from sparkscale.config.problems import ConfigError, ConfigProblem
from sparkscale.config.secret_files import SecretFileProblem, read_secret_file, split_digest

if TYPE_CHECKING:
    from sparkscale.config.sections import Config

# Spark's default spark.redaction.regex (core/src/main/scala/org/apache/spark/internal/config/package.scala):
# which spark_conf keys hold secrets (masked by `check-config --show`, refused in `--set`).
SPARK_SECRET_KEY = re.compile(r"(?i)secret|password|token|access[.]?key")

# Used when the config names no file for the secret (a systemd unit's Environment=, a CI secret).
REDIS_PASSWORD_ENV = "SPARKSCALE_REDIS_PASSWORD"
ZOOKEEPER_AUTH_ENV = "SPARKSCALE_ZOOKEEPER_AUTH"  # USER:PASSWORD


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


def role_credentials(cfg: Config, identity: Identity) -> Credentials | None:
    """How a process of `identity` authenticates (config/identities.py): None when `security.identity_dir`
    is unset (and, for an agent, no $SPARKSCALE_IDENTITY_FILE); ConfigError if its secret is unusable."""
    try:
        return credentials_for(cfg.security.identity_dir, identity)
    except SecretFileProblem as exc:
        own_file = identity.role is Role.AGENT and IDENTITY_FILE_ENV in os.environ
        source = IDENTITY_FILE_ENV if own_file else (cfg.security.identity_dir or "<defaults>")
        raise _config_error(source, IDENTITY_FILE_ENV if own_file else "security.identity_dir", str(exc)) from None


def check_secrets(cfg: Config, source: str = "<defaults>", identity: Identity | None = None) -> None:
    """Read every secret the config (from `source`) points at, files or the environment, as a command
    does before it connects: a ConfigError (exit 2) now rather than a failed connection later. With
    `identity`, that identity's secret too (when identities are on)."""
    password = redis_password(cfg.redis)
    if cfg.redis.username is not None and password is None:
        raise _config_error(source, "redis.username",
                            f"a username needs a password: set redis.password_file (or {REDIS_PASSWORD_ENV})")
    zookeeper_auth(cfg.zookeeper)
    if identity is not None:
        role_credentials(cfg, identity)


def _from_file(path: str, key: str) -> str:
    try:
        return read_secret_file(path)
    except SecretFileProblem as exc:
        raise _config_error(path, key, str(exc)) from None


def _config_error(source: str, key: str, message: str) -> ConfigError:
    return ConfigError([ConfigProblem(source, key, message)])
