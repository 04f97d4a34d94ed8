"""The query registry the agent publishes (hash `<prefix><app>:queries`, protocol/queries.py: one
field per query, its QueryInfo as JSON), and the measured downtime samples (daemon/downtime_tracker.py:
one list per kind, newest first). Records that do not parse are skipped, logged once; a query whose
checkpoint path is out of bounds (store/checkpoint_paths.py) is read with its checkpoint unknown."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace
from typing import cast

import redis

from sparkscale.model.fields import number, object_at
from sparkscale.policies.placement.downtime import MEASURED_KINDS
from sparkscale.protocol.keys import downtime_samples_key
from sparkscale.protocol.queries import QueryInfo, queries_key
from sparkscale.store.bad_records import PROBLEMS, BadRecords, escaped, load_json
from sparkscale.store.checkpoint_paths import checkpoint_refusal
from sparkscale.store.redis_action_log import Hash, text

KEEP = 20  # downtime samples per kind: the median of the last ones


@dataclass
class RedisQueries:
    client: redis.Redis
    prefix: str
    bad: BadRecords = field(default_factory=BadRecords)

    def read_queries(self, app: str) -> dict[str, QueryInfo]:
        try:
            published: object = self.client.hgetall(queries_key(self.prefix, app))
        except (redis.ResponseError, UnicodeDecodeError) as exc:  # WRONGTYPE: not a hash; bytes not UTF-8
            published = exc
        return self.queries_from(app, published)

    def queries_from(self, app: str, published: object) -> dict[str, QueryInfo]:
        """The queries from the reply to HGETALL of the app's registry (in a caller's pipeline: an
        error reply, such as WRONGTYPE, is skipped as a bad record and reads as no query)."""
        key = queries_key(self.prefix, app)
        out: dict[str, QueryInfo] = {}
        if isinstance(published, Exception):
            self.bad.skip(key, "queries", published)
            return out
        for name, value in cast(Hash, published or {}).items():
            try:
                info = QueryInfo.from_json(value)
            except PROBLEMS as exc:
                self.bad.skip(key, text(name), exc)
                continue
            refusal = None if info.checkpoint is None else checkpoint_refusal(info.checkpoint)
            if refusal is not None:  # the query is still listed; unknown checkpoint: not migratable
                self.bad.skip(key, f"{text(name)}.checkpoint", f"checkpoint {escaped(str(info.checkpoint))} {refusal}")
                info = replace(info, checkpoint=None)
            out[text(name)] = info
        return out


_READ_QUERIES_BAD = BadRecords()  # `read_queries`' callers read every cycle: each bad record logged once


def read_queries(client: redis.Redis, prefix: str, app: str) -> dict[str, QueryInfo]:
    """The app's queries by name, as the agent last published them (empty before the agent ran)."""
    return RedisQueries(client, prefix, _READ_QUERIES_BAD).read_queries(app)


def queries_from(client: redis.Redis, prefix: str, app: str, published: object) -> dict[str, QueryInfo]:
    """`read_queries` from the reply to HGETALL of `queries_key` that a caller's pipeline read."""
    return RedisQueries(client, prefix, _READ_QUERIES_BAD).queries_from(app, published)



@dataclass
class RedisDowntime:
    """The measured samples, one list per kind, newest first, the last `KEEP` of each."""

    client: redis.Redis
    prefix: str
    bad: BadRecords = field(default_factory=BadRecords)

    def add(self, kind: str, stall_s: float, state_bytes: float, app: str) -> None:
        key = downtime_samples_key(self.prefix, kind)
        entry = json.dumps({"stall_s": stall_s, "state_bytes": state_bytes, "app": app, "at": time.time()})
        pipe = self.client.pipeline()
        pipe.lpush(key, entry)
        pipe.ltrim(key, 0, KEEP - 1)
        pipe.execute()

    def load(self) -> dict[str, list[tuple[float, float]]]:
        """kind -> (stall s, state bytes), oldest first."""
        out: dict[str, list[tuple[float, float]]] = {}
        for kind in MEASURED_KINDS:
            key = downtime_samples_key(self.prefix, kind)
            values = []
            for raw in reversed(cast(list[str], self.client.lrange(key, 0, KEEP - 1))):
                try:
                    entry = object_at(load_json(raw), "")
                    values.append((number(entry["stall_s"], "stall_s"),
                                   number(entry.get("state_bytes") or 0.0, "state_bytes")))
                except PROBLEMS as exc:
                    self.bad.skip(key, text(raw), exc)
            if values:
                out[kind] = values
        return out
