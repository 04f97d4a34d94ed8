"""Redis for the unit tests: fakeredis, whose commands answer as a Redis server's (types, WRONGTYPE,
stream ids and ranges, pipelines), in memory. `fake_redis` gives a client of a server of its own,
holding what the test writes through real commands; it answers text, as `redisconn.connect`'s clients do."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

import fakeredis
import redis

Entries = Iterable[tuple[str, Mapping[str, Any]]]  # a stream's (entry id, fields)
Client = TypeVar("Client", bound=redis.Redis)


def seed(client: Client, hashes: Mapping[str, Mapping[str, Any]] | None = None,
         streams: Mapping[str, Entries] | None = None, strings: Mapping[str, Any] | None = None) -> Client:
    """`client` once HSET, XADD (at the ids given, which must grow as Redis wants) and SET wrote these."""
    for key, fields in (hashes or {}).items():
        if fields:  # HSET of no field is an error: an empty hash is no key
            client.hset(key, mapping=dict(fields))
    for key, entries in (streams or {}).items():
        for entry_id, fields in entries:
            client.xadd(key, dict(fields), id=entry_id)
    for key, value in (strings or {}).items():
        client.set(key, value)
    return client


def fake_redis(hashes: Mapping[str, Mapping[str, Any]] | None = None, streams: Mapping[str, Entries] | None = None,
               strings: Mapping[str, Any] | None = None) -> fakeredis.FakeRedis:
    """A client of a fresh server (nothing shared with another test), holding the keys given."""
    return seed(fakeredis.FakeRedis(decode_responses=True), hashes, streams, strings)
