"""Finished stages are fetched off the cycle, before it asks: the cycle then finds them kept, and a
prefetch that fails or hangs never touches a cycle (issue 33)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from unittest.mock import ANY

import pytest

from sparkscale.monitors import collector, driver_round
from sparkscale.monitors.spark_rest import RestApplication, RestJob, RestStage, SparkRestError
from sparkscale.monitors.stage_cache import StageCache
from sparkscale.monitors.stage_prefetch import (
    FORGET_AFTER_INTERVALS,
    IDLE_WAIT_S,
    LATE,
    LEAD,
    StagePrefetcher,
    finished_stage_ids,
)
from tests.unit.test_collector import T0 as COLLECT_T0
from tests.unit.test_collector import world  # noqa: F401  (the collector's handmade app, as a fixture)

APP_ID = "app-20260101000000-0001"
INTERVAL_S = 10.0
FIRST_PASS_S = LEAD * INTERVAL_S  # a registered app's first pass
T0 = 1_800_000_000.0  # epoch seconds: the window's start
TAKEN_AT = COLLECT_T0 + 40  # when the collector's handmade app is observed (test_collector.world)


def job(job_id: int, status: str, stage_ids: tuple[int, ...], completed_s: float | None = None) -> RestJob:
    done = None if status == "RUNNING" else (T0 + job_id if completed_s is None else completed_s)
    return RestJob(job_id, status, None, None, stage_ids, T0, done)


class FakeRest:
    """A driver whose jobs are `jobs`, each stage finished unless in `running`; counts the requests."""

    def __init__(self, jobs: list[RestJob], running: frozenset[int] = frozenset()) -> None:
        self.base_url = "http://127.0.0.1:4040/api/v1"
        self.jobs_list = jobs
        self.running = running
        self.calls: list[str] = []
        self._lock = threading.Lock()

    def application(self, name: str) -> RestApplication:
        return RestApplication(APP_ID, name)

    def executors(self, app_id: str) -> list[object]:
        return []

    def jobs(self, app_id: str) -> list[RestJob]:
        with self._lock:
            self.calls.append("jobs")
        return list(self.jobs_list)

    def stage_attempts(self, app_id: str, stage_id: int) -> list[RestStage]:
        with self._lock:
            self.calls.append(f"stage {stage_id}")
        status = "ACTIVE" if stage_id in self.running else "COMPLETE"
        return [RestStage(stage_id, 0, status, f"s{stage_id}", 1, T0, None if status == "ACTIVE" else T0 + 1, ())]

    def stage_calls(self) -> list[int]:
        with self._lock:
            return [int(c.split()[1]) for c in self.calls if c.startswith("stage ")]


class Clock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


def run_now(target: Callable[[], object]) -> None:
    """A pass started at once on the caller's thread: `run_due` returns when it is over."""
    target()


def manual(cache: StageCache, clock: Clock, **kwargs: Any) -> StagePrefetcher:
    """A running prefetcher with no thread: the test runs its passes (`run_due`) itself, each at once
    (unless `start_pass` says otherwise)."""
    kwargs.setdefault("start_pass", run_now)
    prefetcher = StagePrefetcher(cache, monotonic=clock, spawn=lambda target: None, **kwargs)
    prefetcher.start()
    return prefetcher


def cycle_fetch(rest: FakeRest, stage_ids: list[int], cache: StageCache) -> int:
    """The requests a cycle's `fetch_stages` makes for `stage_ids`."""
    before = len(rest.stage_calls())
    with ThreadPoolExecutor(4) as pool:
        driver_round.fetch_stages(rest, APP_ID, stage_ids, pool, cache=cache)
    return len(rest.stage_calls()) - before


