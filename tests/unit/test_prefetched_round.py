"""The cycle takes the driver round the prefetcher's last pass read for it, when fresh, and asks the
driver nothing; a stale, foreign or missing round leaves the cycle to read its own (issue 33: the
driver round on loaded drivers was the rest of the 10-app cycle p99)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from structlog.testing import capture_logs

from sparkscale.monitors import collector, driver_round
from sparkscale.monitors.spark_rest import RestApplication, RestJob, RestStage, SparkRestError
from sparkscale.monitors.stage_cache import StageCache
from sparkscale.monitors.stage_prefetch import LATE, LEAD, ROUND_MAX_AGE, ROUND_WAIT, StagePrefetcher, TakenRound
from tests.unit.test_collector import T0 as COLLECT_T0
from tests.unit.test_collector import world  # noqa: F401  (the collector's handmade app, as a fixture)
from tests.unit.test_stage_prefetch import APP_ID, INTERVAL_S, T0, Clock, FakeRest, Started, job, manual

APPLICATION = RestApplication(APP_ID, "wc")
ROUND_TAKEN_AT = 1_800_000_100.0  # epoch seconds: when the last pass asked (the prefetcher's clock)


class Counting(FakeRest):
    """FakeRest that also counts executors requests."""

    def executors(self, app_id: str) -> list[object]:
        with self._lock:
            self.calls.append("executors")
        return []


def passes(rest: FakeRest, **kwargs: object) -> tuple[object, Clock, float]:
    """A prefetcher with `rest` registered, its two passes run; (prefetcher, clock, cycle start)."""
    clock = Clock()
    prefetcher = manual(StageCache(), clock)
    if kwargs:
        for name, value in kwargs.items():
            setattr(prefetcher, name, value)
    prefetcher._clock = lambda: ROUND_TAKEN_AT  # type: ignore[attr-defined]
    start_s = clock.now_s
    prefetcher.register(rest, APP_ID, "wc", INTERVAL_S, since_s=T0, application=APPLICATION)
    clock.now_s = start_s + LEAD * INTERVAL_S
    prefetcher.run_due(clock.now_s)
    clock.now_s = start_s + LATE * INTERVAL_S
    prefetcher.run_due(clock.now_s)
    return prefetcher, clock, start_s


def test_the_last_pass_before_the_cycle_keeps_a_round_handed_out_once():
    rest = Counting([job(1, "SUCCEEDED", (1, 2))])
    prefetcher, clock, start_s = passes(rest)
    assert rest.calls.count("executors") == 1 and rest.calls.count("jobs") == 2  # the first pass keeps none
    clock.now_s = start_s + INTERVAL_S  # the next cycle
    taken = prefetcher.take_round("wc", rest.base_url, INTERVAL_S)
    kept, age_s = taken.round, taken.age_s
    assert kept is not None and taken.missed is None and taken.waited_s == 0  # nothing being asked: no wait
    assert kept.application == APPLICATION and kept.taken_at == ROUND_TAKEN_AT and kept.requests == 0
    assert [j.job_id for j in kept.jobs] == [1] and age_s == pytest.approx((1 - LATE) * INTERVAL_S)
    assert prefetcher.take_round("wc", rest.base_url, INTERVAL_S).missed == "none"  # once


def test_a_stale_or_foreign_round_is_not_taken_nor_one_not_asked_for():
    rest = Counting([job(1, "SUCCEEDED", (1,))])
    prefetcher, clock, _start = passes(rest)
    clock.now_s += ROUND_MAX_AGE * INTERVAL_S + 0.01  # a late cycle
    assert prefetcher.take_round("wc", rest.base_url, INTERVAL_S) == TakenRound(None, None, 0.0, "stale")
    prefetcher, clock, _start = passes(rest)
    assert prefetcher.take_round("wc", "http://10.0.0.9:4040/api/v1", INTERVAL_S).missed == "other_driver"
    off = Counting([job(1, "SUCCEEDED", (1,))])
    prefetcher, clock, _start = passes(off, keep_rounds=False)  # SPARKSCALE_PREFETCH_ROUND=off
    assert "executors" not in off.calls and prefetcher.take_round("wc", off.base_url, INTERVAL_S).missed == "none"


def test_a_failed_pass_keeps_no_round_and_stop_drops_a_kept_one():
    rest = Counting([job(1, "SUCCEEDED", (1,))])

    def jobs(app_id: str) -> list[RestJob]:
        raise SparkRestError("http://driver/jobs", "timed out", unreachable=True)

    rest.jobs = jobs  # type: ignore[method-assign]
    prefetcher, _clock, _start = passes(rest)
    assert rest.calls.count("executors") == 1
    assert prefetcher.take_round("wc", rest.base_url, INTERVAL_S).missed == "none"
    ok = Counting([job(1, "SUCCEEDED", (1,))])
    prefetcher, _clock, _start = passes(ok)
    prefetcher.stop()
    assert prefetcher.take_round("wc", ok.base_url, INTERVAL_S).missed == "none"


def test_a_cycle_with_a_fresh_round_asks_the_driver_nothing_and_a_late_one_asks_itself(world, monkeypatch):  # noqa: F811
    options = collector.CollectOptions(window_s=30)
    clock = Clock()
    prefetcher = manual(StageCache(), clock)
    prefetcher._clock = lambda: COLLECT_T0 + 39  # type: ignore[attr-defined]  # the pass asked 1 s before the cycle
    monkeypatch.setattr(collector, "PREFETCH", prefetcher)
    monkeypatch.setattr(driver_round, "STAGES", prefetcher.cache)
    start_s = clock.now_s
    first = collector.collect_snapshots(world.cfg, "wc", options=options)
    assert first[0].extensions["spark"]["driver_round_age_s"] is None  # nothing kept yet: the cycle's own round
    for at in (LEAD, LATE):
        clock.now_s = start_s + at * world.cfg.loop.interval_s
        prefetcher.run_due(clock.now_s)
    world.rest.calls.clear()
    clock.now_s = start_s + world.cfg.loop.interval_s
    with capture_logs() as events:
        second = collector.collect_snapshots(world.cfg, "wc", options=options)
    assert world.rest.calls == []  # no application, executors, jobs or stage request
    spark = second[0].extensions["spark"]
    assert spark["rest_requests"] == 0 and spark["driver_round_age_s"] == pytest.approx(
        (1 - LATE) * world.cfg.loop.interval_s)
    assert all(s.taken_at == COLLECT_T0 + 39 for s in second)  # the window ends when the pass asked
    assert round_fields(events) == [(pytest.approx((1 - LATE) * world.cfg.loop.interval_s), 0.0, None)] * len(second)
    # The next round comes too late for the cycle after: that cycle reads the driver itself.
    for at in (LEAD, LATE):
        clock.now_s = start_s + (1 + at) * world.cfg.loop.interval_s
        prefetcher.run_due(clock.now_s)
    clock.now_s += (1 - LATE + ROUND_MAX_AGE) * world.cfg.loop.interval_s + 0.01
    world.rest.calls.clear()
    with capture_logs() as events:
        third = collector.collect_snapshots(world.cfg, "wc", options=options)
    assert sorted(world.rest.calls) == ["executors", "jobs"] and third[0].taken_at == COLLECT_T0 + 40
    assert third[0].extensions["spark"]["driver_round_age_s"] is None
    assert round_fields(events) == [(None, 0.0, "stale")] * len(third)  # the monitor.snapshot event says why


def round_fields(events: list[dict[str, Any]]) -> list[tuple[object, object, object]]:
    """The driver round's figures in each `monitor.snapshot` event: its age, the wait for it, why none."""
    return [(e["driver_round_age_s"], e["driver_round_waited_s"], e["driver_round_missed"])
            for e in events if e["event"] == "monitor.snapshot"]


