"""What one cycle asks Redis and ZooKeeper, and what it waits on (issue 33: on a saturated machine
each Redis round trip had a p99 of 0.1-0.16 s, and the cycle's p99 was their sum): the loop over
the daemon's own collector (monitors/collector.py, with test_collector.py's handmade driver) and
store adapters (daemon/wiring.py, store/), with fakeredis and the fake ZooKeeper, both counting
what they are asked, and the other collaborators of tests/unit/test_autoscaler.py.

An ordinary cycle of a leader with nothing to do waits on one Redis round trip when it takes the
driver round the stage prefetcher kept for it (the driver's registration, the query list, the
executor target, each query's progress, partitions, the shape and the blocklist), two when it reads
its own round (the registration and the list before it, the rest after), and on no ZooKeeper call:
the journal and the request list come from memory while their watches hold, never staler than
ZooKeeper says. Its decision is written off the cycle, by the daemon's writer thread; a decision
with actions is written in the cycle, in turn, before its actions start."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pytest
import redis
from kazoo.client import KazooState

from sparkscale.actuators.migration import JournalStore
from sparkscale.config import ActionLogConfig, Config
from sparkscale.control.act import InFlight, TakenIn
from sparkscale.control.autoscaler import Autoscaler
from sparkscale.control.events import CycleEnded, Decided
from sparkscale.control.judge import PendingOutcome
from sparkscale.daemon import manual
from sparkscale.daemon.decision_writer import OrderedActionLog
from sparkscale.daemon.wiring import ActuationContexts, RequestDesk, loop_stores
from sparkscale.model.journal import Journal
from sparkscale.model.manual_request import ManualResult
from sparkscale.monitors import collect_reads, collector, driver_round
from sparkscale.monitors.driver_round import DriverRound
from sparkscale.monitors.host import HostFigures
from sparkscale.monitors.stage_prefetch import TakenRound
from sparkscale.policies.outcomes import BlockedAction
from sparkscale.protocol.keys import actions_key, driver_key, partitions_key, progress_key, shape_key
from sparkscale.protocol.queries import queries_key
from sparkscale.protocol.znodes import journal_path, requests_path, results_path
from sparkscale.store import zk_watch
from sparkscale.store.action_records import BlocklistEntry
from sparkscale.store.live import live_store
from sparkscale.store.memory import memory_store
from sparkscale.store.zk_journal import ZkJournals
from sparkscale.store.zk_requests import ZkRequests
from tests.unit.fake_redis import RecordingRedis, Trip
from tests.unit.fakezk import FakeZk
from tests.unit.test_autoscaler import (
    APP,
    EXPECTED,
    NO_CHANGE,
    SCALE_UP,
    TAKEN_AT,
    FakeClock,
    FakeCluster,
    FakeExecutor,
    FakeJudge,
    FakeLock,
    FakePlanner,
    RecordingSink,
)
from tests.unit.test_collector import FakeRest, info, registered

PREFIX = "sparkscale:"
ROOT = "/sparkscale"
WAIT_S = 10.0  # a bound on waits for the writer thread, never reached when the test passes
WRITER = "sparkscale-decision-writer"  # the writer thread's name
OPEN: list[tuple[CountingRedis, OrderedActionLog]] = []  # the test's writers (and their gates), stopped at its end


class CountingRedis(RecordingRedis):
    """RecordingRedis (each command a round trip, each pipeline's `execute` one) whose pipelines the
    test may hold or refuse: `held`, when set, holds the writer thread's writes until it is set
    (`holding` tells one waits); `refuse(commands)` true fails them as a lost connection does."""

    def __init__(self) -> None:
        super().__init__()
        self.refuse: Callable[[tuple[str, ...]], bool] = lambda _commands: False
        self.held: threading.Event | None = None
        self.holding = threading.Event()

    def sending(self, commands: tuple[str, ...]) -> None:
        held = self.held
        if held is not None and threading.current_thread().name == WRITER:
            self.holding.set()
            assert held.wait(WAIT_S)
        super().sending(commands)
        if self.refuse(commands):
            raise redis.ConnectionError("Redis went away")


@dataclass
class KeptRounds:
    """The stage prefetcher as the collector sees it: while `keep`, a round kept for each cycle
    whose driver is `rest`'s, taken at TAKEN_AT (the cycle's window ends there)."""

    rest: FakeRest
    keep: bool = True
    taken: list[str | None] = field(default_factory=list)  # each cycle's: "kept", or why none

    def take_round(self, app_name: str, base_url: str, interval_s: float) -> TakenRound:
        if not self.keep or base_url != self.rest.base_url:
            self.taken.append("none" if not self.keep else "other_driver")
            return TakenRound(None, None, 0.0, "none" if not self.keep else "other_driver")
        self.taken.append("kept")
        answers = (self.rest.application(APP), self.rest.executors("app-id"), self.rest.jobs("app-id"))
        return TakenRound(DriverRound(answers[0], TAKEN_AT, answers[1], answers[2], 0), 1.0, 0.0, None)

    def register(self, *args: Any, **kwargs: Any) -> None:
        pass


@pytest.fixture(autouse=True)
def prefetcher(monkeypatch: pytest.MonkeyPatch) -> Iterator[KeptRounds]:
    """The app's driver (test_collector.py's handmade REST answers) and the rounds kept for it; the
    host and the cluster view are the test's. The writers started are stopped at the end."""
    rest = FakeRest()
    kept = KeptRounds(rest)
    monkeypatch.setattr(collector, "driver_rest_at", registered(lambda app: kept.rest))
    monkeypatch.setattr(collector, "PREFETCH", kept)
    monkeypatch.setattr(collector, "LAST_OBSERVED", collect_reads.LastObserved())
    monkeypatch.setattr(driver_round, "APP_IDS", driver_round.AppIds())
    monkeypatch.setattr(collector, "sample_host", lambda sample_s: HostFigures(0.5, 0.25, 2, sample_s, "head"))
    monkeypatch.setattr(collector, "cluster_extension", lambda cfg, app_id: None)
    yield kept
    while OPEN:
        counting, action_log = OPEN.pop()
        if counting.held is not None:
            counting.held.set()
        action_log.close(WAIT_S)


