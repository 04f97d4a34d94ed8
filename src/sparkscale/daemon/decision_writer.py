"""The daemon's action log, written in the order the daemon made its entries, with the decisions
that start nothing (no change, or advice) written off the cycle (issue 33: each such write was a
Redis round trip every cycle waited on, at p99 0.16 s on a starved machine).

`OrderedActionLog` wraps the daemon's one action log (store/base.py `ActionLogStore`): every part
of the daemon writes through it (the loop's decisions, the operator's requests, the actions'
results, the judged outcomes). `append_later` hands a decision to one writer thread: first in,
first written, at most `capacity` waiting. Every other write is made in line, as before, once the
decisions waiting are written (by the caller, in their turn): so the log holds the daemon's
entries in the order it made them, and a decision with actions is logged after the decisions
that came before it, before its actions start, and a refused write still raises to its caller.
A read (a new leader's recall, `explain`) is made once the decisions waiting are written too.

A write off the cycle never raises there: one that fails is logged (`decision.write_failed`,
with the app and the error), counted (`on_failed`: the daemon's
`sparkscale_decision_write_failures_total`, not a failed cycle: the write never ends its cycle,
which is counted by its own result), and the writes after it go on; its callback gets None for
the id. When the queue is full, or the writer is not running (before `start`, after `close`),
`append_later` writes in line, in turn: nothing is dropped. `close` waits, bounded, for the
queue to be written.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import structlog

from sparkscale.model.action_result import ActionResult
from sparkscale.model.snapshot import Snapshot
from sparkscale.store.action_records import DecisionRecord, LoggedDecision, OutcomeRecord
from sparkscale.store.bad_records import escaped
from sparkscale.store.base import ActionLogStore

log = structlog.get_logger(__name__)

CAPACITY = 256  # decisions waiting at most (10 apps make one each per interval)
CLOSE_WAIT_S = 10.0  # how long a stopping daemon waits for the decisions still waiting

Written = Callable[[str | None], None]  # called with the id a decision was logged under (None: not logged)


@dataclass(frozen=True)
class _Queued:
    record: DecisionRecord
    snapshot: Snapshot | None
    on_written: Written


class OrderedActionLog:
    """`log` (an ActionLogStore) with `append_later`; `on_failed(app)` counts a decision it failed to write."""

    def __init__(self, log: ActionLogStore, on_failed: Callable[[str], None] = lambda _app: None,
                 capacity: int = CAPACITY) -> None:
        self.log = log
        self.on_failed = on_failed
        self.capacity = capacity
        self._queue: deque[_Queued] = deque()
        self._unwritten = 0  # queued, or taken and not yet written and answered
        self._changed = threading.Condition()  # guards the queue, `_unwritten` and `_running`
        self._turn = threading.Lock()  # held for each write to the log: one at a time, in order
        self._running = False
        self._thread: threading.Thread | None = None

    # -- the writer -------------------------------------------------------------------------------

    def start(self) -> None:
        with self._changed:
            if self._running:
                return
            self._running = True
        self._thread = threading.Thread(target=self._run, name="sparkscale-decision-writer", daemon=True)
        self._thread.start()

    def close(self, timeout_s: float = CLOSE_WAIT_S) -> int:
        """Stop taking decisions to write later (they are written in line from now on) and wait, at
        most `timeout_s`, for those waiting to be written; how many were left unwritten."""
        with self._changed:
            self._running = False
            self._changed.notify_all()
        if self._thread is not None:
            self._thread.join(timeout_s)
        with self._changed:
            left = self._unwritten
        if left:
            log.warning("decision.writes_left", decisions=left, waited_s=timeout_s)
        return left

    def flush(self, timeout_s: float) -> bool:
        """Wait, at most `timeout_s`, until every decision handed over so far is written (or failed)."""
        with self._changed:
            return self._changed.wait_for(lambda: self._unwritten == 0, timeout_s)

    def append_later(self, record: DecisionRecord, snapshot: Snapshot | None, on_written: Written) -> None:
        """Log the decision off the caller's thread, after every entry before it; `on_written` gets
        its id (None: the write failed, logged and counted). Written in line when the queue is full
        or the writer is not running."""
        queued = _Queued(record, snapshot, on_written)
        with self._changed:
            if self._running and len(self._queue) < self.capacity:
                self._queue.append(queued)
                self._unwritten += 1
                self._changed.notify_all()
                return
            self._unwritten += 1
        with self._in_turn() as done:
            done.append((queued, self._write(queued)))

    def _run(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: bool(self._queue) or not self._running)
                if not self._queue:
                    return  # closed, and nothing left
            with self._in_turn():
                pass  # the turn writes what is queued

    @contextmanager
    def _in_turn(self) -> Iterator[list[tuple[_Queued, str | None]]]:
        """The log's turn for one write: the decisions queued before it are written first; after
        it, each written decision's callback is called (outside the turn) and the waiters told."""
        done: list[tuple[_Queued, str | None]] = []
        try:
            with self._turn:
                while (queued := self._take()) is not None:
                    done.append((queued, self._write(queued)))
                yield done
        finally:
            for queued, decision_id in done:
                _answer(queued, decision_id)
            with self._changed:
                self._unwritten -= len(done)
                self._changed.notify_all()

    def _take(self) -> _Queued | None:
        with self._changed:
            return self._queue.popleft() if self._queue else None

    def _write(self, queued: _Queued) -> str | None:
        try:
            return self.log.append_decision(queued.record, queued.snapshot)
        except Exception as exc:  # logged and counted, never raised into a cycle; the next writes go on
            log.error("decision.write_failed", app=escaped(queued.record.app), mode=str(queued.record.mode),
                      error=_said(exc))
            self.on_failed(queued.record.app)
            return None

    # -- the action log, in turn ------------------------------------------------------------------

    def append_decision(self, record: DecisionRecord, snapshot: Snapshot | None = None) -> str:
        with self._in_turn():
            return self.log.append_decision(record, snapshot)

    def append_results(self, decision_id: str, app: str, results: Iterable[ActionResult]) -> str:
        with self._in_turn():
            return self.log.append_results(decision_id, app, results)

    def append_outcome(self, record: OutcomeRecord) -> str:
        with self._in_turn():
            return self.log.append_outcome(record)

    def read(self, app: str | None = None, since: float | None = None) -> list[LoggedDecision]:
        with self._in_turn():
            return self.log.read(app, since)

    def decision(self, decision_id: str) -> LoggedDecision | None:
        with self._in_turn():
            return self.log.decision(decision_id)

    def snapshot(self, app: str, wanted_id: str) -> str | None:
        with self._in_turn():
            return self.log.snapshot(app, wanted_id)


def _answer(queued: _Queued, decision_id: str | None) -> None:
    """Hand the decision's id to its callback; one that raises (a feed) is logged, never raised."""
    try:
        queued.on_written(decision_id)
    except Exception as exc:
        log.error("decision.event_failed", app=escaped(queued.record.app), error=_said(exc), exc_info=exc)


def _said(exc: BaseException) -> str:
    """The error as the log says it: its type and message (redis-py's repr names only its kind)."""
    return escaped(f"{type(exc).__name__}: {exc}")
