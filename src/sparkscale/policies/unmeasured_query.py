"""Guard: no scale-down while one query of an app is measured and another, with input to process,
has no stage in the window.

A policy sizes an app from the stages that finished in the window. A query whose batch outlasts
the window (a batch held up, or far behind) has its sources in the snapshot but none of its
stages, so it counts for no cores, and the app looks over-provisioned by just what that query
needs. On clicks-file one query's 35 s batch left DS2 the other query alone: "1 core needed" on
4 executors, with 1,329 records waiting for the missing query, held only by the scale-down delay
(issue 33). A window with no stage of any query is a policy's own to read (DS2 keeps the executors
then, policies/ds2.py); this guard holds the partial view, for every policy. A query with nothing
arriving and nothing waiting (idle) runs no batch and holds nothing; a scale-up goes through (it
rests on what was measured, a lower bound of the need). Pure."""

from __future__ import annotations

from sparkscale.model.plan import Action
from sparkscale.model.snapshot import Snapshot
from sparkscale.model.snapshot_merge import query_names, query_of
from sparkscale.policies.guard_input import GuardInput, replace_scale, scale


def unmeasured_queries(snapshot: Snapshot) -> list[tuple[str, float]]:
    """(query, records waiting) of each query whose sources have input arriving or waiting but none
    of whose stages finished in the window, in the snapshot's query order; none when no query has a
    stage in the window (nothing measured is not a partial view)."""
    names = query_names(snapshot)
    measured = {q for op in snapshot.operators if not op.source and (q := query_of(names, op.id)) is not None}
    if not measured:
        return []
    waiting: dict[str, float] = {}
    busy: set[str] = set()
    for op in snapshot.operators:
        query = query_of(names, op.id) if op.source else None
        if query is None or query in measured:
            continue
        waiting[query] = waiting.get(query, 0.0) + (op.backlog or 0.0)
        if (op.backlog or 0.0) > 0 or (op.arrival_rate or 0.0) > 0:
            busy.add(query)
    return [(q, waiting[q]) for q in names if q in busy]


def unmeasured_query(actions: list[Action], given: GuardInput, notes: list[str]) -> list[Action]:
    """`actions` without a scale-down while some query with input has no stage in the window."""
    action = scale(actions)
    if action is None or action.executor_direction >= 0:
        return actions
    missing = unmeasured_queries(given.snapshot)
    if not missing:
        return actions
    which = ", ".join(f"{q} ({waiting:,.0f} records waiting)" for q, waiting in missing)
    notes.append(f"guard unmeasured query: {action.summary()} held: no stage of {which} finished in the "
                 f"{given.snapshot.window_s:g} s window (a batch longer than the window): its need is unknown")
    return replace_scale(actions, None)
