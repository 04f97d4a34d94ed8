"""What one cycle asks Redis and ZooKeeper (issue 33: after the collect, the p99 was the stores'
round trips on a saturated machine): the loop over the daemon's own store adapters
(daemon/wiring.py, store/), with counting fakes of both services and the other collaborators of
tests/unit/test_autoscaler.py."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis

from sparkscale.config import ActionLogConfig, Config
from sparkscale.control.autoscaler import Autoscaler
from sparkscale.control.events import CycleEnded, Decided
from sparkscale.daemon.wiring import ActuationContexts, RequestDesk, loop_stores
from sparkscale.policies.outcomes import BlockedAction
from sparkscale.protocol.keys import partitions_key, progress_key
from sparkscale.store.action_records import BlocklistEntry
from sparkscale.store.live import live_store
from tests.unit.fakezk import FakeZk
from tests.unit.test_autoscaler import (
    APP,
    NO_CHANGE,
    SCALE_UP,
    TAKEN_AT,
    FakeClock,
    FakeCluster,
    FakeCollector,
    FakeExecutor,
    FakeJudge,
    FakeLock,
    FakePlanner,
    RecordingSink,
)
from tests.unit.test_store import MiniRedis

PREFIX = "sparkscale:"
ROOT = "/sparkscale"


class KeyRedis(MiniRedis):
    """MiniRedis with the string commands the partition counts are read with."""

    def __init__(self) -> None:
        super().__init__()
        self.strings: dict[str, str] = {}

    def set(self, key: str, value: object) -> bool:
        self.strings[key] = str(value)
        return True

    def get(self, key: str) -> str | None:
        return self.strings.get(key)

    def hget(self, key: str, name: str) -> str | None:
        return self.hashes.get(key, {}).get(name)


class CountingRedis:
    """A client whose every command is a round trip, and every pipeline's `execute` one: `trips`
    lists them as the command's name, or the pipeline's commands in a tuple."""

    def __init__(self, client: KeyRedis) -> None:
        self.client = client
        self.trips: list[str | tuple[str, ...]] = []
        self.refuse: Callable[[tuple[str, ...]], bool] = lambda _commands: False

    def pipeline(self, transaction: bool = True) -> CountingPipeline:
        return CountingPipeline(self)

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.client, name)

        def command(*args: Any, **kwargs: Any) -> Any:
            self.trips.append(name)
            return method(*args, **kwargs)

        return command


@dataclass
class CountingPipeline:
    counting: CountingRedis
    queued: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = field(default_factory=list)

    def __getattr__(self, name: str) -> Callable[..., CountingPipeline]:
        def queue(*args: Any, **kwargs: Any) -> CountingPipeline:
            self.queued.append((name, args, kwargs))
            return self

        return queue

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        commands = tuple(name for name, _args, _kwargs in self.queued)
        self.counting.trips.append(commands)
        if self.counting.refuse(commands):
            raise redis.ConnectionError("Redis went away")
        return [getattr(self.counting.client, name)(*args, **kwargs) for name, args, kwargs in self.queued]


@dataclass
class World:
    autoscaler: Autoscaler
    redis: CountingRedis
    zk: FakeZk
    planner: FakePlanner
    executor: FakeExecutor
    sink: RecordingSink
    woken: list[str]

    def ended(self) -> list[CycleEnded]:
        return [e for e in self.sink.events if isinstance(e, CycleEnded)]

    def cycle(self) -> tuple[list[str | tuple[str, ...]], list[tuple[str, str]]]:
        """One cycle: the Redis round trips and the ZooKeeper calls it made."""
        trips, ops = len(self.redis.trips), len(self.zk.ops)
        result = self.autoscaler.cycle(APP)
        assert result in ("ok", "unreachable"), result
        return self.redis.trips[trips:], self.zk.ops[ops:]

    def other(self) -> FakeZk:
        """Another process's client of the same ZooKeeper (its writes fire this one's watches)."""
        return self.zk.as_session(0x2002)


def world(*plans: Any) -> World:
    cfg = Config.model_validate({"apps": [{"name": APP, "pipeline": "wordcount"}]})
    zk, counting = FakeZk(), CountingRedis(KeyRedis())
    client: Any = counting
    store = live_store(client, PREFIX, zk, ROOT, ActionLogConfig())  # type: ignore[arg-type]
    contexts = ActuationContexts(zk, client, "me", None, ())
    planner, executor, sink, woken = FakePlanner(list(plans) or [NO_CHANGE]), FakeExecutor(), RecordingSink(), []
    autoscaler = Autoscaler(
        cfg, "me", collector=FakeCollector(), planner=planner, cluster=FakeCluster(), judge=FakeJudge(),
        executor=executor, requests=RequestDesk(store.requests, store.journals, store.actions, contexts, "me"),
        stores=loop_stores(store, "me", zk, client, PREFIX), elections={APP: FakeLock()}, clock=FakeClock(),
        sink=sink, wake=woken.append)
    autoscaler.add_app(APP)
    return World(autoscaler, counting, zk, planner, executor, sink, woken)


PARTITIONS_AND_BLOCKLIST = ("get", "hget", "hgetall")
DECISION = ("xadd", "xtrim")


def test_the_partitions_come_from_the_last_migration_else_the_progress_else_the_config():
    w = world()
    client = w.redis.client
    w.cycle()
    configured = w.autoscaler.cfg.app(APP).shuffle_partitions
    assert w.planner.seen[-1].partitions == {"q": configured}
    client.hashes[progress_key(PREFIX, APP, "q")] = {"state_partitions": "6"}
    w.cycle()
    assert w.planner.seen[-1].partitions == {"q": 6}
    client.strings[partitions_key(PREFIX, APP, "q")] = "8"
    w.cycle()
    assert w.planner.seen[-1].partitions == {"q": 8}
    client.strings[partitions_key(PREFIX, APP, "q")] = "eight"  # unreadable: as if never migrated
    trips, _ops = w.cycle()
    assert w.planner.seen[-1].partitions == {"q": 6} and trips[1] == PARTITIONS_AND_BLOCKLIST


def test_a_blocklist_entry_another_daemon_writes_is_seen_by_the_next_cycle():
    w = world()
    w.cycle()
    blocked = BlockedAction(APP, "under_provisioned", "scale_executors", TAKEN_AT + 600, "ds2")
    live_store(w.redis.client, PREFIX, w.other(), ROOT).blocklist.block(  # type: ignore[arg-type]
        BlocklistEntry(blocked, TAKEN_AT, "1-0", "unmet"))
    w.cycle()
    assert w.planner.seen[-1].blocklist.entries == (blocked,) and w.ended()[-1].blocked == 1


# -- the decision write -----------------------------------------------------------------------------


def test_a_decision_with_actions_is_written_in_one_round_trip_before_its_actions_start():
    w = world(SCALE_UP, NO_CHANGE)
    w.cycle()
    [written] = [t for t in w.redis.trips if isinstance(t, tuple) and "xadd" in t]
    assert written == ("xadd", "xadd", "xtrim")  # its snapshot, the decision, the trim
    [decided] = [e for e in w.sink.events if isinstance(e, Decided)]
    assert decided.decision_id is not None and w.executor.started == [(decided.decision_id, SCALE_UP.changes)]


def test_a_refused_decision_write_ends_the_cycle_with_nothing_done():
    w = world(NO_CHANGE, SCALE_UP)
    w.cycle()
    w.sink.events.clear()
    w.redis.refuse = lambda commands: "xadd" in commands
    trips, _ops = w.cycle()
    assert trips[-1] == ("xadd", "xadd", "xtrim")
    assert w.executor.started == [] and w.autoscaler.states[APP].in_flight is None
    [ended] = w.sink.events  # no decision logged, no action started
    assert isinstance(ended, CycleEnded) and ended.result == "unreachable" and "Redis went away" in str(ended.error)


def test_a_decision_without_actions_is_written_in_one_round_trip():
    w = world()
    trips, _ops = w.cycle()
    assert trips[-2:] == [PARTITIONS_AND_BLOCKLIST, DECISION]  # the history's reads, then the decision
