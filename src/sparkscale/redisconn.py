"""One way to open a Redis connection from the config, so timeouts and db are never forgotten."""

from __future__ import annotations

import redis

from sparkscale.config import RedisConfig


def connect(cfg: RedisConfig, decode_responses: bool = True) -> redis.Redis:
    return redis.Redis(
        host=cfg.host, port=cfg.port, db=cfg.db, decode_responses=decode_responses,
        socket_timeout=cfg.socket_timeout_s, socket_connect_timeout=cfg.socket_timeout_s,
    )
