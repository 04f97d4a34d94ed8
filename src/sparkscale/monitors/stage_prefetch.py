"""Finished stages fetched off the cycle, shortly before it asks for them (issue 33: at 10 apps the
cycle's p99 was its fetch of the window's new stages, docs/results/daemon_cycle_interval10.md).

A stage of a finished job never changes and `stage_cache.STAGES` keeps it, so fetching it earlier
changes no figure: the cycle still reads exactly its window's stages, most of them now kept. After
a successful collect the collector registers the app (`monitors/collector.py`); at `LEAD` of the
app's interval after its cycle began, and again at `LATE` of it, a pass asks the driver for its
jobs and fetches, one request at a time and at most `MAX_STAGES_PER_PASS` per pass (newest
first), the stages of the jobs that finished since the registered window began and are not kept.
One daemon thread starts each pass due on a thread of its own and never waits for it (a pass slow
on a loaded driver held back the passes due after it, and apps' last passes came after their
cycles); at most `PASS_CONCURRENCY` passes fetch at once, and a pass that finds another of its app
under way leaves the stages to it. Every fetch goes through the cache's `get` (a kept stage is
never asked again), whose lock is held for dictionary work only: a pass stuck on a driver never
delays a cycle. An app not registered again within `FORGET_AFTER_INTERVALS` of its interval is
forgotten (its driver may be gone). The daemon starts and stops the process's `PREFETCH`
(daemon/service.py); where it is not running (a one-shot command) registering does nothing.

The driver round too (issue 33: on loaded drivers it was the rest of the 10-app p99,
docs/results/daemon_cycle_late_pass.md): the last pass before an app's next cycle asks for its
executors and its jobs side by side, outside the `PASS_CONCURRENCY` bound, and keeps that round as
soon as they answer, before its stage fetches; the cycle takes it (`take_round`, once) instead of
asking the driver, when it is at most `ROUND_MAX_AGE` of the interval old. While that pass is still
asking, the cycle waits for its answer (at most `ROUND_WAIT` of the interval, never past
`ROUND_MAX_AGE` of the ask) rather than send the same requests to the same loaded driver. The
cycle's window then ends when that pass asked (every figure is cut at the round's `taken_at`),
about a tenth of the interval earlier (at most a fifth); what finished since is the next cycle's.
Without a fresh round (an app's first cycle, a failed or late pass, an ask that outlasts the wait,
a cycle run out of turn: `outdate_rounds`, whose cycle never waits on an ask made before it) the
cycle reads the driver itself, as before; `take_round` says why (`Missed`: the `monitor.snapshot`
event's `driver_round_missed`).
"""

from __future__ import annotations

import functools
import math
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Literal

import structlog

from sparkscale.monitors.driver_round import DriverRest, DriverRound, executors_and_jobs
from sparkscale.monitors.spark_rest import RestApplication, RestJob
from sparkscale.monitors.stage_cache import STAGES, StageCache, switched_on

log = structlog.get_logger(__name__)

FINISHED_JOBS = frozenset({"SUCCEEDED", "FAILED"})
# The first pass at this fraction of the app's interval after its cycle began: what finishes later
# is the second pass's (LATE) or the cycle's to fetch.
LEAD = 0.7
# A second, shorter pass closer to the cycle: the stages finished after the first pass were the 10-app
# cycles' p99 (about 1 s for the newest batch's stages on a loaded driver: docs/results/daemon_cycle_primed.md).
LATE = 0.9
MAX_STAGES_PER_PASS = 64  # stage requests one pass makes at most
# Passes fetching jobs and stages at once, at most this many: one thread for 10 apps on loaded drivers
# ran its passes one after another, later than due, and the cycles fetched what they had not (issue 33).
# A last pass's round (executors and jobs) is read outside this bound: it never queues behind stages.
PASS_CONCURRENCY = 4
FORGET_AFTER_INTERVALS = 3
# A kept driver round is taken by the cycle while at most this fraction of the interval old: the
# last pass runs at LATE, a tenth of the interval before the cycle; a round older than this is one
# of a pass that ran late, or of a cycle that came late, and the cycle asks the driver itself.
ROUND_MAX_AGE = 0.2
# A cycle whose round a pass is asking the driver for waits for it, at most this fraction of the
# interval (and never past ROUND_MAX_AGE of the ask), rather than ask the same loaded driver again:
# the 10-app run's in-line rounds took 0.32 s at the p50 and 0.73 s at the p90 at a 10 s interval
# (docs/results/daemon_cycle_decide_parts.md), and an answer already asked for comes before theirs.
ROUND_WAIT = 0.1
IDLE_WAIT_S = 60.0  # the thread's wait with nothing due (a registration or `stop` wakes it sooner)

