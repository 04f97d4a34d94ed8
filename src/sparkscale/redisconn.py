"""One way to open a Redis connection from the config, so timeouts, db and authentication are never
forgotten; and `RedisAuth`, the same settings as plain values for clients made elsewhere (a data
source's readers and writers on executors get them as options)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from redis.typing import EncodableT, FieldT

from sparkscale.config import Config, RedisConfig
from sparkscale.config.identities import Credentials, Identity, process_identity
from sparkscale.config.secrets import redis_password, role_credentials


@dataclass(frozen=True)
class RedisAuth:
    """AUTH and TLS settings with the password resolved. `repr` leaves the password out."""

    username: str | None = None
    password: str | None = field(default=None, repr=False)
    tls: bool = False
    ca_file: str | None = None

    @classmethod
    def from_config(cls, cfg: RedisConfig, identity: Credentials | None = None) -> RedisAuth:
        """Reads the password now (file or environment): ConfigError if it cannot be had. With
        `identity` (security.identity_dir), its ACL user and password instead of redis.*'s."""
        ca_file = str(Path(cfg.ca_file).expanduser()) if cfg.ca_file else None
        if identity is not None:
            return cls(identity.user, identity.password, cfg.tls, ca_file)
        return cls(cfg.username, redis_password(cfg), cfg.tls, ca_file)

    def client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of `redis.Redis` for these settings; none at all without auth or TLS."""
        kwargs: dict[str, Any] = {}
        if self.username is not None:
            kwargs["username"] = self.username
        if self.password is not None:
            kwargs["password"] = self.password
        if self.tls:
            kwargs["ssl"] = True
            if self.ca_file is not None:
                kwargs["ssl_ca_certs"] = self.ca_file
        return kwargs

    def as_options(self) -> dict[str, str]:
        """Spark data source options; only those set, so an unauthenticated source's options are as
        they were. The password's option is named `password`, which Spark's `spark.redaction.regex`
        hides in query plans and the UI."""
        opts: dict[str, str] = {}
        if self.username is not None:
            opts["username"] = self.username
        if self.password is not None:
            opts["password"] = self.password
        if self.tls:
            opts["tls"] = "true"
        if self.ca_file is not None:
            opts["caFile"] = self.ca_file
        return opts

    @classmethod
    def from_options(cls, get: Callable[[str], str | None]) -> RedisAuth:
        """From options read with `get(name)` (None when absent); the inverse of `as_options`."""
        tls = (get("tls") or "false").strip().lower()
        if tls not in ("true", "false"):
            raise ValueError(f"Redis option 'tls' must be true or false, got {tls!r}")
        return cls(get("username") or None, get("password") or None, tls == "true", get("caFile") or None)


NO_AUTH = RedisAuth()


# How a decoding client reads bytes that are not UTF-8: each bad byte as U+FFFD. Strict decoding
# raises UnicodeDecodeError in the middle of an answer, which fails a whole pipeline (a cycle reads
# every app's keys in one round trip) with an error no reader names; replaced, the value reaches
# its reader, whose validation refuses that record alone, by name.
ENCODING_ERRORS = "replace"


def connect(cfg: RedisConfig, decode_responses: bool = True, identity: Credentials | None = None) -> redis.Redis:
    """A client for the config's Redis, as `identity`'s ACL user (None: redis.username/password_file)."""
    return redis.Redis(
        host=cfg.host, port=cfg.port, db=cfg.db, decode_responses=decode_responses, encoding_errors=ENCODING_ERRORS,
        socket_timeout=cfg.socket_timeout_s, socket_connect_timeout=cfg.socket_timeout_s,
        **RedisAuth.from_config(cfg, identity).client_kwargs(),
    )


# What redis-py's annotations give for a hash and for XRANGE: bytes or str by the client's
# decode_responses, and None where the server may answer nil.
RawHash = dict[bytes | str, bytes | str]
RawEntries = list[tuple[bytes | str | None, RawHash | None]] | None


def to_write(fields: Mapping[str, EncodableT]) -> dict[FieldT, EncodableT]:
    """Fields for HSET or XADD: a copy typed as redis-py's mapping, whose key type a dict[str, ...]
    is not (dict keys are invariant)."""
    return {k: v for k, v in fields.items()}  # noqa: C416  # the copy retypes the keys


def text(value: bytes | str) -> str:
    """A key or value as text: `connect`'s clients decode already; one made with
    decode_responses=False answers bytes."""
    return value.decode() if isinstance(value, bytes) else value


def text_hash(raw: RawHash | None) -> dict[str, str]:
    """A hash (HGETALL, a stream entry's fields) as text; nil is empty."""
    return {text(k): text(v) for k, v in (raw or {}).items()}


def stream_entries(raw: RawEntries) -> list[tuple[str, dict[str, str]]]:
    """An XRANGE answer as (entry id, fields) text pairs; a nil answer or entry is empty."""
    return [("" if entry_id is None else text(entry_id), text_hash(fields)) for entry_id, fields in raw or []]


def connect_as(cfg: Config, identity: Identity | None = None, decode_responses: bool = True) -> redis.Redis:
    """A client for a process of `identity` (config/identities.py; None: this process's): `connect(cfg.redis)`
    when identities are off; ConfigError when its secret is unusable."""
    creds = role_credentials(cfg, process_identity() if identity is None else identity)
    if creds is None:
        return connect(cfg.redis, decode_responses)
    return connect(cfg.redis, decode_responses, identity=creds)


def auth_as(cfg: Config, identity: Identity | None = None) -> RedisAuth:
    """`RedisAuth` for `identity` (None: this process's), for clients made elsewhere (executors)."""
    who = process_identity() if identity is None else identity
    return RedisAuth.from_config(cfg.redis, role_credentials(cfg, who))
