"""Guard: start-up grace (`guards.startup_grace_batches`): no scaling decision rests on the first
N batches of a new or restarted query's run.

A run's first batches pay for its start (state loading, code generation, the input that waited
meanwhile), so a window holding them shows a need the steady query does not have: the demo's
1 -> 2 -> 1 -> 3 -> 5 -> 1 executors in its first 20 s of load (issue 33). A restarted query keeps
its checkpoint's batch ids but gets a new run id; the monitor names the first batch of the run when
its reports show the run begin (`extensions["progress"]["run_first_batch_id"]`,
monitors/snapshot_builder.py), and this guard carries it on in each plan's observation
(`first_batch_figure(query)`) while later windows no longer show the start. Every change is held
while the oldest batch the window rests on (`monitor.batches`, else the latest batch) is one of the
run's first N. A query whose run start was never seen (the daemon started later) holds nothing, nor
does an idle app (no batch in the window, no input arriving or waiting), which would otherwise stay
in its first batches for as long as it is idle.
Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pydantic import JsonValue

from sparkscale.model.plan import Action
from sparkscale.model.snapshot_merge import query_extensions
from sparkscale.policies.guard_input import GuardInput
from sparkscale.policies.history import DecisionHistory

FIRST_BATCH_KEY = "run_first_batch_id"  # in a query's extensions["progress"]


def first_batch_figure(query: str) -> str:
    """The observation figure holding the first batch id of `query`'s run."""
    return f"{FIRST_BATCH_KEY}:{query}"


@dataclass(frozen=True)
class QueryRun:
    """What the grace reads of one query: its run's first batch id (None: not seen) and the
    oldest batch id the window's figures rest on (None: no batch)."""

    query: str
    first_batch_id: int | None
    window_batch_id: int | None
    idle: bool = False  # no batch in the window and no input arriving or waiting: nothing rests on a start


def _whole(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _window_batches(extensions: Mapping[str, JsonValue]) -> list[int]:
    monitor = extensions.get("monitor")
    batches = monitor.get("batches") if isinstance(monitor, Mapping) else None
    return [whole for b in batches if (whole := _whole(b)) is not None] if isinstance(batches, list) else []


def _latest_batch(extensions: Mapping[str, JsonValue]) -> int | None:
    progress = extensions.get("progress")
    return _whole(progress.get("latest_batch_id")) if isinstance(progress, Mapping) else None


def _no_input(given: GuardInput) -> bool:
    """No source of the app has records arriving or waiting (an idle app runs no batch: Spark starts
    a micro-batch only for new input, so an idle run stays at its first batches however long it runs)."""
    return not any((op.arrival_rate or 0) > 0 or (op.backlog or 0) > 0 for op in given.snapshot.operators if op.source)


def _carried(history: DecisionHistory, query: str) -> int | None:
    """The first batch id the newest decision recorded for `query` (None: none did)."""
    key = first_batch_figure(query)
    for decision in reversed(history.decisions):
        value = decision.observation.figure(key)
        if value is not None:
            return int(value)
    return None


def query_runs(given: GuardInput) -> list[QueryRun]:
    """Each query of the snapshot with its run's first batch: the snapshot's, else the history's."""
    runs = []
    idle = _no_input(given)
    for query, extensions in query_extensions(given.snapshot).items():
        progress = extensions.get("progress")
        seen = _whole(progress.get(FIRST_BATCH_KEY)) if isinstance(progress, Mapping) else None
        first = seen if seen is not None else _carried(given.history, query)
        in_window = _window_batches(extensions)
        window = min(in_window) if in_window else _latest_batch(extensions)
        runs.append(QueryRun(query, first, window, idle=idle and not in_window))
    return runs


def startup_grace(actions: list[Action], given: GuardInput, batches: int, notes: list[str],
                  figures: dict[str, float]) -> list[Action]:
    """`actions` without their changes while a query's window rests on its run's first `batches`
    batches; records each query's first batch in `figures`."""
    if batches <= 0:
        return actions
    young = []
    for run in query_runs(given):
        if run.first_batch_id is None:
            continue
        figures[first_batch_figure(run.query)] = run.first_batch_id
        if not run.idle and (run.window_batch_id is None or run.window_batch_id < run.first_batch_id + batches):
            young.append(run)
    changes = [a for a in actions if a.type != "warn"]
    if not young or not changes:
        return actions
    why = "; ".join(
        f"query {r.query}'s run began at batch {r.first_batch_id} and the window rests on "
        + (f"batch {r.window_batch_id}" if r.window_batch_id is not None else "no batch yet")
        for r in young)
    notes.append(f"guard start-up grace: {', '.join(a.summary() for a in changes)} held: {why} (within its first "
                 f"{batches} batches: guards.startup_grace_batches)")
    return [a for a in actions if a.type == "warn"]
