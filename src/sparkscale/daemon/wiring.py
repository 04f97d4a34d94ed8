"""The control loop's live collaborators (control/stores.py, act.py) over the daemon's one store
(store/live.py), ZooKeeper and Redis, built once by the daemon (daemon/service.py) and handed to
the `Autoscaler`. Each is a thin adapter over the module that owns its protocol: the action log,
the operator's requests (manual.py), the migration journal and its follow-ups (followup.py), the
keys the agent and the migrations write.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypedDict, Unpack

import redis
from kazoo.client import KazooClient

from sparkscale.actuators.base import ActuationContext
from sparkscale.apps.submit import with_shape
from sparkscale.config import AppConfig, AppMode, Config
from sparkscale.control.decision import Decision, Mode, app_mode
from sparkscale.control.judge import PendingOutcome
from sparkscale.control.leadership import Leadership
from sparkscale.control.stores import AppReads, Recalled, Stores
from sparkscale.daemon import followup, manual
from sparkscale.daemon.action_log import DecisionMode, DecisionRecord, executed, past_decisions, snapshot_id
from sparkscale.daemon.action_log import Mode as LoggedMode
from sparkscale.daemon.evaluator import observations_from_log
from sparkscale.model.action_result import ActionResult
from sparkscale.model.executor_shape import ExecutorShape
from sparkscale.model.journal import Journal
from sparkscale.model.snapshot import Snapshot
from sparkscale.policies.history import DecisionHistory
from sparkscale.protocol.streams import partitions_from, queue_partitions
from sparkscale.store.base import ActionLogStore, JournalStores, RequestStore, ShapeStore, Store
from sparkscale.store.redis_action_log import RedisBlocklist

# A leader's modes as the action log has them (a leader's decision is never "standby").
_LOGGED_MODES: dict[Mode, LoggedMode] = {"no_change": DecisionMode.NO_CHANGE, "dry_run": DecisionMode.DRY_RUN,
                                         "acted": DecisionMode.ACTED}


class RequestFields(TypedDict, total=False):
    """The per-request fields of an `ActuationContext` (a migration's strategy, shape, resume)."""

    strategy: str | None
    shape: ExecutorShape | None
    resume: bool


@dataclass(frozen=True)
class ActuationContexts:
    """What an actuator gets to act on an app: the running config, the app, this daemon's clients
    and identity, the lock's epoch now (and the lock, asked before each command); a migration that
    changes the executor shape restarts the app with the daemon's own config file."""

    zk: KazooClient
    redis: redis.Redis
    identity: str
    config_path: str | None
    overrides: tuple[str, ...]

    def __call__(self, cfg: Config, app: AppConfig, leadership: Leadership,
                 **request: Unpack[RequestFields]) -> ActuationContext:
        return ActuationContext(cfg, app, self.zk, self.redis, leadership.epoch or 0, lambda: leadership.is_leader,
                                self.identity, manual.app_restarter(cfg, app.name, self.config_path, self.overrides),
                                **request)


@dataclass(frozen=True)
class ActionLogDecisions:
    """The loop's decisions in the action log (daemon/action_log.py), written by `identity`."""

    action_log: ActionLogStore
    identity: str

    def write(self, decision: Decision) -> str:
        plan, snapshot = decision.plan, decision.snapshot
        record = DecisionRecord(decision.app, decision.decided_at, snapshot_id(snapshot), self.identity,
                                decision.epoch, plan.policy, decision.diagnosis, plan, _LOGGED_MODES[decision.mode],
                                decision.expected)
        return self.action_log.append_decision(record, snapshot if plan.actions else None)

    def recall(self, app: AppConfig, now: float, since: float, evaluate_after_s: float) -> Recalled:
        logged = self.action_log.read(app.name, since=since)
        acted = executed(logged)
        pending = [
            PendingOutcome(d.id, d.decision.expected, d.decision.plan.changes[0], (d.done_at or now) + evaluate_after_s,
                           d.decision.policy, d.decision.plan.observation.query)
            for d in acted if d.outcome is None and d.decision.expected is not None and d.decision.plan.changes
        ]
        history = DecisionHistory(past_decisions(logged), scalability=observations_from_log(logged, app))
        return Recalled(history, acted[-1].done_at if acted else None, pending, len(logged))


def loop_stores(store: Store, identity: str, zk: KazooClient, client: redis.Redis, prefix: str) -> Stores:
    """What the control loop reads and writes (control/stores.py), over the daemon's one store; the
    blocklist is read by the loop alone, in the round trip that reads the partitions."""
    return Stores(decisions=ActionLogDecisions(store.actions, identity),
                  journals=ZooKeeperJournals(store.journals, zk, client),
                  apps=RedisAppRecords(client, prefix, store.shapes, RedisBlocklist(client, prefix)))


@dataclass(frozen=True)
class ZooKeeperJournals:
    journals: JournalStores
    zk: KazooClient
    redis: redis.Redis

    @property
    def connected(self) -> bool:
        return self.journals.connected

    def read(self, app: str) -> Journal | None:
        return self.journals.watched(app)

    def follow_up(self, cfg: Config, epoch: int | None, journal: Journal | None) -> Journal | None:
        return followup.finish(cfg, self.zk, self.redis, epoch, journal)


@dataclass(frozen=True)
class RedisAppRecords:
    redis: redis.Redis
    prefix: str
    shapes: ShapeStore
    blocklist: RedisBlocklist

    def with_shape(self, app: AppConfig) -> AppConfig:
        return with_shape(app, self.shapes)

    def read(self, app: AppConfig, queries: Sequence[str], now: float) -> AppReads:
        """One pipeline: each query's two partition reads (protocol/streams.py), then the blocklist."""
        assert app.shuffle_partitions is not None  # set when the config is validated
        pipe = self.redis.pipeline(transaction=False)
        for query in queries:
            queue_partitions(pipe, self.prefix, app.name, query)
        pipe.hgetall(self.blocklist.key)
        replies = pipe.execute()
        partitions = {query: partitions_from(replies[2 * i], replies[2 * i + 1], app.shuffle_partitions, app.name,
                                             query) for i, query in enumerate(queries)}
        return AppReads(partitions, self.blocklist.blocklist_from(replies[-1], now, app.name))


@dataclass(frozen=True)
class RequestDesk:
    """The operator's requests in the store, served and answered by the leader (daemon/manual.py)."""

    requests: RequestStore
    journals: JournalStores
    action_log: ActionLogStore
    contexts: ActuationContexts
    identity: str

    def serve(self, cfg: Config, app: AppConfig, leadership: Leadership,
              snapshot: Snapshot | None) -> list[ActionResult]:
        def context(**request: Unpack[RequestFields]) -> ActuationContext:
            return self.contexts(cfg, app, leadership, **request)

        return manual.serve_requests(self.requests, self.journals, app.name, self.action_log, context, self.identity,
                                     app_mode(app, cfg.loop.dry_run) != AppMode.ACT, snapshot)

    def watch(self, app: str, on_request: Callable[[], None]) -> None:
        self.requests.watch(app, on_request)

    def resume(self, cfg: Config, app: AppConfig, leadership: Leadership,
               journal: Journal) -> tuple[str, ActionResult]:
        ctx = self.contexts(cfg, app, leadership, strategy=journal.strategy, resume=True)
        return manual.run_migration(self.action_log, ctx, journal.query, journal.to_partitions,
                                    f"resume migration {journal.id} left at {journal.next} by epoch {journal.epoch}",
                                    from_partitions=journal.from_partitions)
