"""Guard: no scale-down while one query of an app is measured and another has a batch running for
longer than the window.

A policy sizes an app from the stages that finished in the window. A query whose batch outlasts
the window (a batch held up, or far behind) has its sources in the snapshot but none of its
stages, so it counts for no cores, and the app looks over-provisioned by just what that query
needs. On clicks-file one query's 35 s batch left DS2 the other query alone: "1 core needed" on
4 executors, with 1,329 records waiting for the missing query, held only by the scale-down delay
(issue 33). The monitor names when the query's oldest running batch job was submitted
(`extensions["monitor"]["batch_running_since_s"]`, monitors/snapshot_builder.py): a query with no
stage in the window and none running waits for its trigger (a trigger longer than the window), and
holds nothing. A window with no stage of any query is a policy's own to read (DS2 keeps the
executors then, policies/ds2.py); this guard holds the partial view, for every policy. A scale-up
goes through (it rests on what was measured, a lower bound of the need). Pure."""

from __future__ import annotations

from collections.abc import Mapping

from sparkscale.model.plan import Action
from sparkscale.model.snapshot import Snapshot
from sparkscale.model.snapshot_merge import query_extensions, query_names, query_of
from sparkscale.policies.guard_input import GuardInput, replace_scale, scale


def unmeasured_queries(snapshot: Snapshot) -> list[tuple[str, float, float]]:
    """(query, records waiting, seconds its batch has run) of each query none of whose stages
    finished in the window and whose oldest running batch began before it, in the snapshot's query
    order; none when no query has a stage in the window (nothing measured is not a partial view)."""
    names = query_names(snapshot)
    measured = {q for op in snapshot.operators if not op.source and (q := query_of(names, op.id)) is not None}
    if not measured:
        return []
    waiting: dict[str, float] = {}
    for op in snapshot.operators:
        query = query_of(names, op.id) if op.source else None
        if query is not None:
            waiting[query] = waiting.get(query, 0.0) + (op.backlog or 0.0)
    extensions = query_extensions(snapshot)
    out = []
    for query in names:
        monitor = extensions.get(query, {}).get("monitor")
        since = monitor.get("batch_running_since_s") if isinstance(monitor, Mapping) else None
        if query in measured or not isinstance(since, int | float):
            continue
        running_s = snapshot.taken_at - since
        if running_s >= snapshot.window_s:
            out.append((query, waiting.get(query, 0.0), running_s))
    return out


def unmeasured_query(actions: list[Action], given: GuardInput, notes: list[str]) -> list[Action]:
    """`actions` without a scale-down while `unmeasured_queries` names a query, saying which."""
    action = scale(actions)
    if action is None or action.executor_direction >= 0:
        return actions
    missing = unmeasured_queries(given.snapshot)
    if not missing:
        return actions
    which = ", ".join(f"{q} (a batch running for {running_s:.0f} s, {waiting:,.0f} records waiting)"
                      for q, waiting, running_s in missing)
    notes.append(f"guard unmeasured query: {action.summary()} held: no stage of {which} finished in the "
                 f"{given.snapshot.window_s:g} s window: its need is unknown")
    return replace_scale(actions, None)
