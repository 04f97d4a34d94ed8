"""The store over one Redis and one ZooKeeper client, built once by the daemon (daemon/wiring.py) or
a command (the client API, the CLI), so each kind of state keeps one reader (and its log of bad
records) for the process's life."""

from __future__ import annotations

import redis
from kazoo.client import KazooClient

from sparkscale.config import ActionLogConfig
from sparkscale.store.base import Store
from sparkscale.store.redis_action_log import RedisActionLog, RedisBlocklist
from sparkscale.store.redis_queries import RedisDowntime, RedisQueries
from sparkscale.store.redis_shapes import RedisShapes
from sparkscale.store.redis_status import RedisStatus
from sparkscale.store.zk_journal import ZkJournals
from sparkscale.store.zk_leaders import ZkLeaders
from sparkscale.store.zk_requests import ZkRequests


def live_store(client: redis.Redis, prefix: str, zk: KazooClient, root: str,
               action_log: ActionLogConfig | None = None) -> Store:
    """`client` needs decode_responses=True (`redisconn.connect`)."""
    return Store(actions=RedisActionLog(client, prefix, action_log or ActionLogConfig()),
                 blocklist=RedisBlocklist(client, prefix), journals=ZkJournals(zk, root),
                 shapes=RedisShapes(client, prefix), queries=RedisQueries(client, prefix),
                 leaders=ZkLeaders(zk, root), downtime=RedisDowntime(client, prefix),
                 requests=ZkRequests(zk, root), status=RedisStatus(client, prefix))
