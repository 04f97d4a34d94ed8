"""The daemon's action log in order, with the decisions that start nothing written off the cycle by
one writer thread (daemon/decision_writer.py, issue 33): first in, first written; an in-line write
waits for the decisions queued before it; a full queue writes in line, never drops; a failed write
is logged and counted and the next ones go on; a stopping daemon writes what is left."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
import redis
from structlog.testing import capture_logs

from sparkscale.config import Config
from sparkscale.daemon.decision_writer import OrderedActionLog
from sparkscale.daemon.metrics import DaemonMetrics
from sparkscale.daemon.service import Daemon
from sparkscale.model.snapshot import Snapshot
from sparkscale.store.action_records import DecisionRecord, LoggedDecision
from sparkscale.store.memory import memory_store
from tests.unit.test_explain import T, record

WAIT_S = 10.0  # a bound on waits for the writer thread, never reached when the test passes
WRITER = "sparkscale-decision-writer"


@dataclass
class GatedLog:
    """An action log that records each decision's time and the thread that wrote it; the write of
    a decision at a time in `held` waits for `release` (`holding` tells it is waiting), one at a
    time in `refused` raises."""

    written: list[tuple[float, str]] = field(default_factory=list)
    held: set[float] = field(default_factory=set)
    refused: set[float] = field(default_factory=set)
    holding: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)

    def append_decision(self, rec: DecisionRecord, snapshot: Snapshot | None = None) -> str:
        if rec.decided_at in self.held:
            self.holding.set()
            assert self.release.wait(WAIT_S)
        if rec.decided_at in self.refused:
            raise redis.ConnectionError("Redis went away")
        self.written.append((rec.decided_at, threading.current_thread().name))
        return f"{len(self.written)}-0"

    def read(self, app: str | None = None, since: float | None = None) -> list[LoggedDecision]:
        return [LoggedDecision(f"{n + 1}-0", record(at=at), None, None, None) for n, (at, _thread) in
                enumerate(self.written)]

    def times(self) -> list[float]:
        return [at for at, _thread in self.written]


@dataclass
class Answers:
    """Each decision's id as its callback got it, by its time, in the order they came."""

    ids: list[tuple[float, str | None]] = field(default_factory=list)

    def to(self, at: float) -> object:
        return lambda decision_id: self.ids.append((at, decision_id))


@pytest.fixture
def gated() -> Iterator[tuple[GatedLog, OrderedActionLog]]:
    log = GatedLog()
    failed: list[str] = []
    ordered = OrderedActionLog(log, on_failed=failed.append)  # type: ignore[arg-type]
    ordered.failed = failed  # type: ignore[attr-defined]
    ordered.start()
    yield log, ordered
    log.release.set()
    ordered.close(WAIT_S)


def later(ordered: OrderedActionLog, answers: Answers, *times: float) -> None:
    for at in times:
        ordered.append_later(record(mode="no_change", actions=(), at=at), None, answers.to(at))  # type: ignore[arg-type]


def held_in_first(log: GatedLog, ordered: OrderedActionLog, *times: float) -> Answers:
    """The decisions at `times` handed over, the writer held in the first one's write."""
    answers = Answers()
    log.held = {times[0]}
    later(ordered, answers, *times)
    assert log.holding.wait(WAIT_S)
    return answers


def test_decisions_are_written_off_the_caller_in_the_order_they_came(gated):
    log, ordered = gated
    answers = held_in_first(log, ordered, T, T + 1, T + 2)
    assert log.written == [] and answers.ids == []  # the caller went on: the writer holds the first
    log.release.set()
    assert ordered.flush(WAIT_S)
    assert log.written == [(T, WRITER), (T + 1, WRITER), (T + 2, WRITER)]
    assert answers.ids == [(T, "1-0"), (T + 1, "2-0"), (T + 2, "3-0")]


def test_an_in_line_write_waits_for_the_decisions_queued_before_it(gated):
    log, ordered = gated
    held_in_first(log, ordered, T, T + 1)
    ids: list[str] = []
    acting = threading.Thread(target=lambda: ids.append(ordered.append_decision(record(at=T + 2))), name="cycle")
    acting.start()
    acting.join(0.2)
    assert acting.is_alive() and log.written == []  # its turn comes after the two queued before it
    log.release.set()
    acting.join(WAIT_S)
    assert log.times() == [T, T + 1, T + 2] and ids == ["3-0"]


def test_a_read_sees_the_decisions_queued_before_it(gated):
    log, ordered = gated
    held_in_first(log, ordered, T, T + 1)
    read: list[list[LoggedDecision]] = []
    reading = threading.Thread(target=lambda: read.append(ordered.read("clicks")))
    reading.start()
    log.release.set()
    reading.join(WAIT_S)
    assert [d.decision.decided_at for d in read[0]] == [T, T + 1]