@dataclass
class World:
    autoscaler: Autoscaler
    redis: CountingRedis
    zk: FakeZk
    planner: FakePlanner
    executor: FakeExecutor
    sink: RecordingSink
    woken: list[str]
    action_log: OrderedActionLog

    def ended(self) -> list[CycleEnded]:
        return [e for e in self.sink.events if isinstance(e, CycleEnded)]

    def decided(self) -> list[Decided]:
        return [e for e in self.sink.events if isinstance(e, Decided)]

    def cycle(self, flush: bool = True) -> tuple[list[Trip], list[tuple[str, str]]]:
        """One cycle: the Redis round trips it waited on (made on its thread) and the ZooKeeper calls
        it made; with `flush`, once the writer has written what the cycle handed it."""
        trips, ops = len(self.redis.trips), len(self.zk.ops)
        result = self.autoscaler.cycle(APP)
        assert result in ("ok", "absent", "unreachable"), result
        if flush:
            assert self.action_log.flush(WAIT_S)
        me = threading.get_ident()
        return [trip for thread, trip in self.redis.trips[trips:] if thread == me], self.zk.ops[ops:]

    def written(self) -> list[Trip]:
        """The round trips the writer thread made."""
        me = threading.get_ident()
        return [trip for thread, trip in self.redis.trips if thread != me]

    def cycle_aside(self) -> tuple[threading.Thread, list[Trip]]:
        """A cycle run on a thread of its own, started; the round trips it makes, as it makes them."""
        trips: list[Trip] = []

        def run() -> None:
            me, before = threading.get_ident(), len(self.redis.trips)
            self.autoscaler.cycle(APP)
            trips.extend(trip for thread, trip in self.redis.trips[before:] if thread == me)

        thread = threading.Thread(target=run, name="cycle")
        thread.start()
        return thread, trips

    def logged(self) -> list[tuple[str, str]]:
        """The action log's entries: (kind, mode or decision)."""
        return [(fields["kind"], fields["json"]) for _id, fields in self.redis.direct.xrange(actions_key(PREFIX))]

    def other(self) -> FakeZk:
        """Another process's client of the same ZooKeeper (its writes fire this one's watches)."""
        return self.zk.as_session(0x2002)