def test_a_pass_fetches_the_finished_jobs_stages_not_kept_and_the_cycle_then_asks_for_none():
    cache, clock = StageCache(), Clock()
    before_window = job(0, "SUCCEEDED", (0,), completed_s=T0 - 1)
    rest = FakeRest([job(1, "SUCCEEDED", (1, 2)), job(2, "FAILED", (3,)), job(3, "SUCCEEDED", (4, 5)),
                     job(4, "RUNNING", (6, 7)), before_window])
    cache.get(APP_ID, 2, lambda: rest.stage_attempts(APP_ID, 2))  # kept by the last cycle
    rest.calls.clear()
    prefetcher = manual(cache, clock)
    prefetcher.register(rest, APP_ID, "wc", INTERVAL_S, since_s=T0)
    assert prefetcher.run_due(clock.now_s + LEAD * INTERVAL_S - 0.1) == pytest.approx(LEAD * INTERVAL_S)  # not due
    assert rest.calls == []
    clock.now_s += LEAD * INTERVAL_S  # LEAD of the interval after the registration
    assert prefetcher.run_due(clock.now_s) == pytest.approx((LATE - LEAD) * INTERVAL_S)  # the cycle's second
    assert rest.calls[0] == "jobs" and rest.stage_calls() == [5, 4, 3, 1]  # newest first; 2 kept, 6 and 7 running
    assert cycle_fetch(rest, [1, 2, 3, 4, 5], cache) == 0
    assert cycle_fetch(rest, [6, 7], cache) == 2  # an unfinished job's stages: the cycle's own fetch


def test_a_second_pass_closer_to_the_cycle_fetches_what_finished_after_the_first():
    """The newest batch's stages, finished after the first pass, were the 10-app cycles' p99."""
    cache, clock = StageCache(), Clock()
    rest = FakeRest([job(1, "SUCCEEDED", (1, 2))])
    prefetcher = manual(cache, clock)
    start_s = clock.now_s
    prefetcher.register(rest, APP_ID, "wc", INTERVAL_S, since_s=T0)
    prefetcher.run_due(start_s + LEAD * INTERVAL_S)
    rest.jobs_list = [*rest.jobs_list, job(2, "SUCCEEDED", (3, 4))]  # finished between the two passes
    clock.now_s = start_s + LATE * INTERVAL_S
    assert prefetcher.run_due(clock.now_s) == pytest.approx(INTERVAL_S)
    assert rest.stage_calls() == [2, 1, 4, 3] and cycle_fetch(rest, [1, 2, 3, 4], cache) == 0
    # Not registered again (the cycle failed): one pass an interval after the last, as before.
    prefetcher.run_due(start_s + (1 + LATE) * INTERVAL_S - 0.1)
    assert rest.calls.count("jobs") == 2
    prefetcher.run_due(start_s + (1 + LATE) * INTERVAL_S)
    assert rest.calls.count("jobs") == 3
    # A first pass that runs after the second's time (a slow collect) leaves no second one.
    late = manual(StageCache(), clock)
    late.register(rest, APP_ID, "wc", INTERVAL_S, since_s=T0, cycle_started_s=clock.now_s - 9.5)
    assert late.registered()["wc"].then_at_s is None


def test_a_pass_asks_for_so_many_stages_at_most_and_a_kept_one_never_again():
    cache, clock = StageCache(), Clock()
    rest = FakeRest([job(j, "SUCCEEDED", (2 * j, 2 * j + 1)) for j in range(1, 6)])
    prefetcher = manual(cache, clock, max_stages_per_pass=4)
    prefetcher.register(rest, APP_ID, "wc", INTERVAL_S, since_s=T0)
    prefetcher.run_due(clock.now_s + LEAD * INTERVAL_S)
    assert rest.stage_calls() == [11, 10, 9, 8]  # the newest jobs' first
    prefetcher.run_due(clock.now_s + LEAD * INTERVAL_S + INTERVAL_S)
    assert rest.stage_calls() == [11, 10, 9, 8, 7, 6, 5, 4]  # the next pass goes on where it stopped
    assert rest.calls.count("jobs") == 2


