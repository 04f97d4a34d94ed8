"""Where the services sparkscale talks to are and how it reaches them: the Spark master (and the
drivers' REST APIs), Redis and ZooKeeper. Secrets are checked here but kept as file paths only
(secret_files.py); they are read when a connection is made (secrets.py)."""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path

from pydantic import Field, field_validator, model_validator

from sparkscale.config.base import ConfigSection
from sparkscale.config.secret_files import read_secret_file, split_digest

_Section = ConfigSection


class SparkConfig(_Section):
    """Where the Spark standalone master is, and how the daemon talks to drivers' REST APIs."""

    master_url: str = Field("spark://127.0.0.1:7077", description=(
        "Where pipelines are submitted: the standalone master's RPC URL, spark://HOST:PORT."))
    master_web_url: str = Field("http://127.0.0.1:8080", description=(
        "The master's web UI, http(s)://HOST:PORT; its /json/ endpoint lists workers and running applications."))
    driver_ui_port: int = Field(0, ge=0, le=65535, description=(
        "Port of a managed driver's UI, which serves the REST API the monitors read. 0 = any free port (the "
        "driver's agent publishes the URL it got); a port P gives the first app P, the next P+1, and so on "
        "in config order."))
    # spark.driver.bindAddress and SPARK_LOCAL_IP: the driver's UI binds SPARK_LOCAL_IP, else 0.0.0.0
    # (issue 32).
    driver_host: str | None = Field(None, examples=["10.0.0.5"], description=(
        "spark.driver.host: the address executors and the daemon reach a driver at; null = Spark's choice "
        "(SPARK_LOCAL_IP, else the host's address). Set it on a host with several addresses."))
    driver_bind_address: str | None = Field("127.0.0.1", description=(
        "Where a driver listens (spark.driver.bindAddress and SPARK_LOCAL_IP): loopback by default, so "
        "nobody else on the network reaches its UI or REST API. With executors on other hosts, the address "
        "they reach (and driver_host), or 0.0.0.0 for all; null = Spark's default, all addresses."))
    rest_timeout_s: float = Field(5.0, gt=0, description=(
        "Timeout of one REST request to the master or a driver, in seconds."))
    home: str | None = Field(None, examples=["/opt/spark"], description=(
        "SPARK_HOME to use; null = the pyspark package's own (it ships bin/spark-class and the jars)."))
    # The URL an agent registers in Redis is anyone's with Redis access: store/driver_urls.py.
    driver_hosts_allowed: list[str] | None = Field(None, examples=[["10.0.0.5", "10.0.0.6"]], description=(
        "The hosts whose driver REST URLs the daemon opens. null = driver_host, driver_bind_address, the "
        "master's and the workers' hosts, and the host the app's agent registered in ZooKeeper."))

    @field_validator("driver_hosts_allowed")
    @classmethod
    def _hosts_allowed(cls, value: list[str] | None) -> list[str] | None:
        for i, host in enumerate(value or ()):
            if not re.fullmatch(r"[A-Za-z0-9._:\-]{1,255}", host):
                raise ValueError(f"driver_hosts_allowed[{i}] = {host!r} is not a host name or IP address")
        return value

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

    @model_validator(mode="after")
    def _driver_reachable(self) -> SparkConfig:
        """A driver listening on loopback only cannot be reached at another address."""
        if (self.driver_host is not None and self.driver_bind_address is not None
                and is_loopback(self.driver_bind_address) and not is_loopback(self.driver_host)):
            raise ValueError(
                f"driver_host {self.driver_host} is not a loopback address but drivers listen on "
                f"driver_bind_address {self.driver_bind_address}: set spark.driver_bind_address too "
                f"(the address itself, or 0.0.0.0 for all)")
        return self

    @property
    def master_host(self) -> str:
        return self.master_url.removeprefix("spark://").rsplit(":", 1)[0]

    @property
    def master_port(self) -> int:
        return int(self.master_url.rsplit(":", 1)[1])

    @property
    def master_web_port(self) -> int:
        return int(self.master_web_url.rsplit(":", 1)[1])


def existing_file(value: str | None, what: str) -> str | None:
    """`value` if it is None or names a file (a validator's check of a TLS file key)."""
    if value is not None and not Path(value).expanduser().is_file():
        raise ValueError(f"{what} {value} does not exist or is not a file")
    return value