def world(*plans: Any) -> World:
    """A leader of APP with one query `q`, registered; decisions that start nothing are written by
    the writer thread."""
    cfg = Config.model_validate({"apps": [{"name": APP, "pipeline": "wordcount"}]})
    zk, counting = FakeZk(), CountingRedis()
    counting.direct.set(driver_key(PREFIX, APP), "registered")
    counting.direct.hset(queries_key(PREFIX, APP), "q", info("q"))
    client: Any = counting
    store = live_store(client, PREFIX, zk, ROOT, ActionLogConfig())  # type: ignore[arg-type]
    action_log = OrderedActionLog(store.actions)
    action_log.start()
    OPEN.append((counting, action_log))
    contexts = ActuationContexts(zk, client, "me", None, ())
    planner, executor, sink, woken = FakePlanner(list(plans) or [NO_CHANGE]), FakeExecutor(), RecordingSink(), []
    autoscaler = Autoscaler(
        cfg, "me", collector=partial(collector.collect_riding, client=client), planner=planner, cluster=FakeCluster(),
        judge=FakeJudge(), executor=executor,
        requests=RequestDesk(store.requests, store.journals, action_log, contexts, "me"),
        stores=loop_stores(store, "me", zk, client, PREFIX, action_log), elections={APP: FakeLock()},
        clock=FakeClock(), sink=sink, wake=woken.append)
    autoscaler.add_app(APP)
    return World(autoscaler, counting, zk, planner, executor, sink, woken, action_log)


def journal(status: str = "running") -> Journal:
    return Journal(id="mig-1", app=APP, query="q", strategy="ccr", from_partitions=4, to_partitions=8,
                   requested_at=100.0, by="t", epoch=3, status=status)


LISTING = ("get", "hgetall")  # the driver's registration, the query list
HISTORIES = ("get", "xrange")  # the executor target, the query's progress
RIDE = ("get", "hget", "hgetall", "hgetall")  # the query's partitions (two reads), the shape, the blocklist
EVERYTHING = LISTING + HISTORIES + RIDE
DECISION = ("xadd", "xtrim")


# -- an ordinary cycle ------------------------------------------------------------------------------


def test_an_ordinary_cycle_waits_on_one_redis_round_trip_and_no_zookeeper_call():
    w = world()
    trips, _ops = w.cycle()  # elected: the shape, the action log recalled, the watches set; no round kept yet
    assert trips[-2:] == [LISTING, HISTORIES + RIDE]  # the registration and list before the driver's round
    for n in range(3):
        trips, ops = w.cycle()
        assert trips == [EVERYTHING]  # with the round kept for it, in one
        assert ops == []  # the journal and the request list are kept while their watches hold
        assert w.written()[-1] == DECISION and len(w.written()) == n + 2  # each decision, off the cycle
    assert [e.decision_id for e in w.decided()] == [entry for entry, _f in w.redis.direct.xrange(actions_key(PREFIX))]


def test_a_new_leader_and_an_absent_app_read_the_shape_on_their_own(prefetcher: KeptRounds):
    w = world()
    trips, _ops = w.cycle()
    assert trips[:2] == ["hgetall", "xrange"]  # the take-over: the shape, the action log recalled; then the collect
    w.redis.direct.delete(driver_key(PREFIX, APP))  # the driver is gone, and no round kept for it
    prefetcher.keep = False
    trips, _ops = w.cycle()
    assert w.ended()[-1].result == "absent" and trips == [LISTING, "hgetall"]  # its requests are served shaped


def test_a_cycle_without_a_kept_round_waits_on_two(prefetcher: KeptRounds):
    w = world()
    w.cycle()
    prefetcher.keep = False
    trips, _ops = w.cycle()
    assert trips == [LISTING, HISTORIES + RIDE] and prefetcher.taken[-1] == "none"


def test_a_query_listed_since_the_last_cycle_is_observed_in_the_cycle_that_lists_it():
    w = world()
    w.cycle()
    w.cycle()
    w.redis.direct.hset(queries_key(PREFIX, APP), "r", info("r"))
    trips, _ops = w.cycle()
    # Read ahead for `q` alone, then again for both: a second round trip, in this cycle only.
    assert trips == [EVERYTHING, ("get", "xrange", "xrange", "get", "hget", "get", "hget", "hgetall", "hgetall")]
    assert [s.query for s in w.planner.snapshots[-1]] == ["q", "r"] and set(w.decided()[-1].decision.partitions) == {
        "q", "r"}
    trips, _ops = w.cycle()
    assert len(trips) == 1 and len(trips[0]) == len(EVERYTHING) + 3  # r's progress and partitions read ahead too
    w.redis.direct.hset(queries_key(PREFIX, APP), "r", info("r", "terminated"))
    trips, _ops = w.cycle()
    assert trips[1] == HISTORIES + RIDE and [s.query for s in w.planner.snapshots[-1]] == ["q"]
    assert set(w.decided()[-1].decision.partitions) == {"q"}