def test_the_cycle_makes_a_third_of_its_stage_requests_with_the_prefetcher():
    """Scenario for the report: 10 finished batch jobs of 3 stages in a window, 7 of them finished
    before the pass (at 0.7 of the interval), 3 between the pass and the cycle."""
    jobs = [job(j, "SUCCEEDED", (3 * j, 3 * j + 1, 3 * j + 2)) for j in range(1, 11)]
    window = [s for j in jobs for s in j.stage_ids]
    without = FakeRest(jobs)
    assert cycle_fetch(without, window, StageCache()) == 30
    cache, clock, rest = StageCache(), Clock(), FakeRest(jobs[:7])
    prefetcher = manual(cache, clock)
    prefetcher.register(rest, APP_ID, "wc", INTERVAL_S, since_s=T0)
    prefetcher.run_due(clock.now_s + FIRST_PASS_S)
    assert len(rest.stage_calls()) == 21
    rest.jobs_list = jobs  # three more jobs finish before the cycle
    assert cycle_fetch(rest, window, cache) == 9


def test_a_failing_driver_ends_the_pass_and_the_next_one_tries_again():
    cache, clock = StageCache(), Clock()
    rest = FakeRest([job(1, "SUCCEEDED", (1, 2, 3))])
    broken = {"jobs": True, "stage": 2}

    def jobs(app_id: str) -> list[RestJob]:
        if broken["jobs"]:
            raise SparkRestError("http://driver/jobs", "timed out", unreachable=True)
        return FakeRest.jobs(rest, app_id)

    def stage_attempts(app_id: str, stage_id: int) -> list[RestStage]:
        if stage_id == broken["stage"]:
            raise ValueError("a bad answer")
        return FakeRest.stage_attempts(rest, app_id, stage_id)

    rest.jobs, rest.stage_attempts = jobs, stage_attempts  # type: ignore[method-assign]
    prefetcher = manual(cache, clock)
    prefetcher.register(rest, APP_ID, "wc", INTERVAL_S, since_s=T0)
    prefetcher.run_due(clock.now_s + FIRST_PASS_S)  # raises nothing
    broken["jobs"] = False
    prefetcher.run_due(clock.now_s + FIRST_PASS_S + INTERVAL_S)  # stage 3 kept, then stage 2 fails: the pass ends
    assert rest.stage_calls() == [3]
    broken["stage"] = -1
    prefetcher.run_due(clock.now_s + FIRST_PASS_S + 2 * INTERVAL_S)
    assert rest.stage_calls() == [3, 2, 1]  # 3 is kept: not asked again


def test_an_app_not_registered_again_within_three_intervals_is_forgotten():
    cache, clock = StageCache(), Clock()
    rest = FakeRest([job(1, "SUCCEEDED", (1,))], running=frozenset({1}))  # never kept: asked each pass
    prefetcher = manual(cache, clock)
    prefetcher.register(rest, APP_ID, "wc", INTERVAL_S, since_s=T0)
    start_s = clock.now_s
    for at_s in (FIRST_PASS_S, FIRST_PASS_S + INTERVAL_S, FIRST_PASS_S + 2 * INTERVAL_S):
        prefetcher.run_due(start_s + at_s)
    assert rest.calls.count("jobs") == 3 and "wc" in prefetcher.registered()
    assert prefetcher.run_due(start_s + FORGET_AFTER_INTERVALS * INTERVAL_S) == IDLE_WAIT_S
    assert prefetcher.registered() == {} and rest.calls.count("jobs") == 3
    clock.now_s = start_s + 29.0
    prefetcher.register(rest, APP_ID, "wc", INTERVAL_S, since_s=T0)  # registered again in time: kept on
    prefetcher.run_due(start_s + 29.0 + FIRST_PASS_S)
    prefetcher.run_due(start_s + 58.9)
    assert "wc" in prefetcher.registered() and rest.calls.count("jobs") == 5