def test_a_cycle_run_out_of_turn_gets_no_round_asked_before_it_was_called():
    """An action ended (or a request came) and the daemon runs the app's cycle at once: a round kept,
    or one a pass in flight had asked for, predates it and would show the executors before."""
    rest = Counting([job(1, "SUCCEEDED", (1,))])
    prefetcher, clock, _start = passes(rest)
    prefetcher.outdate_rounds("wc")
    assert prefetcher.take_round("wc", rest.base_url, INTERVAL_S).missed == "outdated"

    def jobs_then_woken(app_id: str) -> list[RestJob]:  # the wake-up comes while the pass is under way
        clock.now_s += 0.01
        prefetcher.outdate_rounds("wc")
        return FakeRest.jobs(rest, app_id)

    rest.jobs = jobs_then_woken  # type: ignore[method-assign]
    prefetcher.register(rest, APP_ID, "wc", INTERVAL_S, since_s=T0, application=APPLICATION,
                        cycle_started_s=clock.now_s - LATE * INTERVAL_S)
    prefetcher.run_due(clock.now_s)  # its round is stored after the wake-up, asked before it
    assert rest.calls.count("executors") == 2
    assert prefetcher.take_round("wc", rest.base_url, INTERVAL_S).missed == "outdated"
    rest.jobs = lambda app_id: FakeRest.jobs(rest, app_id)  # type: ignore[method-assign]
    clock.now_s += 0.01
    prefetcher.register(rest, APP_ID, "wc", INTERVAL_S, since_s=T0, application=APPLICATION,
                        cycle_started_s=clock.now_s - LATE * INTERVAL_S)
    prefetcher.run_due(clock.now_s)  # a pass asked after the wake-up: its round is handed out
    assert prefetcher.take_round("wc", rest.base_url, INTERVAL_S).round is not None