def test_a_driver_that_moved_is_read_at_its_new_url_and_its_old_round_dropped(prefetcher: KeptRounds):
    w = world()
    w.cycle()
    moved = FakeRest("http://127.0.0.9:4040/api/v1")
    prefetcher.rest = moved  # the registration now names it (the round kept was the old driver's)
    trips, _ops = w.cycle()
    assert trips == [LISTING, HISTORIES + RIDE] and prefetcher.taken[-1] == "other_driver"
    assert sorted(moved.calls) == ["application", "executors", "jobs"]  # its own round


def test_the_partitions_come_from_the_last_migration_else_the_progress_else_the_config():
    w = world()
    client = w.redis.direct
    w.cycle()
    configured = w.autoscaler.cfg.app(APP).shuffle_partitions
    assert w.planner.seen[-1].partitions == {"q": configured}
    client.hset(progress_key(PREFIX, APP, "q"), "state_partitions", "6")
    w.cycle()
    assert w.planner.seen[-1].partitions == {"q": 6}
    client.set(partitions_key(PREFIX, APP, "q"), "8")
    w.cycle()
    assert w.planner.seen[-1].partitions == {"q": 8}
    client.set(partitions_key(PREFIX, APP, "q"), "eight")  # unreadable: as if never migrated
    trips, _ops = w.cycle()
    assert w.planner.seen[-1].partitions == {"q": 6} and trips == [EVERYTHING]


def test_the_executor_shape_is_read_in_the_collect_and_a_bad_one_is_no_shape():
    w = world()
    w.cycle()
    w.redis.direct.hset(shape_key(PREFIX, APP), mapping={"executor_cores": "3", "executor_memory_mb": "2048",
                                                         "migration": "mig-1"})
    trips, _ops = w.cycle()
    assert trips == [EVERYTHING] and w.planner.apps[-1].executor_cores == 3
    w.redis.direct.delete(shape_key(PREFIX, APP))
    w.redis.direct.hset(shape_key(PREFIX, APP), mapping={"executor_cores": "-1", "executor_memory_mb": "x"})
    configured = w.autoscaler.cfg.app(APP).executor_cores
    assert w.cycle()[0] == [EVERYTHING] and w.planner.apps[-1].executor_cores == configured


def test_the_loop_reads_the_shape_and_the_blocklist_with_the_stores_own_readers():
    """One reader of each per process: a bad record is logged once, not once per reader."""
    client: Any = CountingRedis()
    store = live_store(client, PREFIX, FakeZk(), ROOT)
    apps: Any = loop_stores(store, "me", FakeZk(), client, PREFIX, OrderedActionLog(store.actions)).apps
    assert apps.shapes is store.shapes and apps.blocklist is store.blocklist
    with pytest.raises(TypeError, match="the store over Redis"):
        loop_stores(memory_store(), "me", FakeZk(), client, PREFIX, OrderedActionLog(store.actions))


def test_a_blocklist_entry_another_daemon_writes_is_seen_by_the_next_cycle():
    w = world()
    w.cycle()
    w.cycle()
    assert w.planner.seen[-1].blocklist.entries == () and w.ended()[-1].blocked == 0
    blocked = BlockedAction(APP, "under_provisioned", "scale_executors", TAKEN_AT + 600, "ds2")
    live_store(w.redis.direct, PREFIX, w.other(), ROOT).blocklist.block(  # type: ignore[arg-type]
        BlocklistEntry(blocked, TAKEN_AT, "1-0", "unmet"))
    trips, _ops = w.cycle()
    assert trips == [EVERYTHING]  # read anew in the cycle's one round trip: never kept
    assert w.planner.seen[-1].blocklist.entries == (blocked,) and w.ended()[-1].blocked == 1


