"""The executor shape a migration gave each app, in Redis (hash `<prefix><app>:shape`, protocol/keys.py:
`executor_cores`, `executor_memory_mb`, the `migration` that set it and when). A hash that does not
parse (a field missing, not a plain decimal, out of bounds; the key not a hash) is read as no stored
shape (logged once, store/bad_records.py): the config's shape holds. Every submit of the app applies
a stored shape, so one out of bounds would break each of them."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Annotated, cast

import redis
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from sparkscale.config.apps import MAX_EXECUTOR_CORES
from sparkscale.model.executor_shape import MAX_EXECUTOR_MEMORY_MB, ExecutorShape
from sparkscale.protocol.keys import shape_key
from sparkscale.store.bad_records import PROBLEMS, BadRecords, escaped
from sparkscale.store.redis_action_log import Hash, text

MAX_DIGITS = 12  # a stored count longer than this is out of bounds before it is parsed


def _decimal(value: object) -> int:
    """A Redis hash value as a whole number: plain decimal digits only (no sign, space, 1e3, 5.0)."""
    if not isinstance(value, str) or not re.fullmatch(rf"[0-9]{{1,{MAX_DIGITS}}}", value):
        raise ValueError(f"expected decimal digits (got {escaped(str(value), 40)!r})")
    return int(value)


class StoredShape(BaseModel):
    """The shape hash's figures, bounded as the config bounds them (Spark needs at least 1 of each)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    executor_cores: Annotated[int, BeforeValidator(_decimal), Field(ge=1, le=MAX_EXECUTOR_CORES)]
    executor_memory_mb: Annotated[int, BeforeValidator(_decimal), Field(ge=1, le=MAX_EXECUTOR_MEMORY_MB)]


@dataclass
class RedisShapes:
    client: redis.Redis
    prefix: str
    bad: BadRecords = field(default_factory=BadRecords)

    def key(self, app: str) -> str:
        return shape_key(self.prefix, app)

    def stored_shape(self, app: str) -> ExecutorShape | None:
        try:
            stored: object = self.client.hgetall(self.key(app))
        except (redis.ResponseError, UnicodeDecodeError) as exc:  # WRONGTYPE: not a hash; bytes not UTF-8
            stored = exc
        return self.shape_from(app, stored)

    def shape_from(self, app: str, stored: object) -> ExecutorShape | None:
        """The shape from the reply to HGETALL of `key(app)` (in a caller's pipeline: an error reply,
        such as WRONGTYPE, is skipped as a bad record and reads as no stored shape)."""
        key = self.key(app)
        if isinstance(stored, Exception):
            self.bad.skip(key, "shape", stored)
            return None
        raw = {text(k): text(v) for k, v in cast(Hash, stored or {}).items()}
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
    """A stored shape's hash (its values are strings in Redis) as a shape of bounded whole numbers;
    raises a ValueError (one of bad_records.PROBLEMS) saying which field is wrong."""
    try:
        shape = StoredShape.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"])
        raise ValueError(f"{where}: {first['msg']}") from None
    return ExecutorShape(shape.executor_cores, shape.executor_memory_mb)