def test_the_round_is_kept_before_the_pass_fetches_its_stages():
    """A pass's stage fetches on a loaded driver outlasted the tenth of the interval before the
    cycle, and the cycle found no round: it is kept as soon as the executors and jobs answer."""
    rest = Counting([job(1, "SUCCEEDED", (1, 2))])
    clock = Clock()
    prefetcher = manual(StageCache(), clock)
    start_s = clock.now_s
    taken_during_the_pass: list[TakenRound] = []

    def stage_attempts(app_id: str, stage_id: int) -> list[RestStage]:  # the cycle comes mid-pass
        clock.now_s = start_s + (1 - LATE) * INTERVAL_S
        taken_during_the_pass.append(prefetcher.take_round("wc", rest.base_url, INTERVAL_S))
        return FakeRest.stage_attempts(rest, app_id, stage_id)

    rest.stage_attempts = stage_attempts  # type: ignore[method-assign]
    prefetcher.register(rest, APP_ID, "wc", INTERVAL_S, since_s=T0, application=APPLICATION,
                        cycle_started_s=start_s - LATE * INTERVAL_S)  # the last pass is due now
    prefetcher.run_due(clock.now_s)
    first, second = taken_during_the_pass
    assert first.round is not None and first.round.jobs == rest.jobs_list and second.missed == "none"  # once


def test_the_pass_asks_for_the_executors_and_the_jobs_side_by_side():
    both = threading.Barrier(2, timeout=5)  # each request waits until the other is in flight

    class SideBySide(Counting):
        def executors(self, app_id: str) -> list[object]:
            both.wait()
            return super().executors(app_id)

        def jobs(self, app_id: str) -> list[RestJob]:
            both.wait()
            return super().jobs(app_id)

    rest = SideBySide([job(1, "SUCCEEDED", (1,))])
    clock = Clock()
    prefetcher = manual(StageCache(), clock)
    prefetcher.register(rest, APP_ID, "wc", INTERVAL_S, since_s=T0, application=APPLICATION,
                        cycle_started_s=clock.now_s - LATE * INTERVAL_S)  # the last pass is due now
    prefetcher.run_due(clock.now_s)
    assert not both.broken and prefetcher.take_round("wc", rest.base_url, INTERVAL_S).round is not None


