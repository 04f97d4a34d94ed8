"""What one cycle asks Redis and ZooKeeper (issue 33: after the collect, the p99 was the stores'
round trips on a saturated machine): the loop over the daemon's own store adapters
(daemon/wiring.py, store/), with counting fakes of both services and the other collaborators of
tests/unit/test_autoscaler.py. An ordinary cycle of a leader with nothing to do reads the partition
counts and the blocklist in one pipeline and writes its decision in another; the journal and the
request list come from memory while their watches hold, and never staler than ZooKeeper says."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis
from kazoo.client import KazooState

from sparkscale.actuators.migration import JournalStore
from sparkscale.config import ActionLogConfig, Config
from sparkscale.control.autoscaler import Autoscaler
from sparkscale.control.events import CycleEnded, Decided
from sparkscale.daemon import manual
from sparkscale.daemon.wiring import ActuationContexts, RequestDesk, loop_stores
from sparkscale.model.journal import Journal
from sparkscale.model.manual_request import ManualResult
from sparkscale.policies.outcomes import BlockedAction
from sparkscale.protocol.keys import partitions_key, progress_key
from sparkscale.protocol.znodes import journal_path, requests_path, results_path
from sparkscale.store import zk_watch
from sparkscale.store.action_records import BlocklistEntry
from sparkscale.store.live import live_store
from sparkscale.store.zk_journal import ZkJournals
from sparkscale.store.zk_requests import ZkRequests
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


def journal(status: str = "running") -> Journal:
    return Journal(id="mig-1", app=APP, query="q", strategy="ccr", from_partitions=4, to_partitions=8,
                   requested_at=100.0, by="t", epoch=3, status=status)


PARTITIONS_AND_BLOCKLIST = ("get", "hget", "hgetall")
DECISION = ("xadd", "xtrim")


# -- an ordinary cycle ------------------------------------------------------------------------------


def test_an_ordinary_cycle_makes_three_redis_round_trips_and_no_zookeeper_call():
    w = world()
    w.cycle()  # elected: the action log recalled, the watches set
    for _ in range(3):
        trips, ops = w.cycle()
        # The executor shape (before the collect), the partitions with the blocklist, the decision.
        assert trips == ["hgetall", PARTITIONS_AND_BLOCKLIST, DECISION]
        assert ops == []  # the journal and the request list are kept while their watches hold


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


def test_a_decision_without_actions_is_written_in_one_round_trip():
    w = world()
    trips, _ops = w.cycle()
    assert trips[-2:] == [PARTITIONS_AND_BLOCKLIST, DECISION]  # the history's reads, then the decision


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


# -- the journal's watch ----------------------------------------------------------------------------


def test_a_journal_another_process_writes_is_read_by_the_next_cycle():
    w = world()
    w.cycle()
    assert not w.planner.seen[-1].migration_running
    JournalStore(w.other(), ROOT, APP).write(journal())  # another daemon's migration: the watch fires
    _trips, ops = w.cycle()
    assert ops == [("get", journal_path(ROOT, APP))]  # read once, the watch set again
    assert w.planner.seen[-1].migration_running
    _trips, ops = w.cycle()
    assert ops == [] and w.planner.seen[-1].migration_running


def test_a_journal_this_process_writes_is_read_again_before_the_watch_event_is_handled():
    zk = FakeZk()
    journals = ZkJournals(zk, ROOT)
    assert journals.watched(APP) is None
    zk.hold_events = True  # kazoo's event thread has not run the watch yet
    JournalStore(zk, ROOT, APP).write(journal())
    assert journals.watched(APP) == journal()
    zk.deliver()
    assert journals.watched(APP) == journal()


@pytest.mark.parametrize("state", [KazooState.SUSPENDED, KazooState.LOST])
def test_a_suspended_or_lost_connection_makes_the_next_cycle_read_the_journal(state: str):
    w = world()
    w.cycle()
    w.zk.hold_events = True  # what changed while the connection was down was never told
    JournalStore(w.other(), ROOT, APP).write(journal("needs_attention"))
    w.zk.change_state(state)
    w.zk.change_state(KazooState.CONNECTED)
    _trips, ops = w.cycle()
    assert ("get", journal_path(ROOT, APP)) in ops and w.ended()[-1].needing_attention == 1


def test_a_read_a_change_overtakes_is_returned_but_not_kept():
    reads: list[int] = []
    watch: zk_watch.ZnodeWatch[int]

    def read(_watcher: zk_watch.Watcher) -> int:
        reads.append(len(reads))
        if len(reads) == 1:
            watch.forget()  # the watch fired while the read was under way
        return reads[-1]

    watch = zk_watch.ZnodeWatch(read)
    assert watch.get() == 0 and not watch.holds
    assert watch.get() == 1 and watch.holds
    assert watch.get() == 1 and len(reads) == 2


# -- the operator's requests ------------------------------------------------------------------------


def test_a_request_wakes_the_leader_whose_next_cycle_lists_and_serves_it():
    w = world()
    w.cycle()
    path = requests_path(ROOT, APP)
    kept = zk_watch.watched(w.zk, path, lambda _w: [])
    assert kept.holds
    held: list[bool] = []
    w.autoscaler.wake = lambda app: held.append(kept.holds)  # what the woken cycle would find
    name = manual.submit_request(ZkRequests(w.other(), ROOT), APP, None, "op", 60, type="abort_migration",
                                 migration="mig-9")
    assert held == [False]  # the wake-up watch dropped the kept list before it woke the leader
    _trips, ops = w.cycle()
    assert ("get_children", path) in ops
    answer = ManualResult.from_json(w.zk.get(f"{results_path(ROOT, APP)}/{name}")[0])
    assert not answer.ok and "no migration mig-9" in answer.detail
    _trips, ops = w.cycle()
    assert ops == [("get_children", path)]  # answered here: the list is read again once, and watched
    _trips, ops = w.cycle()
    assert ops == []
