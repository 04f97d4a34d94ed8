"""Reading the Redis streams source's positions: what the source, the monitor, the migration
actuator and the verifier share (docs/internals.md; the writer is `sparkscale_lab/pipelines/redis_source.py`).

Offsets are JSON dicts `{"ids": {"0": "<entry id>", ...}, "counts": {"0": <int>, ...}}`: per
partition the last entry id admitted and the stream position up to and including it. A partition's
backlog is the stream's `entries-added` minus that position (exact while streams are not trimmed).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis
import structlog

from sparkscale.protocol.keys import input_stream_key, partitions_key, progress_key, source_status_key

log = structlog.get_logger(__name__)

START_ID = "0-0"


@dataclass(frozen=True)
class StreamOffsets:
    """Per partition: the last admitted entry id and the stream position (entries up to it)."""

    ids: tuple[str, ...]
    counts: tuple[int, ...]

    def to_json(self) -> dict[str, dict[str, Any]]:
        # Key order is fixed: Spark compares offsets by their JSON text.
        return {
            "ids": {str(i): entry for i, entry in enumerate(self.ids)},
            "counts": {str(i): n for i, n in enumerate(self.counts)},
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], partitions: int) -> StreamOffsets:
        """Partitions missing from `data` (the app gained input streams) start at the beginning."""
        ids = data.get("ids", {})
        counts = data.get("counts", {})
        return cls(
            ids=tuple(str(ids.get(str(i), START_ID)) for i in range(partitions)),
            counts=tuple(int(counts.get(str(i), 0)) for i in range(partitions)),
        )

    @property
    def total(self) -> int:
        return sum(self.counts)




@dataclass(frozen=True)
class StreamHead:
    """What `XINFO STREAM` says about an input stream (zeros when it does not exist yet)."""

    last_id: str
    entries_added: int


def stream_heads(client: redis.Redis, keys: Sequence[str]) -> list[StreamHead]:
    """One round trip for all streams; a missing stream is an empty one."""
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.xinfo_stream(key)
    heads: list[StreamHead] = []
    for reply in pipe.execute(raise_on_error=False):
        if isinstance(reply, redis.ResponseError):
            if "no such key" not in str(reply).lower():
                raise reply
            heads.append(StreamHead(START_ID, 0))
        elif isinstance(reply, Exception):
            raise reply
        else:
            heads.append(StreamHead(str(reply["last-generated-id"]), int(reply["entries-added"])))
    return heads


def backlog_by_partition(heads: Sequence[StreamHead], offsets: StreamOffsets) -> list[int]:
    return [max(h.entries_added - n, 0) for h, n in zip(heads, offsets.counts, strict=False)]


def live_backlog(client: redis.Redis, prefix: str, app: str, query: str, partitions: int) -> list[int]:
    """Backlog per partition now, from the query's last processed offsets (all entries if none).

    For a monitor that wants a figure fresher than the last trigger's; one round trip per call.
    """
    status = read_source_status(client, prefix, app, query)
    basis = StreamOffsets.from_json(status.processed or status.committed or {}, partitions)
    heads = stream_heads(client, [input_stream_key(prefix, app, i) for i in range(partitions)])
    return backlog_by_partition(heads, basis)


@dataclass(frozen=True)
class SourceStatus:
    """The source's bookkeeping hash, decoded (what the monitor reads)."""

    committed: dict[str, Any] | None
    committed_at: float | None
    processed: dict[str, Any] | None
    processed_at: float | None
    latest: dict[str, Any] | None
    latest_at: float | None
    backlog: int | None
    backlog_by_partition: list[int]
    backlog_at: float | None
    paused: bool


def read_source_status(client: redis.Redis, prefix: str, app: str, query: str) -> SourceStatus:
    raw = client.hgetall(source_status_key(prefix, app, query))

    def js(name: str) -> Any:
        return json.loads(raw[name]) if name in raw else None

    def num(name: str) -> float | None:
        return float(raw[name]) if name in raw else None

    return SourceStatus(
        committed=js("committed"),
        committed_at=num("committed_at"),
        processed=js("processed"),
        processed_at=num("processed_at"),
        latest=js("latest"),
        latest_at=num("latest_at"),
        backlog=int(raw["backlog"]) if "backlog" in raw else None,
        backlog_by_partition=js("backlog_by_partition") or [],
        backlog_at=num("backlog_at"),
        paused=raw.get("paused") == "1",
    )


def stored_partitions(client: redis.Redis, key_prefix: str, app: str, query: str) -> int | None:
    """The partition count of the query's last migration, or None (never migrated, or unreadable)."""
    return _stored_count(client.get(partitions_key(key_prefix, app, query)), app, query)


def _stored_count(value: str | bytes | None, app: str, query: str) -> int | None:
    if value is None:
        return None
    try:
        count = int(value)
    except ValueError:
        log.warning("agent.bad_partitions_key", app=app, query=query, value=value)
        return None
    return count if count >= 1 else None


def query_partitions(client: redis.Redis, key_prefix: str, app: str, query: str, configured: int) -> int:
    """A query's state partitions now: as last repartitioned, else as its progress reports them, else
    the `configured` count it starts with."""
    stored = stored_partitions(client, key_prefix, app, query)
    if stored is not None:
        return stored
    return partitions_from(None, client.hget(progress_key(key_prefix, app, query), "state_partitions"),
                           configured, app, query)


def queue_partitions(pipe: redis.client.Pipeline, key_prefix: str, app: str, query: str) -> None:
    """Queue on `pipe` the two reads `partitions_from` takes, for several queries in one round trip."""
    pipe.get(partitions_key(key_prefix, app, query))
    pipe.hget(progress_key(key_prefix, app, query), "state_partitions")


def partitions_from(stored: str | bytes | None, progress: str | bytes | None, configured: int, app: str,
                    query: str) -> int:
    """`query_partitions` from the replies to `queue_partitions`' reads."""
    count = _stored_count(stored, app, query)
    if count is not None:
        return count
    return int(progress) if progress else configured