def test_a_slow_pass_holds_back_neither_the_next_pass_nor_its_round():
    """A pass on a loaded driver (many stages) held the thread until it ended, and the next apps' last
    passes came after their cycles: each pass runs on a thread of its own, and a last pass reads its
    round even while every stage-fetching slot is taken."""
    clock, started = Clock(), Started()
    slow, fast = Counting([job(1, "SUCCEEDED", (1,))]), Counting([job(1, "SUCCEEDED", (2,))])
    round_asked = threading.Event()
    waited: list[bool] = []

    def stage_attempts(app_id: str, stage_id: int) -> list[RestStage]:  # holds the one slot
        waited.append(round_asked.wait(5))
        return FakeRest.stage_attempts(slow, app_id, stage_id)

    def executors(app_id: str) -> list[object]:
        round_asked.set()
        return Counting.executors(fast, app_id)

    slow.stage_attempts = stage_attempts  # type: ignore[method-assign]
    fast.executors = executors  # type: ignore[method-assign]
    prefetcher = manual(StageCache(), clock, start_pass=started, pass_concurrency=1)
    prefetcher.register(slow, "app-slow", "slow", INTERVAL_S, since_s=T0,
                        cycle_started_s=clock.now_s - LEAD * INTERVAL_S)
    prefetcher.run_due(clock.now_s)  # the slow app's first pass: it waits on the fast app's round
    clock.now_s += 1.0
    prefetcher.register(fast, "app-fast", "fast", INTERVAL_S, since_s=T0, application=APPLICATION,
                        cycle_started_s=clock.now_s - LATE * INTERVAL_S)
    prefetcher.run_due(clock.now_s)  # the fast app's last pass, a second later
    started.join()
    assert waited == [True] and slow.stage_calls() == [1] and fast.stage_calls() == [2]
    clock.now_s += (1 - LATE) * INTERVAL_S
    assert prefetcher.take_round("fast", fast.base_url, INTERVAL_S).round is not None


def test_a_last_pass_while_the_apps_first_is_under_way_reads_its_round_and_no_stage_twice():
    rest = Counting([job(1, "SUCCEEDED", (1, 2))])
    entered, release = threading.Event(), threading.Event()
    asked: list[int] = []

    def stage_attempts(app_id: str, stage_id: int) -> list[RestStage]:
        asked.append(stage_id)
        if stage_id == 2:  # the first pass's first stage (newest first): stuck on a loaded driver
            entered.set()
            release.wait(5)
        return FakeRest.stage_attempts(rest, app_id, stage_id)

    rest.stage_attempts = stage_attempts  # type: ignore[method-assign]
    clock, started = Clock(), Started()
    prefetcher = manual(StageCache(), clock, start_pass=started)
    start_s = clock.now_s
    prefetcher.register(rest, APP_ID, "wc", INTERVAL_S, since_s=T0, application=APPLICATION)
    clock.now_s = start_s + LEAD * INTERVAL_S
    prefetcher.run_due(clock.now_s)
    assert entered.wait(5)
    clock.now_s = start_s + LATE * INTERVAL_S
    prefetcher.run_due(clock.now_s)
    started.threads[1].join(5)  # the last pass: its round, no stage (the first pass's to fetch)
    assert rest.calls.count("executors") == 1 and asked == [2]
    clock.now_s = start_s + INTERVAL_S
    assert prefetcher.take_round("wc", rest.base_url, INTERVAL_S).round is not None
    release.set()
    started.join()
    assert asked == [2, 1]


class Asking(Counting):
    """A driver that answers the round's executors request only once released."""

    def __init__(self, jobs: list[RestJob]) -> None:
        super().__init__(jobs)
        self.asked, self.release = threading.Event(), threading.Event()
        self.fail = False

    def executors(self, app_id: str) -> list[object]:
        self.asked.set()
        assert self.release.wait(5)
        if self.fail:
            raise SparkRestError("http://driver/executors", "timed out", unreachable=True)
        return super().executors(app_id)


def asking(rest: Asking, **kwargs: Any) -> tuple[StagePrefetcher, Clock, Started]:
    """A prefetcher whose last pass is asking `rest` for the round, at the clock's time (monotonic)."""
    clock, started = Clock(), Started()
    prefetcher = manual(StageCache(), clock, start_pass=started, **kwargs)
    prefetcher._clock = lambda: ROUND_TAKEN_AT  # type: ignore[attr-defined]
    prefetcher.register(rest, APP_ID, "wc", INTERVAL_S, since_s=T0, application=APPLICATION,
                        cycle_started_s=clock.now_s - LATE * INTERVAL_S)
    prefetcher.run_due(clock.now_s)
    assert rest.asked.wait(5)
    return prefetcher, clock, started