def test_not_running_a_registration_does_nothing():
    cache, clock = StageCache(), Clock()
    rest = FakeRest([job(1, "SUCCEEDED", (1,))])
    prefetcher = StagePrefetcher(cache, monotonic=clock, spawn=lambda target: None)
    prefetcher.register(rest, APP_ID, "wc", INTERVAL_S, since_s=T0)
    assert prefetcher.registered() == {} and prefetcher.run_due(clock.now_s + FIRST_PASS_S) == IDLE_WAIT_S
    prefetcher.start()
    prefetcher.stop()
    prefetcher.register(rest, APP_ID, "wc", INTERVAL_S, since_s=T0)
    assert prefetcher.registered() == {} and rest.calls == []


def test_the_first_pass_is_timed_from_the_cycles_start_and_comes_at_once_after_a_slow_collect():
    """The next cycle comes an interval after this one began: a pass timed from the end of a slow
    collect came after it (issue 33)."""
    cache, clock = StageCache(), Clock()
    prefetcher = manual(cache, clock)
    began_s = clock.now_s - 2.0  # the collect took 2 s
    prefetcher.register(FakeRest([]), APP_ID, "wc", INTERVAL_S, since_s=T0, cycle_started_s=began_s)
    assert prefetcher.registered()["wc"].due_at_s == pytest.approx(began_s + FIRST_PASS_S)
    prefetcher.register(FakeRest([]), APP_ID, "slow", INTERVAL_S, since_s=T0, cycle_started_s=clock.now_s - 9.0)
    assert prefetcher.registered()["slow"].due_at_s == clock.now_s  # outlasted LEAD: at once


class Started:
    """Starts each pass on a thread of its own, as the daemon does, and joins them for the test."""

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []

    def __call__(self, target: Callable[[], object]) -> threading.Thread:
        thread = threading.Thread(target=target, daemon=True)
        self.threads.append(thread)
        thread.start()
        return thread

    def join(self) -> None:
        for thread in self.threads:
            thread.join(10)
        assert not any(thread.is_alive() for thread in self.threads)


def test_passes_due_together_run_side_by_side():
    """One thread for 10 apps ran their passes one after another, later than due, on loaded drivers."""
    both = threading.Barrier(2, timeout=5)  # each app's jobs request waits until the other's is in flight

    class Waiting(FakeRest):
        def jobs(self, app_id: str) -> list[RestJob]:
            both.wait()
            return super().jobs(app_id)

    cache, clock, started = StageCache(), Clock(), Started()
    rests = {name: Waiting([job(1, "SUCCEEDED", (1,))]) for name in ("a", "b")}
    prefetcher = manual(cache, clock, start_pass=started)
    for name, rest in rests.items():
        prefetcher.register(rest, f"{APP_ID}-{name}", name, INTERVAL_S, since_s=T0)
    prefetcher.run_due(clock.now_s + FIRST_PASS_S)
    started.join()
    assert not both.broken and all(rest.stage_calls() == [1] for rest in rests.values())


def test_a_collect_registers_and_the_next_collect_finds_its_stages_kept(world, monkeypatch):  # noqa: F811
    clock = Clock()
    monkeypatch.setattr(driver_round, "STAGES", StageCache())
    options = collector.CollectOptions(window_s=30)
    first = collector.collect_snapshots(world.cfg, "wc", options=options)[0].extensions["spark"]
    assert not collector.PREFETCH.running and collector.PREFETCH.registered() == {}  # not started: no-op
    assert first["rest_requests"] > 3
    window_stages = [c for c in world.rest.calls if c.startswith("stage ")]
    prefetcher = manual(StageCache(), clock)  # its cache will hold what its pass fetched, nothing else
    monkeypatch.setattr(driver_round, "STAGES", StageCache())  # the second collect fetches every stage again
    monkeypatch.setattr(collector, "PREFETCH", prefetcher)
    assert collector.collect_snapshots(world.cfg, "wc", options=options)[0].extensions["spark"] == {
        **first, "rest_requests": 2 + len(window_stages), "collect_parts_s": ANY, "rest_cpu_s": ANY}
    (entry,) = prefetcher.registered().values()
    assert prefetcher.registered().keys() == {"wc"} and entry.rest is world.rest and entry.app_id == first["app_id"]
    assert entry.interval_s == world.cfg.loop.interval_s and entry.since_s == TAKEN_AT - 30
    world.rest.calls.clear()
    prefetcher.run_due(clock.now_s + LEAD * world.cfg.loop.interval_s)
    monkeypatch.setattr(driver_round, "STAGES", prefetcher.cache)
    assert sorted(c for c in world.rest.calls if c != "jobs") == sorted(window_stages)
    third = collector.collect_snapshots(world.cfg, "wc", options=options)[0].extensions["spark"]
    assert third["rest_requests"] == 2  # the kept application id's executors and jobs; no stage asked


