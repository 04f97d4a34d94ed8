"""Where the services sparkscale talks to are and how it reaches them: the Spark master (and the
drivers' REST APIs), Redis and ZooKeeper. Secrets are checked here but kept as file paths only
(secret_files.py); they are read when a connection is made (secrets.py)."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import Field, field_validator, model_validator

from sparkscale.config.base import ConfigSection
from sparkscale.config.secret_files import read_secret_file, split_digest

_Section = ConfigSection


class SparkConfig(_Section):
    """Where the Spark standalone master is, and how the daemon talks to drivers' REST APIs."""

    master_url: str = "spark://127.0.0.1:7077"
    master_web_url: str = "http://127.0.0.1:8080"
    # A driver's UI (and REST API) port: 0 = any free port (the agent publishes the URL it got),
    # else the first app's port, the next app's one above, and so on in config order.
    driver_ui_port: int = Field(0, ge=0, le=65535)
    # spark.driver.host: the address executors and the daemon reach a driver at (default: Spark's
    # choice, the host's address); driver_bind_address: spark.driver.bindAddress (default: all).
    driver_host: str | None = None
    driver_bind_address: str | None = None
    rest_timeout_s: float = Field(5.0, gt=0)
    home: str | None = None

    @field_validator("master_url")
    @classmethod
    def _spark_url(cls, value: str) -> str:
        if not re.fullmatch(r"spark://[^:/\s]+:\d{1,5}", value):
            raise ValueError("expected spark://HOST:PORT")
        return value

    @field_validator("master_web_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not re.fullmatch(r"https?://[^:/\s]+:\d{1,5}/?", value):
            raise ValueError("expected http://HOST:PORT")
        return value.rstrip("/")

    @property
    def master_host(self) -> str:
        return self.master_url.removeprefix("spark://").rsplit(":", 1)[0]

    @property
    def master_port(self) -> int:
        return int(self.master_url.rsplit(":", 1)[1])

    @property
    def master_web_port(self) -> int:
        return int(self.master_web_url.rsplit(":", 1)[1])


class RedisConfig(_Section):
    host: str = "127.0.0.1"
    # Not 6379: Debian's redis-server package starts a system Redis there.
    port: int = Field(6380, ge=1, le=65535)
    db: int = Field(0, ge=0)
    key_prefix: str = "sparkscale:"
    socket_timeout_s: float = Field(5.0, gt=0)
    # Redis AUTH (README "Security"): the password is read from this file (mode 0600) when a client
    # connects, never kept here; without a file, from $SPARKSCALE_REDIS_PASSWORD; neither: no AUTH.
    username: str | None = None
    password_file: str | None = None
    tls: bool = False
    ca_file: str | None = None  # CA bundle to verify the server's certificate (tls); default: the system's

    @field_validator("username")
    @classmethod
    def _username(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[^\s\x00-\x1f\x7f]+", value):
            raise ValueError("expected a Redis user name without spaces or control characters")
        return value

    @field_validator("password_file")
    @classmethod
    def _password_file(cls, value: str | None) -> str | None:
        if value is not None:
            read_secret_file(value)  # exists, is private, holds something; the content is dropped
        return value

    @field_validator("ca_file")
    @classmethod
    def _ca_file(cls, value: str | None) -> str | None:
        if value is not None and not Path(value).expanduser().is_file():
            raise ValueError(f"CA file {value} does not exist or is not a file")
        return value

    @model_validator(mode="after")
    def _ca_needs_tls(self) -> RedisConfig:
        if self.ca_file is not None and not self.tls:
            raise ValueError("ca_file is set but tls is false: set redis.tls: true (or drop ca_file)")
        return self


class ZooKeeperConfig(_Section):
    hosts: str = "127.0.0.1:2181"
    root: str = "/sparkscale"
    session_timeout_s: float = Field(10.0, ge=2)
    # Digest auth (README "Security"): a file (mode 0600) holding USER:PASSWORD, read on connect;
    # without it, $SPARKSCALE_ZOOKEEPER_AUTH; neither: no auth. With it, sparkscale's znodes are
    # readable and writable by that identity only (the daemon locks the root at start).
    auth_file: str | None = None

    @field_validator("auth_file")
    @classmethod
    def _auth_file(cls, value: str | None) -> str | None:
        if value is not None:
            split_digest(read_secret_file(value), f"secret file {value}")
        return value

    @field_validator("hosts")
    @classmethod
    def _hosts(cls, value: str) -> str:
        for hostport in value.split(","):
            if not re.fullmatch(r"[^:/\s,]+:\d{1,5}", hostport):
                raise ValueError("expected HOST:PORT[,HOST:PORT...]")
        return value

    @field_validator("root")
    @classmethod
    def _root(cls, value: str) -> str:
        if value == "/":
            raise ValueError("the root must not be /: securing it would lock the whole ensemble")
        if not value.startswith("/") or value.endswith("/"):
            raise ValueError("expected an absolute znode path such as /sparkscale")
        return value

    @property
    def first_host(self) -> str:
        return self.hosts.split(",")[0].rsplit(":", 1)[0]

    @property
    def first_port(self) -> int:
        return int(self.hosts.split(",")[0].rsplit(":", 1)[1])
