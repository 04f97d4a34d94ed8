"""`migrate` through a leading daemon returns when the migration's journal ends (issue 34): before,
it waited for the whole request's answer, which after a migration with --executors came only once
the leader's executor change showed in Spark (up to actuator.confirm_timeout_s, 180 s), saying
nothing meanwhile. Fakes for ZooKeeper's watch and the request store; no servers."""

from __future__ import annotations

import io
import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest

from sparkscale.cli.migrate import Progress, under_way
from sparkscale.cli.waiting import Waiting
from sparkscale.client import migrations
from sparkscale.client.migrations import JournalEnd, answer_or_end, journal_outcome
from sparkscale.config import load_config
from sparkscale.model.journal import Journal
from sparkscale.model.manual_request import ManualResult, RequestType


def journal(status: str = "running", next_phase: str = "requested", **kw: Any) -> Journal:
    j = Journal(id="mig-1", app="a", query="q", strategy="ccr", from_partitions=4, to_partitions=8,
                requested_at=time.time(), by="t", epoch=3, status=status, next=next_phase, **kw)
    j.phases["requested"] = j.requested_at
    return j


class SlowLeader:
    """A request store whose leader answers only when `answer()` is called (or never)."""

    def __init__(self) -> None:
        self.submitted: list[Any] = []
        self._answered = threading.Event()
        self._result: ManualResult | None = None

    def submit(self, app: str, request: Any) -> str:
        self.submitted.append(request)
        return "req-0000000001"

    def wait_result(self, app: str, name: str, timeout_s: float) -> ManualResult | None:
        return self._result if self._answered.wait(timeout_s) else None

    def answer(self, result: ManualResult) -> None:
        self._result = result
        self._answered.set()


class WatchingZk:
    def __init__(self) -> None:
        self.watches: list[Any] = []

    def DataWatch(self, path: str, func: Any) -> None:  # noqa: N802 (kazoo's name)
        self.watches.append((path, func))

    def write(self, j: Journal) -> None:
        for _path, func in self.watches:
            func(j.to_json(), None)


def run_through_leader(zk: WatchingZk, leader: SlowLeader, timeout_s: float, executors: int | None,
                       seen: list[Journal]) -> dict[str, Any]:
    connection = SimpleNamespace(cfg=load_config(None, ["apps=[{name: a, pipeline: wordcount}]"]), by="test",
                                 store=lambda _zk: SimpleNamespace(requests=leader))
    out: dict[str, Any] = {}

    def go() -> None:
        try:
            out["outcome"] = migrations._through_leader(
                connection, zk, "a", seen.append, timeout_s, lambda j, since: j.requested_at >= since - 1, 8,
                type=RequestType.MIGRATE, query="q", strategy="ccr", executors=executors)
        except Exception as exc:
            out["error"] = exc
        out["returned_at"] = time.monotonic()

    out["thread"] = threading.Thread(target=go, daemon=True)
    out["thread"].start()
    return out


def test_migrate_returns_when_the_journal_is_done_not_after_the_executor_change(monkeypatch):
    monkeypatch.setattr(migrations, "ANSWER_AFTER_END_S", 0.2)
    zk, leader, seen = WatchingZk(), SlowLeader(), []
    out = run_through_leader(zk, leader, 30.0, 3, seen)
    while not leader.submitted:
        time.sleep(0.01)
    zk.write(journal())
    j = journal(status="done", next_phase="done", phases={"requested": time.time(), "done": time.time() + 9})
    j.marks["metrics"] = {"restore_s": 5.5}
    ended_at = time.monotonic()
    zk.write(j)
    out["thread"].join(5)  # the leader never answers: its executor change "waits" out the test
    assert "outcome" in out, out
    assert out["returned_at"] - ended_at < 2.0
    outcome = out["outcome"]
    assert outcome.ok and "migration mig-1 done: q 4 -> 8 partitions (ccr)" in outcome.detail
    assert "sets 3 executors" in outcome.detail and "sparkscale actions --app a" in outcome.detail
    assert outcome.figures["restore_s"] == 5.5 and outcome.figures["migration"] == "mig-1"
    assert outcome.figures["follow_up"] == "pending"  # `migrate` then says where the rest shows
    assert [s.status for s in seen] == ["running", "done"]  # every journal write was shown


def test_the_leaders_answer_right_after_the_end_is_still_the_one_given(monkeypatch):
    monkeypatch.setattr(migrations, "ANSWER_AFTER_END_S", 5.0)
    zk, leader, seen = WatchingZk(), SlowLeader(), []
    out = run_through_leader(zk, leader, 30.0, None, seen)
    while not leader.submitted:
        time.sleep(0.01)
    zk.write(journal())
    zk.write(journal(status="done", next_phase="done"))
    leader.answer(ManualResult(True, '{"detail": "q: 4 -> 8 partitions (ccr)", "figures": {"catch_up_s": 1.0}}'))
    out["thread"].join(5)
    assert out["outcome"].detail == "q: 4 -> 8 partitions (ccr)" and out["outcome"].figures == {"catch_up_s": 1.0}


