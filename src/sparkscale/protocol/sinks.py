"""Where a sink writes: the Redis server and the key names of one query's output.

The sinks (`sparkscale_lab/pipelines/sinks.py`, in the driver and its executors) write under these names and
the verifier (`sparkscale_lab/pipelines/verify.py`, `sparkscale_lab/pipelines/check.py`, on the head node) reads
them back, so the names
are part of the shared key vocabulary and live here, without PySpark. The layout itself (what each
key holds) is documented with the sinks.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass

import redis

from sparkscale.config.connections import RedisConfig
from sparkscale.protocol.keys import output_base
from sparkscale.redisconn import NO_AUTH, RedisAuth

# Where nothing says otherwise, the config's Redis (one place for the defaults).
DEFAULT_REDIS = RedisConfig()


@dataclass(frozen=True)
class SinkTarget:
    """Where a sink writes: the Redis server and the `{prefix}{app}:out:{query}` namespace."""

    app: str
    query: str
    host: str = DEFAULT_REDIS.host
    port: int = 6380
    db: int = 0
    prefix: str = "sparkscale:"
    auth: RedisAuth = NO_AUTH  # as the config's redis.*; travels to executors in the options

    @property
    def base(self) -> str:
        return output_base(self.prefix, self.app, self.query)

    def batch_key(self, batch_id: int) -> str:
        return f"{self.base}:b:{batch_id}"

    @property
    def batches_key(self) -> str:
        return f"{self.base}:batches"

    @property
    def log_key(self) -> str:
        return f"{self.base}:log"

    @property
    def kv_key(self) -> str:
        return f"{self.base}:kv"

    @property
    def meta_key(self) -> str:
        return f"{self.base}:meta"

    def stage_key(self) -> str:
        return f"{self.base}:stage:{uuid.uuid4().hex}"

    def client(self) -> redis.Redis:
        return redis.Redis(host=self.host, port=self.port, db=self.db, decode_responses=True,
                           **self.auth.client_kwargs())

    def as_options(self) -> dict[str, str]:
        return {"host": self.host, "port": str(self.port), "db": str(self.db), "prefix": self.prefix,
                "app": self.app, "query": self.query, **self.auth.as_options()}

    @classmethod
    def parse(cls, options: Mapping[str, object]) -> SinkTarget:
        def get(name: str, default: str | None = None) -> str | None:
            value = options.get(name.lower(), options.get(name, default))
            return default if value is None else str(value)

        app, query = get("app"), get("query")
        if not app or not query:
            raise ValueError("redis sink: options 'app' and 'query' are required")
        return cls(app=app, query=query, host=get("host", DEFAULT_REDIS.host) or DEFAULT_REDIS.host,
                   port=int(get("port", "6380") or 6380), db=int(get("db", "0") or 0),
                   prefix=get("prefix", "sparkscale:") or "", auth=RedisAuth.from_options(get))
