"""`Connection`: the config a client acts on and how it reaches the cluster (ZooKeeper, the app's
leader lock, the current leader), shared by the client's operations (api.py, migrations.py)."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from sparkscale.client.errors import BadRequest, Unavailable
from sparkscale.config import Config

if TYPE_CHECKING:
    import redis
    from kazoo.client import KazooClient

    from sparkscale.daemon.leader import LeaderElection
    from sparkscale.store.base import Store


class Connection:
    def __init__(self, cfg: Config, config_path: str | None = None, overrides: tuple[str, ...] | list[str] = (),
                 by: str | None = None):
        """`config_path` and `overrides` are handed on to the processes a change starts (a driver
        restarted in a new executor shape); `by` names this client in the action log and journal."""
        self.cfg = cfg
        self.config_path = config_path
        self.overrides = list(overrides)
        self.by = by or f"cli:{socket.gethostname()}:{os.getpid()}"

    # -- lookups ----------------------------------------------------------------------------------

    def with_app(self, app_name: str) -> Config:
        """The config with `app_name` in it (a bare pipeline name gets a default app)."""
        from sparkscale.apps.workloads import registered_workloads

        try:
            return self.cfg.with_app(app_name)
        except KeyError as exc:
            raise BadRequest(f"{exc.args[0]}; a pipeline name ({', '.join(registered_workloads())}) also works") \
                from None

    def for_app(self, app_name: str) -> Connection:
        """This client on the config with `app_name` in it (`with_app`)."""
        return type(self)(self.with_app(app_name), self.config_path, self.overrides, self.by)

    @contextmanager
    def zookeeper(self) -> Iterator[KazooClient]:
        from kazoo.handlers.threading import KazooTimeoutError

        from sparkscale import zkconn
        from sparkscale.config.identities import OPERATOR

        zk = zkconn.client_as(self.cfg, OPERATOR)
        try:
            zk.start(timeout=10)
        except KazooTimeoutError:
            raise Unavailable(f"ZooKeeper at {self.cfg.zookeeper.hosts} is unreachable") from None
        try:
            yield zk
        finally:
            zk.stop()

    @contextmanager
    def leader_lock(self, zk: KazooClient, app_name: str, timeout_s: float = 10.0) -> Iterator[LeaderElection]:
        """The app's leader lock, for acting without a daemon; Unavailable if another holds it."""
        from sparkscale.daemon.leader import LeaderElection

        election = LeaderElection(zk, self.cfg.zookeeper.root, app_name, self.by)
        if not election.acquire(timeout_s=timeout_s):
            raise Unavailable(f"could not take the leader lock of {app_name} within {timeout_s:g} s")
        try:
            yield election
        finally:
            election.release()

    def store(self, zk: KazooClient, redis_client: redis.Redis | None = None) -> Store:
        """The state over `zk` and `redis_client` (None: the config's Redis, connected on first
        use), built once per operation (store/live.py)."""
        from sparkscale.config.identities import OPERATOR
        from sparkscale.redisconn import connect_as
        from sparkscale.store.live import live_store

        cfg = self.cfg
        client = redis_client if redis_client is not None else connect_as(cfg, OPERATOR)
        return live_store(client, cfg.redis.key_prefix, zk, cfg.zookeeper.root, cfg.action_log)

    def leader(self, zk: KazooClient, app_name: str) -> str | None:
        from sparkscale.store.zk_leaders import ZkLeaders

        return ZkLeaders(zk, self.cfg.zookeeper.root).current_leader(app_name)