Spawn = Callable[[Callable[[], object]], threading.Thread | None]
WaitRound = Callable[[threading.Condition, float], object]  # Condition.wait; tests move their clock instead
# Why a cycle got no round: none kept nor asked for (the app's first cycle, a failed or late pass),
# still being asked when the wait ended, asked of another driver, asked before the cycle was
# called out of turn (`outdate_rounds`), or too old.
Missed = Literal["none", "asking", "other_driver", "outdated", "stale"]


def daemon_thread(target: Callable[[], object], name: str = "sparkscale-stage-prefetch") -> threading.Thread:
    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    return thread


pass_thread: Spawn = functools.partial(daemon_thread, name="sparkscale-prefetch-pass")  # one per pass


@dataclass(frozen=True)
class Registered:
    """An app to prefetch for: its driver, as the last successful collect read it."""

    rest: DriverRest
    app_id: str
    interval_s: float
    since_s: float  # epoch seconds: jobs completed before this are not looked at (the window's start)
    registered_at_s: float  # monotonic
    due_at_s: float  # monotonic: the next pass
    then_at_s: float | None = None  # monotonic: the cycle's second pass, after `due_at_s` (None: none)
    application: RestApplication | None = None  # the driver's application (None: keep no round)


@dataclass(frozen=True)
class RoundAsk:
    """A pass asking `base_url` for the app's next round since `asked_at_s` (monotonic)."""

    base_url: str
    asked_at_s: float


@dataclass(frozen=True)
class KeptRound:
    """A driver round a pass read for the app's next cycle: from `base_url`, asked at `asked_at_s` (monotonic)."""

    round: DriverRound
    base_url: str
    asked_at_s: float


@dataclass(frozen=True)
class TakenRound:
    """What `take_round` gives a cycle: the round and its age in seconds, or None and why (`missed`:
    the cycle reads the driver itself); and how long it waited for a pass asking for it."""

    round: DriverRound | None
    age_s: float | None
    waited_s: float
    missed: Missed | None


def finished_stage_ids(jobs: Sequence[RestJob], since_s: float) -> list[int]:
    """The stages of the jobs finished after `since_s`, newest job first (a job's stages newest first)."""
    finished = [j for j in jobs if j.status in FINISHED_JOBS and j.completed_at_s is not None
                and j.completed_at_s > since_s]
    finished.sort(key=lambda j: (j.completed_at_s or 0.0, j.job_id), reverse=True)
    return list(dict.fromkeys(s for j in finished for s in sorted(j.stage_ids, reverse=True)))