def test_a_stuck_pass_never_delays_a_cycle_fetching_kept_stages():
    cache, clock = StageCache(), Clock()
    rest = FakeRest([job(1, "SUCCEEDED", (1, 2, 3)), job(2, "SUCCEEDED", (4,))])
    entered, release = threading.Event(), threading.Event()

    def stage_attempts(app_id: str, stage_id: int) -> list[RestStage]:
        if stage_id == 4:
            entered.set()
            release.wait(10)
        return FakeRest.stage_attempts(rest, app_id, stage_id)

    for stage_id in (1, 2, 3):
        cache.get(APP_ID, stage_id, lambda s=stage_id: rest.stage_attempts(APP_ID, s))
    rest.stage_attempts = stage_attempts  # type: ignore[method-assign]
    prefetcher = manual(cache, clock)
    prefetcher.register(rest, APP_ID, "wc", INTERVAL_S, since_s=T0)
    passing = threading.Thread(target=prefetcher.run_due, args=(clock.now_s + FIRST_PASS_S,), daemon=True)
    passing.start()
    try:
        assert entered.wait(5)  # the pass is stuck on stage 4
        cycle = FakeRest([])
        started = time.monotonic()
        assert cycle_fetch(cycle, [1, 2, 3], cache) == 0
        assert time.monotonic() - started < 2.0 and passing.is_alive()
    finally:
        release.set()
        passing.join(5)


def test_the_thread_outlives_a_failing_driver_and_serves_the_next_app():
    cache = StageCache()
    prefetcher = StagePrefetcher(cache)  # its own thread, the real clock
    failed, served = threading.Event(), threading.Event()
    bad, good = FakeRest([]), FakeRest([job(1, "SUCCEEDED", (1,))])

    def jobs(app_id: str) -> list[RestJob]:
        failed.set()
        raise SparkRestError("http://driver/jobs", "connection refused", unreachable=True)

    def stage_attempts(app_id: str, stage_id: int) -> list[RestStage]:
        served.set()
        return FakeRest.stage_attempts(good, app_id, stage_id)

    bad.jobs = jobs  # type: ignore[method-assign]
    good.stage_attempts = stage_attempts  # type: ignore[method-assign]
    prefetcher.start()
    try:
        prefetcher.register(bad, "app-bad", "bad", 0.05, since_s=T0)
        assert failed.wait(5)
        prefetcher.register(good, APP_ID, "good", 0.05, since_s=T0)
        assert served.wait(5)
        assert prefetcher.running and prefetcher.thread is not None and prefetcher.thread.is_alive()
        assert cache.get(APP_ID, 1, lambda: [])[1] is False
    finally:
        prefetcher.stop()
        assert prefetcher.thread is not None
        prefetcher.thread.join(5)
    assert not prefetcher.thread.is_alive() and not prefetcher.running


def test_finished_stage_ids_newest_first_once_each():
    jobs = [job(1, "SUCCEEDED", (1, 2)), job(3, "SUCCEEDED", (2, 5)), job(2, "RUNNING", (3,)),
            job(4, "UNKNOWN", (9,)), job(5, "FAILED", (6,), completed_s=T0)]
    assert finished_stage_ids(jobs, since_s=T0) == [5, 2, 1]  # job 5 completed at the window's start: out
