"""The control loop's live collaborators (control/stores.py, act.py) over the daemon's one store
(store/live.py), ZooKeeper and Redis, built once by the daemon (daemon/service.py) and handed to
the `Autoscaler`. Each is a thin adapter over the module that owns its protocol: the action log,
the operator's requests (manual.py), the migration journal and its follow-ups (followup.py), the
keys the agent and the migrations write.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypedDict, Unpack, cast

import redis
from kazoo.client import KazooClient

from sparkscale.actuators.base import ActuationContext
from sparkscale.apps.submit import shaped, with_shape
from sparkscale.config import AppConfig, AppMode, Config
from sparkscale.control.decision import Decision, Mode, app_mode
from sparkscale.control.judge import PendingOutcome
from sparkscale.control.leadership import Leadership
from sparkscale.control.stores import AppReads, Recalled, Stores
from sparkscale.daemon import followup, manual
from sparkscale.daemon.action_log import DecisionMode, DecisionRecord, executed, past_decisions, snapshot_id
from sparkscale.daemon.action_log import Mode as LoggedMode
from sparkscale.daemon.decision_writer import OrderedActionLog, Written
from sparkscale.daemon.evaluator import observations_from_log
from sparkscale.model.action_result import ActionResult
from sparkscale.model.executor_shape import ExecutorShape
from sparkscale.model.journal import Journal
from sparkscale.model.snapshot import Snapshot
from sparkscale.monitors.collect_reads import Ridden, Ride, raise_error
from sparkscale.policies.history import DecisionHistory
from sparkscale.protocol.streams import partitions_from, queue_partitions
from sparkscale.store.base import ActionLogStore, JournalStores, RequestStore, Store
from sparkscale.store.redis_action_log import Hash, RedisBlocklist
from sparkscale.store.redis_shapes import RedisShapes

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
    """The loop's decisions in the action log (daemon/action_log.py), written by `identity`, in the
    order the daemon made its entries (daemon/decision_writer.py)."""

    action_log: OrderedActionLog
    identity: str

    def write(self, decision: Decision) -> str:
        return self.action_log.append_decision(self._record(decision), self._snapshot(decision))

    def write_later(self, decision: Decision, on_written: Written) -> None:
        self.action_log.append_later(self._record(decision), self._snapshot(decision), on_written)

    def _record(self, decision: Decision) -> DecisionRecord:
        plan = decision.plan
        return DecisionRecord(decision.app, decision.decided_at, snapshot_id(decision.snapshot), self.identity,
                              decision.epoch, plan.policy, decision.diagnosis, plan, _LOGGED_MODES[decision.mode],
                              decision.expected)

    @staticmethod
    def _snapshot(decision: Decision) -> Snapshot | None:
        return decision.snapshot if decision.plan.actions else None  # the snapshot behind a decision with actions

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


def loop_stores(store: Store, identity: str, zk: KazooClient, client: redis.Redis, prefix: str,
                action_log: OrderedActionLog) -> Stores:
    """What the control loop reads and writes (control/stores.py), over the daemon's one store and
    its action log in order (`action_log`, over `store.actions`); the loop reads the shape and the
    blocklist in the collect's last round trip with the store's own readers, so that each keeps one
    log of bad records in the process (store/live.py)."""
    shapes, blocklist = store.shapes, store.blocklist
    if not isinstance(shapes, RedisShapes) or not isinstance(blocklist, RedisBlocklist):
        raise TypeError("loop_stores needs the store over Redis (store/live.py), not " +
                        f"{type(shapes).__name__} and {type(blocklist).__name__}")
    return Stores(decisions=ActionLogDecisions(action_log, identity),
                  journals=ZooKeeperJournals(store.journals, zk, client),
                  apps=RedisAppRecords(client, prefix, shapes, blocklist))


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
    shapes: RedisShapes
    blocklist: RedisBlocklist

    def with_shape(self, app: AppConfig) -> AppConfig:
        return with_shape(app, self.shapes)

    def ride(self, app: AppConfig) -> Ride[AppReads]:
        """Each query's two partition reads (protocol/streams.py), the shape and the blocklist,
        queued on the collect's pipeline (monitors/collect_reads.py). An error reply of the shape
        reads as no stored shape (a bad record, logged once), one of the others raises."""
        def queue(pipe: redis.client.Pipeline, queries: Sequence[str]) -> Ridden[AppReads]:
            for query in queries:
                queue_partitions(pipe, self.prefix, app.name, query)
            pipe.hgetall(self.shapes.key(app.name))
            pipe.hgetall(self.blocklist.key)

            def reads(replies: Sequence[object], taken_at: float) -> AppReads:
                *partitions, shape, blocklist = replies
                raise_error([*partitions, blocklist])
                return AppReads(shaped(app, self.shapes.shape_from(app.name, shape)),
                                self._partitions(app, queries, partitions),
                                self.blocklist.blocklist_from(cast(Hash, blocklist), taken_at, app.name))

            return reads

        return queue

    def read(self, app: AppConfig, queries: Sequence[str], now: float) -> AppReads:
        """`ride`'s reads in a pipeline of their own: one round trip."""
        pipe = self.redis.pipeline(transaction=False)
        reads = self.ride(app)(pipe, queries)
        return reads(pipe.execute(raise_on_error=False), now)

    def _partitions(self, app: AppConfig, queries: Sequence[str], replies: Sequence[object]) -> dict[str, int]:
        assert app.shuffle_partitions is not None  # set when the config is validated
        return {query: partitions_from(cast(str | None, replies[2 * i]), cast(str | None, replies[2 * i + 1]),
                                       app.shuffle_partitions, app.name, query) for i, query in enumerate(queries)}


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