def test_a_cycle_waits_for_the_round_a_pass_is_asking_for_rather_than_ask_the_driver_again():
    """The last pass on a loaded driver had asked, not yet heard back, and the cycle asked the same
    driver the same two requests: it waits for the pass's answer instead, a round of the same age."""
    rest = Asking([job(1, "SUCCEEDED", (1,))])
    waiting = threading.Event()

    def wait_round(ready: threading.Condition, timeout_s: float) -> bool:
        waiting.set()
        return ready.wait(timeout_s)

    prefetcher, clock, started = asking(rest, wait_round=wait_round)
    clock.now_s += (1 - LATE) * INTERVAL_S  # the cycle, a tenth of the interval after the pass asked
    taken: list[TakenRound] = []
    cycle = threading.Thread(target=lambda: taken.append(prefetcher.take_round("wc", rest.base_url, INTERVAL_S)))
    cycle.start()
    assert waiting.wait(5)  # the cycle waits on the ask
    rest.release.set()
    cycle.join(5)
    started.join()
    (got,) = taken
    assert got.round is not None and got.round.taken_at == ROUND_TAKEN_AT and got.missed is None
    assert got.age_s == pytest.approx((1 - LATE) * INTERVAL_S) and rest.calls.count("executors") == 1


def test_the_wait_ends_at_its_bound_and_never_past_the_age_a_round_is_handed_out_at():
    rest = Asking([job(1, "SUCCEEDED", (1,))])
    waits: list[float] = []

    def time_passes(ready: threading.Condition, timeout_s: float) -> None:  # nothing answers meanwhile
        waits.append(timeout_s)
        clock.now_s += timeout_s

    prefetcher, clock, started = asking(rest, wait_round=time_passes)
    ask_s = clock.now_s
    clock.now_s = ask_s + (1 - LATE) * INTERVAL_S
    got = prefetcher.take_round("wc", rest.base_url, INTERVAL_S)
    assert got == TakenRound(None, None, pytest.approx(ROUND_WAIT * INTERVAL_S), "asking")
    assert waits == [pytest.approx(ROUND_WAIT * INTERVAL_S)]
    clock.now_s = ask_s + 1.5  # a cycle 1.5 s after the ask: a round older than 2 s is not handed out
    got = prefetcher.take_round("wc", rest.base_url, INTERVAL_S)
    assert got.missed == "asking" and got.waited_s == pytest.approx(ROUND_MAX_AGE * INTERVAL_S - 1.5)
    rest.release.set()
    started.join()


def test_no_wait_for_an_ask_made_before_a_cycle_out_of_turn_or_of_another_driver_and_a_failed_ask_ends_it():
    rest = Asking([job(1, "SUCCEEDED", (1,))])
    waits: list[float] = []
    prefetcher, clock, started = asking(rest, wait_round=lambda ready, timeout_s: waits.append(timeout_s))
    assert prefetcher.take_round("wc", "http://10.0.0.9:4040/api/v1", INTERVAL_S).missed == "other_driver"
    clock.now_s += 0.01
    prefetcher.outdate_rounds("wc")  # an action ended while the pass was asking
    assert prefetcher.take_round("wc", rest.base_url, INTERVAL_S).missed == "outdated" and waits == []
    rest.release.set()
    started.join()
    rest.fail, rest.asked, rest.release = True, threading.Event(), threading.Event()
    prefetcher, clock, started = asking(rest)  # the real wait, woken when the ask fails
    taken: list[TakenRound] = []
    cycle = threading.Thread(target=lambda: taken.append(prefetcher.take_round("wc", rest.base_url, INTERVAL_S)))
    cycle.start()
    rest.release.set()
    cycle.join(5)
    started.join()
    assert [t.missed for t in taken] == ["none"]


def test_stop_ends_a_cycles_wait_on_an_ask():
    rest = Asking([job(1, "SUCCEEDED", (1,))])
    prefetcher, _clock, started = asking(rest)
    taken: list[TakenRound] = []
    cycle = threading.Thread(target=lambda: taken.append(prefetcher.take_round("wc", rest.base_url, INTERVAL_S)))
    cycle.start()
    prefetcher.stop()
    cycle.join(5)
    waiting_after_stop = cycle.is_alive()
    rest.release.set()
    started.join()
    cycle.join(5)
    assert not waiting_after_stop and [t.missed for t in taken] == ["none"]