def is_loopback(host: str) -> bool:
    """`localhost` or a loopback IP address: this host, under any of its loopback names."""
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class RedisConfig(_Section):
    """Where Redis is and how sparkscale authenticates to it."""

    host: str = Field("127.0.0.1", description="The Redis server's host.")
    port: int = Field(6380, ge=1, le=65535, description=(
        "The Redis server's port. Not 6379: Debian's redis-server package starts a system Redis there."))
    db: int = Field(0, ge=0, description="The Redis database number.")
    key_prefix: str = Field("sparkscale:", description=(
        "Prefix of every key sparkscale writes (docs/internals.md lists them)."))
    socket_timeout_s: float = Field(5.0, gt=0, description="Timeout of one Redis call, in seconds.")
    # docs/install.md "Identities and secrets": the password is read when a client connects, never kept in the config.
    username: str | None = Field(None, examples=["sparkscale"], description=(
        "ACL user name for AUTH (it needs a password); null = the `default` user (plain requirepass)."))
    password_file: str | None = Field(None, examples=["/etc/sparkscale/redis.password"], description=(
        "File holding the Redis password (one line, mode 0600 or stricter), read whenever a client "
        "connects; null = $SPARKSCALE_REDIS_PASSWORD, and without it no AUTH."))
    tls: bool = Field(False, description=(
        "Connect with TLS (the embedded Redis of `cluster up` does not serve it)."))
    ca_file: str | None = Field(None, examples=["/etc/ssl/redis-ca.pem"], description=(
        "CA bundle that signed the server's certificate (needs tls: true); null = the system's CAs. "
        "Executors of the shipped pipelines read it too: it must exist at this path on their hosts."))

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
        return existing_file(value, "CA file")

    @model_validator(mode="after")
    def _ca_needs_tls(self) -> RedisConfig:
        if self.ca_file is not None and not self.tls:
            raise ValueError("ca_file is set but tls is false: set redis.tls: true (or drop ca_file)")
        return self


class ZooKeeperConfig(_Section):
    """Where ZooKeeper is and how sparkscale authenticates to it."""

    hosts: str = Field("127.0.0.1:2181", description=(
        "Connection string, HOST:PORT[,HOST:PORT...]; the embedded server binds the first."))
    root: str = Field("/sparkscale", description=(
        "Root znode of everything sparkscale writes (leader lock, commands, migration journal); not /."))
    session_timeout_s: float = Field(10.0, ge=2, description=(
        "ZooKeeper session timeout, in seconds: a daemon that loses its session stops acting."))
    # docs/install.md "Identities and secrets". The daemon locks the root at start.
    auth_file: str | None = Field(None, examples=["/etc/sparkscale/zookeeper.auth"], description=(
        "Digest auth: a file (mode 0600 or stricter) holding one line USER:PASSWORD, read on connect; null = "
        "$SPARKSCALE_ZOOKEEPER_AUTH, and without it no auth. With it, sparkscale's znodes are readable and "
        "writable by that identity only."))
    tls: bool = Field(False, description=(
        "Connect with TLS, to a server with a secureClientPort (not the embedded one of `cluster up`)."))
    ca_file: str | None = Field(None, examples=["/etc/ssl/zookeeper-ca.pem"], description=(
        "CA bundle to verify the server's certificate and name against (needs tls: true); null = the system's CAs."))
    cert_file: str | None = Field(None, examples=["/etc/sparkscale/zk-client.pem"], description=(
        "Client certificate, for a server that requires one (needs tls: true and key_file)."))
    key_file: str | None = Field(None, examples=["/etc/sparkscale/zk-client.key"], description=(
        "The client certificate's private key (needs tls: true and cert_file)."))

    @field_validator("ca_file", "cert_file", "key_file")
    @classmethod
    def _tls_file(cls, value: str | None) -> str | None:
        return existing_file(value, "file")

    @model_validator(mode="after")
    def _tls_files(self) -> ZooKeeperConfig:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("cert_file and key_file go together: set both or neither")
        for name in ("ca_file", "cert_file", "key_file"):
            if getattr(self, name) is not None and not self.tls:
                raise ValueError(f"{name} is set but tls is false: set zookeeper.tls: true (or drop {name})")
        return self

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
