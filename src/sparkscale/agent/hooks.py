"""What lets the agent restart a user's query exactly as the user's code started it, and keeps the
user's own waiting code blind to a migration.

Installed in the driver before the user's script runs (`install`, by the bootstrap or `attach`):

- `DataStreamWriter.start` / `toTable` are wrapped: each started query's writer and arguments are
  kept (by query name, or id when unnamed). Calling the same Java writer's `start` again resumes
  from the query's checkpoint, keeps its id and uses the repartitioned state (checked on 4.3.0).
- Every `StreamingQuery` handed to the user is remembered; when the agent restarts the query, each
  handle is pointed at the new run, so `query.status`, `query.stop()` follow it.
- `StreamingQuery.awaitTermination` and `StreamingQueryManager.awaitAnyTermination` wait through a
  migration: a query the agent stopped and holds is waited for until its new run ends.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog
from pyspark.sql.streaming.query import StreamingQuery, StreamingQueryManager
from pyspark.sql.streaming.readwriter import DataStreamWriter

from sparkscale.agent.checkpoint import is_temporary

log = structlog.get_logger(__name__)

_WAIT_SLICE_S = 0.5


@dataclass
class StartedQuery:
    """How a query was started: the writer, the method and its arguments; the handles given out."""

    name: str
    writer: DataStreamWriter
    method: str  # "start" or "toTable"
    args: tuple[object, ...]  # the user's arguments to `method`, passed on as they are
    kwargs: dict[str, object]
    handles: list[weakref.ref[StreamingQuery]] = field(default_factory=list)
    checkpoint: str | None = None  # the checkpoint root Spark resolved at the first start
    trigger: Any = None  # the user's trigger (a Java Trigger), put back after a run of one batch

    def restart(self, one_batch: bool = False) -> StreamingQuery:
        """Start the query again from its checkpoint. `one_batch`: with Spark's one-batch trigger,
        which finishes the batch the last run planned and did not commit (same id, same offsets)
        and ends the run: a stop that landed inside a batch is completed as Spark's own recovery
        would, and the user's trigger is set back on the writer for the next start."""
        if self.checkpoint is not None:
            # Pinned: an unnamed query's checkpoint under spark.sql.streaming.checkpointLocation is a
            # new random directory at each start (StreamingQueryManager.createQuery), which would
            # restart it without its state and offsets. The root it ran on is the one it resumes.
            self.writer.option("checkpointLocation", self.checkpoint)
        if one_batch:
            if self.trigger is None:
                raise RuntimeError(f"the trigger of query {self.name!r} is unknown: "
                                   "it cannot be put back after one batch")
            self.writer.trigger(once=True)
        try:
            query: StreamingQuery = getattr(self.writer, f"_sparkscale_original_{self.method}")(
                *self.args, **self.kwargs)
        finally:
            if one_batch:
                self.writer._jwrite = self.writer._jwrite.trigger(self.trigger)
        for ref in list(self.handles):
            handle = ref()
            if handle is not None and handle is not query:
                handle._jsq = query._jsq  # the user's handle follows the new run
        self.handles = [r for r in self.handles if r() is not None]
        self.handles.append(weakref.ref(query))
        return query


class QueryHooks:
    """The registry of started queries and the waiting rules; one per driver."""

    def __init__(self) -> None:
        self.started: dict[str, StartedQuery] = {}
        self.held: set[str] = set()  # queries the agent stopped for a migration
        self.agent_stops = 0  # stops the agent made (awaitAnyTermination must not return for them)
        self.stopping = threading.Event()  # the driver is shutting down: waits end
        self.on_first_start: Callable[[], None] | None = None
        self.on_record: list[Callable[[str], None]] = []  # told each query the hooks saw started
        self._lock = threading.Condition()

    # -- what the writer wrapper calls ------------------------------------------------------------

    def record(self, writer: DataStreamWriter, method: str, args: tuple[object, ...], kwargs: dict[str, object],
               query: StreamingQuery) -> None:
        name = query.name or str(query.id)
        first = not self.started
        checkpoint, trigger = _resolved_checkpoint(query), _trigger(query)
        with self._lock:
            self.started[name] = StartedQuery(name, writer, method, args, kwargs, [weakref.ref(query)], checkpoint,
                                              trigger)
        log.info("agent.query_seen", query=name, id=str(query.id), method=method)
        for listener in list(self.on_record):
            listener(name)
        if first and self.on_first_start is not None:
            self.on_first_start()

    # -- what the agent calls ---------------------------------------------------------------------

    def hold(self, name: str) -> None:
        with self._lock:
            self.held.add(name)
            self.agent_stops += 1

    def release(self, name: str) -> None:
        with self._lock:
            self.held.discard(name)
            self._lock.notify_all()

    def restart(self, name: str) -> StreamingQuery:
        with self._lock:
            started = self.started.get(name)
        if started is None:
            raise KeyError(name)
        query = started.restart()
        self.release(name)
        return query

    def shutdown(self) -> None:
        self.stopping.set()
        with self._lock:
            self._lock.notify_all()

    # -- the waiting rules ------------------------------------------------------------------------

    def wait_released(self, name: str, deadline: float | None) -> bool:
        """Wait while `name` is held; False on timeout or shutdown."""
        with self._lock:
            while name in self.held and not self.stopping.is_set():
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._lock.wait(_WAIT_SLICE_S if remaining is None else min(remaining, _WAIT_SLICE_S))
        return not self.stopping.is_set()


