"""The Redis Streams source's options (redis_source.py): the typed twin of the string options
`spark.readStream.format("redis_streams")` takes, and the schema of the rows it reads."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from sparkscale.protocol.keys import input_stream_key
from sparkscale.protocol.sinks import DEFAULT_REDIS
from sparkscale.redisconn import NO_AUTH, RedisAuth


@dataclass(frozen=True)
class RedisStreamsOptions:
    """Everything the source needs, as the typed twin of its string options."""

    app: str
    query: str
    partitions: int
    fields: tuple[str, ...] = ()
    host: str = DEFAULT_REDIS.host
    port: int = 6380
    db: int = 0
    prefix: str = "sparkscale:"
    max_records_per_batch: int | None = None
    starting: str = "earliest"  # or "latest": only entries added after the first batch
    # The config's Redis AUTH/TLS: options `username`, `password` (redacted by Spark), `tls`, `caFile`.
    auth: RedisAuth = NO_AUTH

    def as_options(self) -> dict[str, str]:
        """The `.option(...)` map for `spark.readStream.format("redis_streams")`."""
        opts = {
            "host": self.host,
            "port": str(self.port),
            "db": str(self.db),
            "prefix": self.prefix,
            "app": self.app,
            "query": self.query,
            "partitions": str(self.partitions),
            "fields": ",".join(self.fields),
            "startingOffsets": self.starting,
        }
        if self.max_records_per_batch is not None:
            opts["maxRecordsPerBatch"] = str(self.max_records_per_batch)
        return {**opts, **self.auth.as_options()}

    @classmethod
    def parse(cls, options: Any) -> RedisStreamsOptions:
        """From Spark's (case-insensitive) option map; raises ValueError naming the bad option."""

        def get(name: str, default: str | None = None) -> str | None:
            value = options.get(name.lower(), options.get(name, default))
            return default if value is None else str(value)

        def required(name: str) -> str:
            value = get(name)
            if not value:
                raise ValueError(f"redis_streams: option {name!r} is required")
            return value

        def integer(name: str, default: str | None, minimum: int) -> int | None:
            text = get(name, default)
            if text is None or text == "":
                return None
            try:
                value = int(text)
            except ValueError:
                raise ValueError(f"redis_streams: option {name!r} must be an integer, got {text!r}") from None
            if value < minimum:
                raise ValueError(f"redis_streams: option {name!r} must be >= {minimum}, got {value}")
            return value

        starting = (get("startingOffsets", "earliest") or "earliest").lower()
        if starting not in ("earliest", "latest"):
            raise ValueError(f"redis_streams: startingOffsets must be earliest or latest, got {starting!r}")
        fields = tuple(f.strip() for f in (get("fields", "") or "").split(",") if f.strip())
        clash = {"uid", "ts", "partition", "entry_id"} & set(fields)
        if clash:
            raise ValueError(f"redis_streams: payload fields clash with fixed columns: {sorted(clash)}")
        return cls(
            app=required("app"),
            query=required("query"),
            partitions=integer("partitions", None, 1) or _missing("partitions"),
            fields=fields,
            host=get("host", DEFAULT_REDIS.host) or DEFAULT_REDIS.host,
            port=integer("port", "6380", 1) or 6380,
            db=integer("db", "0", 0) or 0,
            prefix=get("prefix", "sparkscale:") or "",
            max_records_per_batch=integer("maxRecordsPerBatch", None, 1),
            starting=starting,
            auth=RedisAuth.from_options(get),
        )

    def client(self) -> redis.Redis:
        return redis.Redis(host=self.host, port=self.port, db=self.db, decode_responses=True,
                           **self.auth.client_kwargs())

    def stream_key(self, partition: int) -> str:
        return input_stream_key(self.prefix, self.app, partition)


def _missing(name: str) -> int:
    raise ValueError(f"redis_streams: option {name!r} is required")


def source_schema(fields: Sequence[str]) -> StructType:
    """`uid, ts, partition, entry_id`, then one string column per payload field."""
    return StructType(
        [
            StructField("uid", StringType()),
            StructField("ts", LongType()),
            StructField("partition", IntegerType()),
            StructField("entry_id", StringType()),
            *(StructField(name, StringType()) for name in fields),
        ]
    )