def test_what_the_leader_settles_before_it_plans_is_read_again_in_that_cycle():
    w = world(SCALE_UP, NO_CHANGE)
    w.cycle()  # acted: its action under way
    flight = w.autoscaler.states[APP].in_flight
    assert flight is not None and w.cycle()[0] == [EVERYTHING]  # still under way: nothing settled

    def ended(flight: InFlight | None, app: str) -> TakenIn:
        # The migration it carried out wrote the query's partitions after the collect read them.
        w.redis.direct.set(partitions_key(PREFIX, APP, "q"), "8")
        assert flight is not None
        return TakenIn(flight, None, "", TAKEN_AT)

    w.executor.take_in = ended  # type: ignore[method-assign]
    trips, _ops = w.cycle()
    assert trips == [EVERYTHING, RIDE] and w.planner.seen[-1].partitions == {"q": 8}
    w.executor.take_in = FakeExecutor().take_in  # type: ignore[method-assign]
    # An outcome judged unmet blocks its action (daemon/evaluator.py): the plan of that cycle sees it.
    blocklist = live_store(w.redis.direct, PREFIX, w.zk, ROOT).blocklist  # type: ignore[arg-type]
    w.autoscaler.judge = BlockingJudge(blocklist)
    w.autoscaler.states[APP].pending.append(
        PendingOutcome("1-0", EXPECTED, SCALE_UP.changes[0], TAKEN_AT, "dhalion", "q"))
    trips, _ops = w.cycle()
    assert trips == [EVERYTHING, RIDE] and [e.action_type for e in w.planner.seen[-1].blocklist.entries] == [
        "scale_executors"]
    assert w.cycle()[0] == [EVERYTHING]  # nothing due: the collect's reads stand


@dataclass
class BlockingJudge:
    """Judges every outcome due unmet and blocks its action, as Dhalion's are (daemon/evaluator.py)."""

    blocklist: Any

    def judge_due(self, app: Any, pending: list[PendingOutcome], snapshot: Any, cfg: Any, now: float | None = None,
                  task_overhead: bool = True) -> list[Any]:
        for item in list(pending):
            self.blocklist.block(BlocklistEntry(BlockedAction(
                app.name, item.expected.diagnosis, item.action.type, TAKEN_AT + 600, item.policy), TAKEN_AT,
                item.decision_id, "unmet"))
            pending.remove(item)
        return []


# -- the decision write -----------------------------------------------------------------------------


def test_a_decision_without_actions_is_not_waited_for_and_its_line_comes_with_its_id():
    w = world()
    w.cycle()
    w.redis.held = threading.Event()
    trips, _ops = w.cycle(flush=False)
    assert w.redis.holding.wait(WAIT_S)  # the writer is held in its write: the cycle ended without it
    assert trips == [EVERYTHING] and w.ended()[-1].result == "ok" and len(w.decided()) == 1
    w.redis.held.set()
    assert w.action_log.flush(WAIT_S)
    decided = w.decided()[-1]
    [(last_id, _fields)] = w.redis.direct.xrange(actions_key(PREFIX))[-1:]
    assert decided.decision_id == last_id and decided.decision.mode == "no_change"


def test_a_decision_with_actions_is_written_in_the_cycle_after_those_before_it_and_before_its_actions():
    w = world(NO_CHANGE, NO_CHANGE, SCALE_UP, NO_CHANGE)
    w.cycle()
    w.redis.held = threading.Event()
    w.cycle(flush=False)  # its no_change decision held in the writer's write
    assert w.redis.holding.wait(WAIT_S)
    acting, trips = w.cycle_aside()
    acting.join(0.2)
    assert acting.is_alive() and w.executor.started == []  # it waits for the decision before its own
    w.redis.held.set()
    acting.join(WAIT_S)
    assert trips[-1] == ("xadd", "xadd", "xtrim")  # its snapshot, the decision, the trim: in the cycle
    modes = [m for kind, m in w.logged() if kind == "decision"]
    assert ['"mode": "no_change"' in m for m in modes] == [True, True, False]  # in the order they were made
    [acted] = [e for e in w.decided() if e.decision.mode == "acted"]
    assert w.executor.started == [(acted.decision_id, SCALE_UP.changes)]


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


def test_a_refused_write_of_a_decision_without_actions_fails_no_cycle():
    w = world()
    w.cycle()
    w.redis.refuse = lambda commands: "xadd" in commands
    w.cycle()
    assert w.ended()[-1].result == "ok" and w.decided()[-1].decision_id is None  # its line, with no id
    w.redis.refuse = lambda _commands: False
    w.cycle()
    assert w.decided()[-1].decision_id is not None  # the next decision is written


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
