"""The executor shape a migration gave each app, in Redis (hash `<prefix><app>:shape`, protocol/keys.py:
`executor_cores`, `executor_memory_mb`, the `migration` that set it and when). A hash that does not
parse is read as no stored shape (logged once, store/bad_records.py): the config's shape holds."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import cast

import redis

from sparkscale.model.executor_shape import ExecutorShape
from sparkscale.model.fields import integer
from sparkscale.protocol.keys import shape_key
from sparkscale.store.bad_records import PROBLEMS, BadRecords
from sparkscale.store.redis_action_log import Hash, text


@dataclass
class RedisShapes:
    client: redis.Redis
    prefix: str
    bad: BadRecords = field(default_factory=BadRecords)

    def stored_shape(self, app: str) -> ExecutorShape | None:
        key = shape_key(self.prefix, app)
        raw = {text(k): text(v) for k, v in cast(Hash, self.client.hgetall(key) or {}).items()}
        if not raw:
            return None
        try:
            return parse_shape(raw)
        except PROBLEMS as exc:
            self.bad.skip(key, raw.get("migration", "shape"), exc)
            return None

    def store_shape(self, app: str, shape: ExecutorShape, migration: str) -> None:
        self.client.hset(shape_key(self.prefix, app),
                         mapping={"executor_cores": shape.executor_cores,
                                  "executor_memory_mb": shape.executor_memory_mb, "migration": migration,
                                  "set_at": time.time()})


def parse_shape(raw: dict[str, str]) -> ExecutorShape:
    """A stored shape's hash (its values are strings in Redis) as a shape of whole positive numbers."""
    return ExecutorShape(integer(int(raw["executor_cores"]), "executor_cores", 1),
                         integer(int(raw["executor_memory_mb"]), "executor_memory_mb", 1))

