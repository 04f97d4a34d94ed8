"""Redis for the unit tests: fakeredis, whose commands answer as a Redis server's (types, WRONGTYPE,
stream ids and ranges, pipelines), in memory. `fake_redis` gives a client of a server of its own,
holding what the test writes through real commands; `RecordingRedis` is one that also lists the
round trips it makes, for the tests about them. Both answer text, as `redisconn.connect`'s clients do."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

import fakeredis
import redis

Trip = str | tuple[str, ...]  # a command's name, or a pipeline's commands in order
Entries = Iterable[tuple[str, Mapping[str, Any]]]  # a stream's (entry id, fields)
Client = TypeVar("Client", bound=redis.Redis)
VERSION = (7, 0)  # the redis-server Debian 12 installs for the embedded environment (.ci/run): 7.0


def server() -> fakeredis.FakeServer:
    """A server of its own (a client made without one is kept in fakeredis' registry for good)."""
    return fakeredis.FakeServer(version=VERSION)


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
    return seed(fakeredis.FakeRedis(server=server(), decode_responses=True), hashes, streams, strings)


def make_wrong_type(client: redis.Redis, key: str) -> None:
    """Make `key` a list: GET, HGETALL and XRANGE of it answer WRONGTYPE, as Redis's do."""
    client.delete(key)
    client.rpush(key, "not what the reader expects")


class RecordingRedis(fakeredis.FakeRedis):
    """A fakeredis client that lists its round trips (`trips`: each with the thread that made it) and
    the arguments of each command sent alone (`commands`), and counts `close()`. `direct` is a
    client of the same server that records nothing: the test's own writes and reads."""

    def __init__(self) -> None:
        shared = server()
        super().__init__(server=shared, decode_responses=True)
        self.direct = fakeredis.FakeRedis(server=shared, decode_responses=True)
        self.trips: list[tuple[int, Trip]] = []
        self.commands: list[tuple[Any, ...]] = []
        self.closed = 0

    @property
    def round_trips(self) -> int:
        return len(self.trips)

    def execute_command(self, *args: Any, **options: Any) -> Any:
        self.commands.append(args)
        self.trips.append((threading.get_ident(), str(args[0]).lower()))
        return super().execute_command(*args, **options)

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> RecordingPipeline:
        return RecordingPipeline(self, transaction, shard_hint)

    def sending(self, commands: tuple[str, ...]) -> None:
        """A pipeline of `commands` goes to the server now: one round trip. A double may hold or refuse it here."""
        self.trips.append((threading.get_ident(), commands))

    def close(self) -> None:
        self.closed += 1
        super().close()


class RecordingPipeline(redis.client.Pipeline):
    """redis-py's pipeline, telling its client each time its commands go (an empty one sends nothing)."""

    def __init__(self, client: RecordingRedis, transaction: bool, shard_hint: Any) -> None:
        super().__init__(client.connection_pool, client.response_callbacks, transaction, shard_hint)
        self.client = client

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        if self.command_stack:
            self.client.sending(tuple(str(args[0]).lower() for args, _options in self.command_stack))
        return super().execute(raise_on_error)