def test_no_answer_and_no_end_is_unavailable_as_before():
    zk, leader, seen = WatchingZk(), SlowLeader(), []
    out = run_through_leader(zk, leader, 0.3, None, seen)
    out["thread"].join(5)
    assert isinstance(out["error"], migrations.Unavailable) and "within 0.3 s" in str(out["error"])


def test_a_resumed_migration_ends_only_after_it_ran_again():
    end = JournalEnd()
    end.saw(journal(status="needs_attention"))  # where --resume starts from: not its end
    assert end.journal is None and not end.event.is_set()
    end.saw(journal(status="recovering"))
    end.saw(journal(status="rolled_back"))
    assert end.journal is not None and end.journal.status == "rolled_back" and end.event.is_set()
    end.saw(journal(status="done"))  # the first end is kept
    assert end.journal.status == "rolled_back"


def test_answer_or_end_raises_what_the_wait_raised_and_returns_a_quick_answer():
    def broken() -> ManualResult | None:
        raise RuntimeError("zk lost")

    with pytest.raises(RuntimeError, match="zk lost"):
        answer_or_end(broken, JournalEnd(), 5.0)
    quick = ManualResult(False, "refused")
    assert answer_or_end(lambda: quick, JournalEnd(), 5.0) is quick


def test_the_journals_outcome_is_not_ok_when_rolled_back_or_needing_attention():
    assert not journal_outcome(journal(status="rolled_back", detail="restarted: no ack"), None).ok
    assert not journal_outcome(journal(status="needs_attention"), None).ok
    assert journal_outcome(journal(status="aborted"), None).ok  # what --abort asked for
    assert "restarted: no ack" in journal_outcome(journal(status="rolled_back", detail="restarted: no ack"), 2).detail


def test_waiting_says_what_it_waits_for_and_how_long():
    now = [100.0]
    stream = io.StringIO()
    waiting = Waiting("the driver", stream=stream, tty=False, clock=lambda: now[0])
    waiting.started = 100.0
    now[0] = 105.0
    waiting.tick()
    waiting.waiting_for("migration mig-1: running, drained")
    now[0] = 112.4
    waiting.tick()
    assert stream.getvalue() == "waiting for the driver: 5 s\nwaiting for migration mig-1: running, drained: 12 s\n"


def test_waiting_on_a_terminal_redraws_one_line_and_clears_it(capsys):
    stream = io.StringIO()
    with Waiting("redis", stream=stream, tty=True, every_s=0.01) as waiting:
        time.sleep(0.1)
        waiting.echo("  stopped   1.00 s")
    text = stream.getvalue()
    assert text.count("\r\x1b[K") >= 3 and "| waiting for redis (0 s)\r" in text and "\n" not in text
    assert text.endswith("\r\x1b[K")  # nothing of the spinner left behind
    assert capsys.readouterr().out == "  stopped   1.00 s\n"


def test_a_quick_call_says_nothing_and_the_thread_ends():
    stream = io.StringIO()
    with Waiting("zookeeper", stream=stream, tty=False, every_s=5.0) as waiting:
        pass
    assert stream.getvalue() == "" and waiting._thread is not None and not waiting._thread.is_alive()


def test_migrates_progress_names_the_phase_under_way():
    progress = Progress(False)
    progress.show(journal(status="running", next_phase="drained"))
    assert progress.waiting.what == ("migration mig-1 (running, phase drained): the query to finish the input "
                                     "it admitted")
    progress.show(journal(status="done", next_phase="done"))
    assert progress.waiting.what.startswith("the rest of the request: migration mig-1 is done")
    assert under_way(journal(status="recovering", next_phase="done")).startswith(
        "migration mig-1 (recovering, phase done): the restarted query's first batch with input")


def test_the_cli_prints_the_journals_outcome_and_where_the_rest_shows(capsys):
    j = journal(status="done", next_phase="done")
    j.marks["metrics"] = {"rebalance_s": 1.5}
    with pytest.raises(SystemExit) as exited:
        Progress(False).finish_with(journal_outcome(j, 3))
    out = capsys.readouterr().out
    assert exited.value.code == 0 and out.startswith("done: migration mig-1 done: q 4 -> 8 partitions (ccr); the "
                                                     "leader now sets 3 executors")
    assert "rebalance_s" in out and "come later: `sparkscale migrate --list`" in out
    with pytest.raises(SystemExit) as exited:
        Progress(False).finish_with(journal_outcome(journal(status="needs_attention", detail="restarted: x"), None))
    assert exited.value.code == 1 and "NOT done: migration mig-1 needs_attention" in capsys.readouterr().out