def _resolved_checkpoint(query: StreamingQuery) -> str | None:
    """The query's checkpoint root as Spark resolved it; None for a temporary one (deleted on stop)
    or where it cannot be read (another wrapper)."""
    try:
        root = str(query._jsq.streamingQuery().resolvedCheckpointRoot())
    except Exception:  # Spark Connect or a mock: restart as the user's writer says
        return None
    return None if is_temporary(root) else root


def _trigger(query: StreamingQuery) -> Any:
    """The Java Trigger the query runs with (None where it cannot be read)."""
    try:
        return query._jsq.streamingQuery().trigger()
    except Exception:  # Spark Connect or a mock: no run of one batch for it
        return None


HOOKS = QueryHooks()
_installed: list[QueryHooks] = []  # the hooks installed, at most one: install() is idempotent


def install(hooks: QueryHooks = HOOKS) -> QueryHooks:
    """Wrap the writer and the waits (idempotent). Must run before the user's code starts queries."""
    if _installed:
        return hooks
    _installed.append(hooks)
    for method in ("start", "toTable"):
        original = getattr(DataStreamWriter, method)
        setattr(DataStreamWriter, f"_sparkscale_original_{method}", original)
        setattr(DataStreamWriter, method, _recording(method, original, hooks))
    await_one = StreamingQuery.awaitTermination
    await_any = StreamingQueryManager.awaitAnyTermination

    def await_termination(self: StreamingQuery, timeout: float | None = None) -> bool | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            remaining = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            jsq = self._jsq
            result = await_one(self, remaining)  # type: ignore[arg-type]  # annotated int, takes float seconds
            if timeout is not None and not result:
                return result  # timed out, still running
            name = self._jsq.name() or self._jsq.id().toString()
            if self._jsq is not jsq and self._jsq.isActive():
                continue  # already restarted under this handle
            if name in hooks.held and hooks.wait_released(name, deadline):
                continue  # the agent restarted it: the handle follows the new run
            return result

    def await_any_termination(self: StreamingQueryManager, timeout: float | None = None) -> bool | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            seen = hooks.agent_stops
            remaining = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            result = await_any(self, remaining)  # type: ignore[arg-type]  # annotated int, takes float seconds
            if timeout is not None and not result:
                return result
            if hooks.stopping.is_set() or (hooks.agent_stops == seen and not hooks.held):
                return result
            # A query the agent stopped for a migration ended the wait: that is not the user's end.
            self.resetTerminated()
            if deadline is not None and time.monotonic() >= deadline:
                return False

    StreamingQuery.awaitTermination = await_termination  # type: ignore[method-assign]
    StreamingQueryManager.awaitAnyTermination = await_any_termination  # type: ignore[method-assign]
    return hooks


def _recording(method: str, original: Callable[..., StreamingQuery],
               hooks: QueryHooks) -> Callable[..., StreamingQuery]:
    def wrapper(self: DataStreamWriter, *args: object, **kwargs: object) -> StreamingQuery:
        query = original(self, *args, **kwargs)
        try:
            hooks.record(self, method, args, kwargs, query)
        except Exception as exc:  # never break the user's start
            log.warning("agent.query_record_failed", error=str(exc))
        return query

    wrapper.__doc__ = original.__doc__
    wrapper.__name__ = method
    return wrapper