def test_a_full_queue_writes_in_line_in_turn_and_drops_nothing():
    log = GatedLog(held={T})
    ordered = OrderedActionLog(log, capacity=1)  # type: ignore[arg-type]
    ordered.start()
    try:
        answers = Answers()
        later(ordered, answers, T)
        assert log.holding.wait(WAIT_S)  # taken by the writer: the queue is empty again
        later(ordered, answers, T + 1)  # queued: the queue is full
        full = threading.Thread(target=later, args=(ordered, answers, T + 2), name="cycle")
        full.start()
        full.join(0.2)
        assert full.is_alive()  # written by its caller, after the two before it
        log.release.set()
        full.join(WAIT_S)
        assert ordered.flush(WAIT_S)
        assert log.written == [(T, WRITER), (T + 1, WRITER), (T + 2, "cycle")]
        assert sorted(answers.ids) == [(T, "1-0"), (T + 1, "2-0"), (T + 2, "3-0")]
    finally:
        log.release.set()
        ordered.close(WAIT_S)


def test_a_failed_write_is_logged_and_counted_and_the_next_ones_go_on(gated):
    log, ordered = gated
    answers = Answers()
    log.refused = {T + 1}
    with capture_logs() as events:
        later(ordered, answers, T, T + 1, T + 2)
        assert ordered.flush(WAIT_S)
    assert log.times() == [T, T + 2] and answers.ids == [(T, "1-0"), (T + 1, None), (T + 2, "2-0")]
    [failed] = [e for e in events if e["event"] == "decision.write_failed"]
    assert failed["app"] == "clicks" and "Redis went away" in failed["error"] and failed["log_level"] == "error"
    assert ordered.failed == ["clicks"]  # type: ignore[attr-defined]


def counted(metrics: DaemonMetrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


def test_the_daemon_counts_a_failed_write_off_the_cycle_as_such_not_as_a_failed_cycle():
    """Its cycle was counted by its own result when it ended: counting the write that failed
    after it as a failed cycle counted one cycle twice (ok, then failed)."""
    daemon = Daemon(Config())  # its Redis and ZooKeeper clients are never used here
    log = GatedLog(refused={T + 1})
    daemon.action_log.log = log  # type: ignore[assignment]
    failed_cycles = counted(daemon.metrics, "sparkscale_cycles_total", app="clicks", result="failed")
    daemon.action_log.start()
    try:
        later(daemon.action_log, Answers(), T, T + 1, T + 2)
        assert daemon.action_log.flush(WAIT_S)
    finally:
        daemon.action_log.close(WAIT_S)
    assert log.times() == [T, T + 2]
    assert counted(daemon.metrics, "sparkscale_decision_write_failures_total", app="clicks") == 1
    assert counted(daemon.metrics, "sparkscale_cycles_total", app="clicks", result="failed") == failed_cycles


def test_a_callback_that_raises_is_logged_and_the_writer_goes_on(gated):
    log, ordered = gated
    answers = Answers()

    def broken(_decision_id: str | None) -> None:
        raise RuntimeError("a feed failed")

    with capture_logs() as events:
        ordered.append_later(record(at=T), None, broken)
        later(ordered, answers, T + 1)
        assert ordered.flush(WAIT_S)
    assert log.times() == [T, T + 1] and answers.ids == [(T + 1, "2-0")]
    assert [e["app"] for e in events if e["event"] == "decision.event_failed"] == ["clicks"]


def test_a_stopping_daemon_writes_what_is_left_and_then_writes_in_line(gated):
    log, ordered = gated
    answers = held_in_first(log, ordered, T, T + 1, T + 2)
    log.release.set()
    assert ordered.close(WAIT_S) == 0
    assert log.times() == [T, T + 1, T + 2] and len(answers.ids) == 3
    later(ordered, answers, T + 3)  # closed: written by its caller at once
    assert log.written[-1] == (T + 3, threading.current_thread().name) and answers.ids[-1] == (T + 3, "4-0")


def test_a_stop_waits_so_long_for_a_hung_write_and_says_how_many_are_left():
    log = GatedLog()
    ordered = OrderedActionLog(log)  # type: ignore[arg-type]
    ordered.start()
    held_in_first(log, ordered, T, T + 1)
    with capture_logs() as events:
        left = ordered.close(0.05)
    assert left == 2 and [e["decisions"] for e in events if e["event"] == "decision.writes_left"] == [2]
    log.release.set()
    assert ordered.flush(WAIT_S)  # the writer still finishes what it had, if the process lives on
    assert log.times() == [T, T + 1]


def test_before_it_starts_a_decision_is_written_by_its_caller():
    log = GatedLog()
    ordered = OrderedActionLog(log)  # type: ignore[arg-type]
    answers = Answers()
    later(ordered, answers, T)
    assert log.written == [(T, threading.current_thread().name)] and answers.ids == [(T, "1-0")]


def test_it_is_an_action_log_over_the_store():
    store = memory_store()
    ordered = OrderedActionLog(store.actions)
    ordered.start()
    try:
        answers = Answers()
        later(ordered, answers, T)
        first = ordered.append_decision(record(at=T + 1))
        assert [d.id for d in ordered.read("clicks")] == [answers.ids[0][1], first]
        assert ordered.decision(first) is not None and ordered.snapshot("clicks", "nope") is None
    finally:
        ordered.close(WAIT_S)
