"""One cycle's reads of an app's driver REST API, with the waits taken out (issue 33): the
application id kept between cycles, the executors and the jobs asked at once, the window's new
stages fetched side by side (at most `REST_CONCURRENCY` requests in flight per app).

A driver's UI lists only its own application, so its id is asked once per driver URL (`APP_IDS`).
A driver started again on the same URL runs a new application: the kept id then answers 404 and
is asked again. The round's first request is its liveness probe: when nothing answers it,
`DriverSilent` (the collector's AppNotRunningError); later failures are SparkRestError as raised.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import ParamSpec, Protocol, TypeVar

from sparkscale.monitors.spark_rest import RestApplication, RestExecutor, RestJob, RestStage, SparkRestError
from sparkscale.monitors.stage_cache import STAGES, StageCache

REST_CONCURRENCY = 4  # one app's requests in flight at once (each cycle's own pool)
MAX_KEPT_IDS = 256  # driver URLs whose application id is kept (drivers come and go)

P = ParamSpec("P")
T = TypeVar("T")


class MeteredPool(ThreadPoolExecutor):
    """A cycle's pool for its REST reads that adds up the CPU its tasks' threads used (`cpu_s`): the
    cycle's `cpu_s` counts the daemon's own CPU, and the JSON is parsed on these threads now."""

    def __init__(self, max_workers: int = REST_CONCURRENCY, thread_name_prefix: str = "sparkscale-rest") -> None:
        super().__init__(max_workers, thread_name_prefix)
        self._cpu_lock = threading.Lock()
        self.cpu_s = 0.0

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        return super().submit(self._timed, fn, *args, **kwargs)

    def _timed(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        started = time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            with self._cpu_lock:
                self.cpu_s += time.thread_time() - started


class DriverSilent(Exception):
    """The round's first request got no answer at all: the driver is not running (or not yet)."""

    def __init__(self, error: SparkRestError) -> None:
        self.error = error
        super().__init__(str(error))


class AppIds:
    """Driver REST base URL -> the application it serves, process-wide (every app's cycle thread)."""

    def __init__(self, max_entries: int = MAX_KEPT_IDS) -> None:
        self._lock = threading.Lock()
        self._kept: OrderedDict[tuple[str, str], RestApplication] = OrderedDict()
        self.max_entries = max_entries

    def get(self, base_url: str, app_name: str) -> RestApplication | None:
        with self._lock:
            return self._kept.get((base_url, app_name))

    def keep(self, base_url: str, app_name: str, application: RestApplication) -> None:
        with self._lock:
            self._kept[(base_url, app_name)] = application
            self._kept.move_to_end((base_url, app_name))
            while len(self._kept) > self.max_entries:
                self._kept.popitem(last=False)

    def forget(self, base_url: str, app_name: str) -> None:
        with self._lock:
            self._kept.pop((base_url, app_name), None)


APP_IDS = AppIds()


class DriverRest(Protocol):
    """What a round asks of a driver (monitors/spark_rest.py's SparkRestClient, or a test's fake)."""

    @property
    def base_url(self) -> str: ...

    def application(self, name: str) -> RestApplication: ...

    def executors(self, app_id: str) -> list[RestExecutor]: ...

    def jobs(self, app_id: str) -> list[RestJob]: ...

    def stage_attempts(self, app_id: str, stage_id: int) -> list[RestStage]: ...


@dataclass(frozen=True)
class DriverRound:
    """The application, the executors and the jobs, as read at `taken_at` (epoch seconds: when
    the executors and jobs were asked for), and how many requests that took."""

    application: RestApplication
    taken_at: float
    executors: list[RestExecutor]
    jobs: list[RestJob]
    requests: int


def read_round(rest: DriverRest, app_name: str, pool: Executor, app_ids: AppIds | None = None,
               clock: Callable[[], float] = time.time) -> DriverRound:
    """The application (unless its id is kept: `app_ids`, default the process's), then the
    executors and the jobs at once."""
    app_ids = APP_IDS if app_ids is None else app_ids
    kept = app_ids.get(rest.base_url, app_name)
    asked = 0
    if kept is not None:
        taken_at = clock()
        try:
            executors, jobs = executors_and_jobs(rest, kept.id, pool)
            return DriverRound(kept, taken_at, executors, jobs, 2)
        except SparkRestError as exc:
            if exc.unreachable:
                raise DriverSilent(exc) from None
            if exc.status != 404:
                raise
            app_ids.forget(rest.base_url, app_name)  # a new application on that URL: ask which
            asked = 2
    try:
        application = rest.application(app_name)
    except SparkRestError as exc:
        if exc.unreachable:
            raise DriverSilent(exc) from None
        raise
    app_ids.keep(rest.base_url, app_name, application)
    taken_at = clock()
    executors, jobs = executors_and_jobs(rest, application.id, pool)
    return DriverRound(application, taken_at, executors, jobs, asked + 3)


def executors_and_jobs(rest: DriverRest, app_id: str, pool: Executor) -> tuple[list[RestExecutor], list[RestJob]]:
    """The app's executors and jobs, asked side by side on `pool`."""
    executors = pool.submit(rest.executors, app_id)
    jobs = pool.submit(rest.jobs, app_id)
    return executors.result(), jobs.result()


def fetch_stages(rest: DriverRest, app_id: str, stage_ids: Sequence[int], pool: Executor,
                 cache: StageCache | None = None) -> dict[int, tuple[list[RestStage], bool]]:
    """Each stage's attempts and whether they were fetched now (not kept: `stage_cache.py`, default
    the process's `STAGES`), the stages asked for side by side on `pool`."""
    kept = STAGES if cache is None else cache

    def one(stage_id: int) -> tuple[list[RestStage], bool]:
        return kept.get(app_id, stage_id, lambda: rest.stage_attempts(app_id, stage_id))

    answers: Iterable[tuple[list[RestStage], bool]] = pool.map(one, stage_ids)
    return dict(zip(stage_ids, answers, strict=True))