class StagePrefetcher:
    """A background thread starting the registered apps' passes, each on a thread of its own, that
    fill `cache` with their finished stages and keep the driver round of each app's next cycle."""

    def __init__(self, cache: StageCache | None = None, monotonic: Callable[[], float] = time.monotonic,
                 spawn: Spawn = daemon_thread, lead: float = LEAD, late: float | None = LATE,
                 max_stages_per_pass: int = MAX_STAGES_PER_PASS, pass_concurrency: int = PASS_CONCURRENCY,
                 keep_rounds: bool | None = None, clock: Callable[[], float] = time.time,
                 start_pass: Spawn = pass_thread, wait_round: WaitRound = threading.Condition.wait) -> None:
        self.cache = STAGES if cache is None else cache
        self._monotonic = monotonic
        self._clock = clock  # epoch seconds: a kept round's `taken_at`
        # SPARKSCALE_PREFETCH_ROUND=off: every cycle reads its driver round itself (benchmarks/daemon_cycle.py).
        self.keep_rounds = switched_on("SPARKSCALE_PREFETCH_ROUND") if keep_rounds is None else keep_rounds
        self.round_max_age = ROUND_MAX_AGE
        self.round_wait = ROUND_WAIT
        self._wait_round = wait_round
        self._spawn = spawn  # tests pass one that starts nothing and drive `run_due` themselves
        self._start_pass = start_pass  # each pass on a thread of its own (tests: run at once)
        self.lead = lead
        self.late = late
        self.max_stages_per_pass = max_stages_per_pass
        self.pass_concurrency = max(1, pass_concurrency)
        self._fetching = threading.BoundedSemaphore(self.pass_concurrency)  # passes fetching jobs and stages
        self._lock = threading.Lock()  # held for dictionary work only, never across a request
        self._apps: dict[str, Registered] = {}
        self._rounds: dict[str, KeptRound] = {}
        self._asking: dict[str, RoundAsk] = {}  # app -> the round a pass is asking for
        self._ready = threading.Condition(self._lock)  # notified when an ask ends (a round kept or not)
        self._stale_before: dict[str, float] = {}  # app -> monotonic: a round asked earlier is not handed out
        self._passing: dict[str, int] = {}  # app -> its passes under way
        self._wake = threading.Event()
        self._stop: threading.Event | None = None
        self.thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._stop is not None and not self._stop.is_set()

    def start(self) -> None:
        """Start prefetching (again after `stop`); starting a running prefetcher does nothing."""
        if self.running:
            return
        stop, wake = threading.Event(), threading.Event()  # its own: a stopped thread still in a request
        self._stop, self._wake = stop, wake  # ends after it, and never takes a newer thread's wake-up
        self.thread = self._spawn(lambda: self._run(stop, wake))

    def stop(self) -> None:
        """Forget every app and ask the thread to end; a pass under way ends on its own thread, and
        the round it reads is not kept."""
        with self._lock:  # a registration under way lands before it (and is cleared) or finds it stopped
            if self._stop is not None:
                self._stop.set()
            self._apps.clear()
            self._rounds.clear()
            self._stale_before.clear()
            self._asking.clear()
            self._ready.notify_all()  # a cycle waiting on an ask reads the driver itself
        self._wake.set()

    def register(self, rest: DriverRest, app_id: str, app_name: str, interval_s: float, since_s: float,
                 cycle_started_s: float | None = None, application: RestApplication | None = None) -> None:
        """After a successful collect: a pass at `lead` of `interval_s` after the cycle began
        (`cycle_started_s`, monotonic; default now), at once if the collect outlasted that, a second
        at `late` of it (if still ahead), and one per interval after them until the app is
        forgotten. The next cycle comes an interval after this one began, not after its collect
        ended: a slow collect timed from its end put the pass after the next cycle (the apps' second
        cycles fetched 1-2.5 s of stages, issue 33). With `application`, the last pass before the next
        cycle keeps a driver round for it (module docstring). Does nothing while the prefetcher is not
        running."""
        now_s = self._monotonic()
        began_s = now_s if cycle_started_s is None else min(cycle_started_s, now_s)
        first_s = max(now_s, began_s + self.lead * interval_s)
        then_s = None if self.late is None else began_s + self.late * interval_s
        entry = Registered(rest, app_id, interval_s, since_s, now_s, first_s,
                           then_s if then_s is not None and then_s > first_s else None, application)
        with self._lock:
            if not self.running:
                return
            self._apps[app_name] = entry
        self._wake.set()

    def registered(self) -> dict[str, Registered]:
        with self._lock:
            return dict(self._apps)

    def run_due(self, now_s: float) -> float:
        """Start every pass due at `now_s` (monotonic), each on a thread of its own (`start_pass`),
        without waiting for them; the seconds until the next one. Passes waited for held back every
        pass due after them: on loaded drivers the apps' last passes came late, after their cycles
        had read the driver themselves (issue 33)."""
        for app_name, entry, last in self._take_due(now_s):
            self._start_pass(functools.partial(self.prefetch, app_name, entry, last))
        with self._lock:
            next_s = min((e.due_at_s for e in self._apps.values()), default=None)
        return IDLE_WAIT_S if next_s is None else min(max(next_s - self._monotonic(), 0.0), IDLE_WAIT_S)

    def prefetch(self, app_name: str, entry: Registered, keep_round: bool = False) -> int:
        """One pass for the app: with `keep_round`, its executors and jobs side by side, kept at once
        as the round its next cycle takes; then its jobs' finished stages not kept, with at most
        `pass_concurrency` passes fetching at once, unless another pass of the app is under way
        (they are its to fetch: no stage asked twice of a loaded driver); the stage requests made.
        A failure (an error, a timeout, a bad answer) ends the pass: the next one tries again."""
        if not self.cache.enabled:  # nothing would be kept (SPARKSCALE_STAGE_CACHE=off)
            return 0
        started_s, cpu_started_s, fetched = time.monotonic(), time.thread_time(), 0
        application = entry.application if keep_round and self.keep_rounds else None
        with self._lock:
            under_way = self._passing.get(app_name, 0)
            self._passing[app_name] = under_way + 1
        try:
            jobs = None if application is None else self._keep_round(app_name, entry, application)
            if not under_way:
                with self._fetching:
                    for stage_id in finished_stage_ids(entry.rest.jobs(entry.app_id) if jobs is None else jobs,
                                                       entry.since_s):
                        if fetched >= self.max_stages_per_pass:
                            break
                        fetch = functools.partial(entry.rest.stage_attempts, entry.app_id, stage_id)
                        if self.cache.get(entry.app_id, stage_id, fetch)[1]:
                            fetched += 1
        except Exception as exc:  # the thread outlives any answer a driver gives
            log.debug("stage_prefetch.failed", app=app_name, app_id=entry.app_id, fetched=fetched, error=repr(exc))
            return fetched
        finally:
            with self._lock:
                self._passing[app_name] -= 1
                if not self._passing[app_name]:
                    del self._passing[app_name]
        log.debug("stage_prefetch.pass", app=app_name, app_id=entry.app_id, fetched=fetched, alongside=under_way,
                  took_s=round(time.monotonic() - started_s, 4), cpu_s=round(time.thread_time() - cpu_started_s, 4))
        return fetched

    def _keep_round(self, app_name: str, entry: Registered, application: RestApplication) -> list[RestJob]:
        """The app's executors and jobs, asked side by side as the cycle does, kept as its next
        cycle's round as soon as they answer (the pass's stage fetches come after: a cycle due
        meanwhile does not wait for them), a cycle waiting on the ask woken; the jobs."""
        ask, taken_at, kept = RoundAsk(entry.rest.base_url, self._monotonic()), self._clock(), None
        with self._lock:
            self._asking[app_name] = ask
        try:
            with ThreadPoolExecutor(2, "sparkscale-prefetch-round") as pool:
                executors, jobs = executors_and_jobs(entry.rest, entry.app_id, pool)
            kept = KeptRound(DriverRound(application, taken_at, executors, jobs, 0), ask.base_url, ask.asked_at_s)
        finally:
            with self._ready:
                if self._asking.get(app_name) is ask:
                    del self._asking[app_name]
                if kept is not None and app_name in self._apps:  # not forgotten (or stopped) meanwhile
                    self._rounds[app_name] = kept
                self._ready.notify_all()
        return jobs

    def take_round(self, app_name: str, base_url: str, interval_s: float) -> TakenRound:
        """The driver round the last pass read for the app, when read from `base_url`, after the
        last `outdate_rounds`, at most `round_max_age` of `interval_s` ago; else none, and why. While
        a pass is asking for it, waits for its answer (at most `round_wait` of `interval_s`, never
        past the age it is handed out at) rather than ask the same loaded driver again. A kept round
        is handed out once."""
        called_s = self._monotonic()
        with self._ready:
            while app_name not in self._rounds:
                ask = self._asking.get(app_name)
                if ask is None or self._unusable(ask, app_name, base_url) is not None:
                    break
                left_s = min(called_s + self.round_wait * interval_s,
                             ask.asked_at_s + self.round_max_age * interval_s) - self._monotonic()
                if left_s <= 0:
                    break
                self._wait_round(self._ready, left_s)
            kept = self._rounds.pop(app_name, None)
            ask = self._asking.get(app_name)
            missed = self._unusable(kept or ask, app_name, base_url)
        now_s = self._monotonic()
        waited_s = now_s - called_s
        if kept is None or missed is not None:
            return TakenRound(None, None, waited_s, missed or "asking")  # "asking": the ask outlasted the wait
        age_s = now_s - kept.asked_at_s
        if 0 <= age_s <= self.round_max_age * interval_s:
            return TakenRound(kept.round, age_s, waited_s, None)
        return TakenRound(None, None, waited_s, "stale")

    def _unusable(self, round_or_ask: KeptRound | RoundAsk | None, app_name: str, base_url: str) -> Missed | None:
        """Why a kept (or asked-for) round is not the cycle's, its age aside; None: it is. Under the lock."""
        if round_or_ask is None:
            return "none"
        if round_or_ask.base_url != base_url:
            return "other_driver"
        return "outdated" if round_or_ask.asked_at_s <= self._stale_before.get(app_name, -math.inf) else None

    def outdate_rounds(self, app_name: str) -> None:
        """No round asked before now is handed out for the app: its next cycle runs out of turn
        (an action ended, a request came) and must see the driver as it is after that."""
        with self._ready:  # a round kept before is not handed out (`take_round` says "outdated")
            self._stale_before[app_name] = self._monotonic()
            self._ready.notify_all()  # a cycle waiting on an ask made before now stops waiting

    def _take_due(self, now_s: float) -> list[tuple[str, Registered, bool]]:
        """The apps due at `now_s`, earliest first, each moved on to its next pass (and whether this
        is its last pass before the next cycle); the silent ones forgotten."""
        due: list[tuple[str, Registered, bool]] = []
        with self._lock:
            for app_name, entry in list(self._apps.items()):
                if now_s - entry.registered_at_s >= FORGET_AFTER_INTERVALS * entry.interval_s:
                    del self._apps[app_name]
                    self._rounds.pop(app_name, None)
                    self._stale_before.pop(app_name, None)
                    log.debug("stage_prefetch.forgotten", app=app_name, app_id=entry.app_id)
                elif entry.due_at_s <= now_s:
                    if entry.then_at_s is not None and entry.then_at_s > now_s:  # the cycle's second pass
                        due.append((app_name, entry, False))
                        self._apps[app_name] = replace(entry, due_at_s=entry.then_at_s, then_at_s=None)
                        continue
                    due.append((app_name, entry, True))
                    missed = (now_s - entry.due_at_s) // entry.interval_s  # passes too late to run: skipped
                    self._apps[app_name] = replace(entry, due_at_s=entry.due_at_s + (missed + 1) * entry.interval_s,
                                                   then_at_s=None)
        return sorted(due, key=lambda item: item[1].due_at_s)

    def _run(self, stop: threading.Event, wake: threading.Event) -> None:
        while not stop.is_set():
            wake.clear()  # before the passes: a registration during them wakes the next wait
            try:
                wait_s = self.run_due(self._monotonic())
            except Exception as exc:  # never expected (passes catch their own): the thread still lives on
                log.warning("stage_prefetch.loop_failed", error=repr(exc))
                wait_s = IDLE_WAIT_S
            if stop.is_set():
                return
            wake.wait(wait_s)


PREFETCH = StagePrefetcher()  # the process's: the daemon starts it, every app's collect registers with it
