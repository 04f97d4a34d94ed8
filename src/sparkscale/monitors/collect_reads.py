"""The collect's Redis round trips (monitors/collector.py), and the reads of the app that other
parts of the daemon make in them (`Ride`: the control loop's partition counts, executor shape and
blocklist, control/stores.py), so that a cycle waits on one round trip, or two, for all it reads of
Redis (issue 33: on a starved machine each round trip had a p99 of 0.1-0.16 s).

Every read of the collect is pipelined into one of three trips:

- `listing`: the driver's registration (where its REST API is) and the query list;
- `histories`: the executor target and, for each query observed, its progress history over the
  window (XRANGE from the window's start less ten triggers), then the ride for those queries;
- `everything`: both in one trip, the histories and the ride for the queries the app's last
  collect observed (`Observed`, kept per app by `LAST_OBSERVED`).

The collector makes `everything` when the stage prefetcher kept a driver round for this cycle
(monitors/stage_prefetch.py; most cycles), since the round then needs nothing read first. It
holds when the registration still names the driver the round was read from and the list observes
the same queries, with the same triggers, as the last collect; otherwise the trip's registration
and list stand and `histories` reads the rest again for the queries as listed (the round is
dropped too if the driver moved). Without a kept round the collector makes `listing`, reads the
driver's round, then makes `histories`. So an ordinary cycle waits on one round trip with a kept
round and two without, and a query the agent lists is observed in that very cycle: a changed
list only costs the cycle that sees it a second trip. Nothing kept outlives a change: the
memory only says which histories to read ahead, never what they hold. Without a kept round the
list is read just before the driver's round, where it was read just after: a query listed while
the round is read is observed by the next cycle, and one that ends meanwhile once more, with the
reports it has (a kept round is older than the list anyway).

Why so: the registration has to be read before the driver's round, so the list costs nothing
beside it; the histories must be read after the round (their window ends at its time, and every
batch its jobs name should have its report), which a kept round allows at once and a round read
in the cycle does not.

Replies are read with `raise_on_error=False`: an error reply of the registration (the driver is
taken as unregistered) or of the query list (a bad record, logged once: no query) is the
reader's to judge, as each was when read on its own; one of the target or a history raises, and
the ride judges its own. A connection error raises from the trip: the cycle backs off.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar, cast

import redis
import structlog

from sparkscale.config import AppConfig
from sparkscale.monitors.progress_reports import ProgressReport
from sparkscale.protocol.keys import driver_key, executor_target_key, progress_history_key
from sparkscale.protocol.queries import QueryInfo, queries_key
from sparkscale.redisconn import RawEntries, stream_entries
from sparkscale.store.redis_queries import queries_from

log = structlog.get_logger("sparkscale.monitors.collector")  # `monitor.bad_progress_entry`'s logger, as before

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class Ridden(Protocol[T_co]):
    def __call__(self, replies: Sequence[object], taken_at: float, /) -> T_co:
        """What the ride read, from the replies to the commands it queued (error replies among
        them) and the snapshots' time (epoch s)."""
        ...


class Ride(Protocol[T_co]):
    """Reads of the app made in the collect's last round trip, after its own."""

    def __call__(self, pipe: redis.client.Pipeline, queries: Sequence[str], /) -> Ridden[T_co]:
        """Queue the reads for the app's observed `queries` on `pipe`; how to take their replies."""
        ...


def no_ride(pipe: redis.client.Pipeline, queries: Sequence[str], /) -> Ridden[None]:
    """A collect that reads nothing for anyone else (a one-shot command)."""
    return lambda replies, taken_at: None


@dataclass(frozen=True)
class Observed:
    """What an app's last collect observed: the driver's REST API and each query with its trigger
    interval (s), whose histories `everything` reads ahead."""

    base_url: str
    queries: tuple[tuple[str, float], ...]


class LastObserved:
    """`Observed` per app, for the process's collects (thread-safe: apps cycle on their own threads)."""

    def __init__(self) -> None:
        self._apps: dict[str, Observed] = {}
        self._lock = threading.Lock()

    def get(self, app: str) -> Observed | None:
        with self._lock:
            return self._apps.get(app)

    def set(self, app: str, observed: Observed) -> None:
        with self._lock:
            self._apps[app] = observed


LAST_OBSERVED = LastObserved()


@dataclass(frozen=True)
class Listing:
    registration: object  # the reply to GET of the driver's key (spark_rest.driver_rest_at)
    listed: dict[str, QueryInfo]  # the agent's queries by name


