"""One leader's hold on one app's migration: the agent commands and journal writes it makes, fenced
by its epoch, and what it reads of the query. The runner (runner.py) walks the phases through it and
a recovery (recovery.py) takes over through it when a step fails, so each uses this and neither
needs the other; a strategy reads through it too (base.RestoreProbe)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import redis
from kazoo.client import KazooClient

from sparkscale.actuators.migration.base import MigrationError
from sparkscale.actuators.migration.journal import JournalStore, PhaseCallback
from sparkscale.apps.submit import running, store_shape
from sparkscale.config import AppConfig, Config
from sparkscale.model.executor_shape import ExecutorShape
from sparkscale.model.journal import Journal
from sparkscale.monitors.batch_points import BatchPoint
from sparkscale.monitors.migration_metrics import read_batches
from sparkscale.protocol.commands import send_command, wait_ack
from sparkscale.protocol.keys import input_stream_key, progress_key
from sparkscale.protocol.streams import query_partitions, stream_heads
from sparkscale.redisconn import text_hash
from sparkscale.store.redis_queries import read_queries


class MigrationSession:
    """The connection a migration of one app is carried out through: commands to its agent,
    writes of its journal, reads of its query's state. Never decides."""

    def __init__(self, cfg: Config, app: AppConfig, zk: KazooClient, redis_client: redis.Redis, epoch: int,
                 is_leader: Callable[[], bool], on_phase: PhaseCallback | None = None,
                 restart_app: Callable[[], object] | None = None) -> None:
        """`restart_app` restarts the whole application (stop its driver, submit it again): needed
        for a migration that changes the executor shape."""
        self.cfg = cfg
        self.app = app
        self.zk = zk
        self.redis = redis_client
        self.epoch = epoch
        self.is_leader = is_leader
        self.on_phase = on_phase
        self.restart_app = restart_app
        self.root = cfg.zookeeper.root
        self.prefix = cfg.redis.key_prefix
        # Its writes check this leader's own lock znode (at `epoch`): once deposed, even `_fail` writes nothing.
        self.store = JournalStore(zk, self.root, app.name, epoch=epoch)
        self.mcfg = cfg.migration

    def current_partitions(self, query: str) -> int:
        """The query's state partitions: as last repartitioned, else its progress, else the config."""
        assert self.app.shuffle_partitions is not None, "set by AppConfig's validation"
        return query_partitions(self.redis, self.prefix, self.app.name, query, self.app.shuffle_partitions)

    # -- what a strategy may read (base.RestoreProbe) ---------------------------------------------

    def query_status(self, query: str) -> dict[str, Any] | None:
        report = self._command("report", {})
        for q in report.get("queries", []):
            if q.get("name") == query:
                return q.get("status") or {}
        return None

    def pausable(self, query: str) -> bool:
        """The query's sources honour the app's pause key (as its agent last reported); unknown
        queries count as pausable, the behaviour before queries were reported."""
        info = read_queries(self.redis, self.prefix, self.app.name).get(query)
        return True if info is None else info.pausable

    def query_progress(self, query: str) -> dict[str, str]:
        return text_hash(self.redis.hgetall(progress_key(self.prefix, self.app.name, query)))

    def batches_since(self, query: str, since_s: float) -> list[BatchPoint]:
        return read_batches(self.redis, self.prefix, self.app.name, query, since_s)

    # -- plumbing ---------------------------------------------------------------------------------

    def _command(self, kind: str, args: dict[str, Any], timeout_s: float | None = None) -> Any:
        if not self.is_leader():
            raise MigrationError(f"{kind} not sent: no longer the leader")
        timeout_s = timeout_s or self.cfg.actuator.ack_timeout_s
        name = send_command(self.zk, self.root, self.app.name, kind, args, self.epoch, ttl_s=timeout_s)
        ack = wait_ack(self.zk, self.root, self.app.name, name, timeout_s)
        if not ack.ok:
            raise MigrationError(f"{kind} refused: {ack.detail}")
        return ack.detail

    def _input_position(self) -> int | None:
        if self.app.runs_script:
            return None  # records ever arrived: known per source in the progress, not app-wide
        keys = [input_stream_key(self.prefix, self.app.name, i) for i in range(self.app.source_partitions)]
        return sum(h.entries_added for h in stream_heads(self.redis, keys))

    def _write(self, journal: Journal) -> None:
        self.store.write(journal)

    def _restart_application(self, journal: Journal, shape: ExecutorShape) -> None:
        """A new executor shape: keep it (every later submit uses it), then stop the driver and submit
        the app again; the new driver starts the query from its (repartitioned) checkpoint, its
        sources still paused if the strategy paused them. Idempotent: a driver submitted after the
        repartition already runs with the shape."""
        assert self.restart_app is not None, "checked in MigrationRunner.start()"
        store_shape(self.redis, self.prefix, self.app.name, shape, journal.id)
        record = running(self.cfg, self.app.name)
        since = journal.phases.get("repartitioned", journal.requested_at)
        if record is not None and record.submitted_at > since:
            journal.marks.setdefault("app_restarted_at", record.submitted_at)
            return
        if not self.is_leader():
            raise MigrationError("restart not done: no longer the leader")
        journal.marks["app_restart_started_at"] = time.time()
        self._write(journal)
        self.restart_app()
        journal.marks["app_restarted_at"] = time.time()
        journal.marks["shape"] = asdict(shape)