@dataclass(frozen=True)
class Histories(Generic[T]):
    target: object  # the reply to GET of the executor target (None: none asked for yet)
    progress: dict[str, list[ProgressReport]]  # each observed query's reports, by name
    ridden: T
    read_ahead: tuple[tuple[str, float], ...] = ()  # what `everything` read them for (its `Observed.queries`)


class AppTrips(Generic[T]):
    """One collect's round trips for the app, on the daemon's client; `waited_s` sums their time."""

    def __init__(self, client: redis.Redis, prefix: str, app: AppConfig, window_s: float, ride: Ride[T]) -> None:
        self.client, self.prefix, self.app, self.window_s, self.ride = client, prefix, app, window_s, ride
        self.waited_s = 0.0

    def triggers(self, queries: Sequence[QueryInfo]) -> tuple[tuple[str, float], ...]:
        """Each query with the trigger interval its history is read over (the app's when it says none)."""
        return tuple((q.name, q.trigger_interval_s or self.app.trigger_interval_s) for q in queries)

    def listing(self) -> Listing:
        pipe = self.client.pipeline(transaction=False)
        self._queue_listing(pipe)
        registration, listed = self._execute(pipe)
        return self._listing(registration, listed)

    def histories(self, queries: Sequence[QueryInfo], taken_at: float) -> Histories[T]:
        pipe = self.client.pipeline(transaction=False)
        take = self._queue_histories(pipe, self.triggers(queries), taken_at)
        return take(self._execute(pipe))

    def everything(self, observed: Observed, taken_at: float) -> tuple[Listing, Histories[T]]:
        """The listing, and the histories and the ride for the queries the last collect observed."""
        pipe = self.client.pipeline(transaction=False)
        self._queue_listing(pipe)
        take = self._queue_histories(pipe, observed.queries, taken_at)
        registration, listed, *rest = self._execute(pipe)
        return self._listing(registration, listed), take(rest)

    # -- the commands and their replies ----------------------------------------------------------

    def _queue_listing(self, pipe: redis.client.Pipeline) -> None:
        pipe.get(driver_key(self.prefix, self.app.name))
        pipe.hgetall(queries_key(self.prefix, self.app.name))

    def _listing(self, registration: object, listed: object) -> Listing:
        return Listing(registration, queries_from(self.client, self.prefix, self.app.name, listed))

    def _queue_histories(self, pipe: redis.client.Pipeline, queries: tuple[tuple[str, float], ...],
                         taken_at: float) -> Callable[[Sequence[object]], Histories[T]]:
        pipe.get(executor_target_key(self.prefix, self.app.name))
        keys = [progress_history_key(self.prefix, self.app.name, name) for name, _trigger_s in queries]
        for key, (_name, trigger_s) in zip(keys, queries, strict=True):
            pipe.xrange(key, min=stream_min(taken_at - self.window_s - 10 * trigger_s - 10), max="+")
        ridden = self.ride(pipe, [name for name, _trigger_s in queries])

        def take(replies: Sequence[object]) -> Histories[T]:
            own = 1 + len(queries)
            raise_error(replies[:own])
            target, *streams = replies[:own]
            progress = {name: progress_reports(key, cast(RawEntries, raw))
                        for (name, _trigger_s), key, raw in zip(queries, keys, streams, strict=True)}
            return Histories(target, progress, ridden(replies[own:], taken_at), queries)

        return take

    def _execute(self, pipe: redis.client.Pipeline) -> list[object]:
        started = time.monotonic()
        try:
            return list(pipe.execute(raise_on_error=False))
        finally:
            self.waited_s += time.monotonic() - started


def raise_error(replies: Sequence[object]) -> None:
    """Raise the first error reply among `replies`, as a pipeline read with `raise_on_error` would."""
    error = next((r for r in replies if isinstance(r, Exception)), None)
    if error is not None:
        raise error


def stream_min(since_s: float) -> str:
    """XRANGE's lower bound for entries published since `since_s` (stream ids are milliseconds)."""
    return f"{max(int(since_s * 1000), 0)}-0"


def progress_reports(key: str, raw: RawEntries, partitions: int | None = None) -> list[ProgressReport]:
    """The reports in an XRANGE answer of `key`; a bad entry (a bad idle sample: `BadIdleSample`)
    is logged and left out."""
    reports: list[ProgressReport] = []
    for entry_id, fields in stream_entries(raw):
        try:
            reports.append(ProgressReport.from_fields(fields, partitions))
        except (KeyError, ValueError) as exc:
            log.warning("monitor.bad_progress_entry", key=key, entry=entry_id, problem=type(exc).__name__,
                        error=str(exc))
    return reports
