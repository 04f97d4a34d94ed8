"""One snapshot of a whole app from the snapshots of its queries. Pure.

The queries of an app share its executors, so the app's decision is taken over all of them at once:
the merged graph holds every query's operators (ids prefixed `"{query}/"`), the executors once, and
each query's extensions under `extensions["queries"][name]`. DS2 over it sums the queries' needs
(their micro-batches share the cores in time, as the stages of one query do). One snapshot is
returned as it is, so that an app of one query is decided exactly as before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from sparkscale.model.snapshot import ExecutorFigures, Snapshot

QUERY_SEPARATOR = "/"
# Extensions that describe the app or the host, not one query: kept at the top of a merged snapshot.
SHARED_EXTENSIONS = ("host", "app", "spark", "cluster")


def merge_snapshots(snapshots: Sequence[Snapshot]) -> Snapshot:
    """The app's snapshot over all its queries' snapshots (module docstring); identity for one."""
    if not snapshots:
        raise ValueError("no snapshot to merge")
    if len(snapshots) == 1:
        return snapshots[0]
    apps = {s.app for s in snapshots}
    if len(apps) != 1:
        raise ValueError(f"snapshots of several apps cannot be merged: {sorted(apps)}")
    names = [s.query for s in snapshots]
    if len(set(names)) != len(names):
        raise ValueError(f"a query appears twice among the snapshots: {names}")

    executors: dict[str, ExecutorFigures] = {}
    for snap in sorted(snapshots, key=lambda s: s.taken_at, reverse=True):  # the freshest view first
        for executor in snap.executors:
            executors.setdefault(executor.id, executor)
    operators = [replace(op, id=prefixed(s.query, op.id)) for s in snapshots for op in s.operators]
    edges = [(prefixed(s.query, a), prefixed(s.query, b)) for s in snapshots for a, b in s.edges]
    # The app's batch ratio is its slowest query's: that query's trigger and batch duration.
    slowest = max(snapshots, key=_batch_ratio)
    extensions: dict[str, Any] = {"queries": {s.query: dict(s.extensions) for s in snapshots}}
    for key in SHARED_EXTENSIONS:
        shared = next((s.extensions[key] for s in snapshots if key in s.extensions), None)
        if shared is not None:
            extensions[key] = shared
    return Snapshot(
        app=snapshots[0].app, query="+".join(names), taken_at=max(s.taken_at for s in snapshots),
        window_s=max(s.window_s for s in snapshots), executors=tuple(executors.values()),
        operators=tuple(operators), edges=tuple(edges), trigger_interval_s=slowest.trigger_interval_s,
        batch_duration_s=slowest.batch_duration_s, extensions=extensions,
    )


def prefixed(query: str, operator_id: str) -> str:
    return f"{query}{QUERY_SEPARATOR}{operator_id}"


def query_names(snapshot: Snapshot) -> tuple[str, ...]:
    """The queries a snapshot covers: those merged into it, else its own."""
    queries = snapshot.extensions.get("queries")
    if isinstance(queries, Mapping) and len(queries) > 1:
        return tuple(queries)
    return (snapshot.query,)


def query_extensions(snapshot: Snapshot) -> dict[str, Mapping[str, Any]]:
    """Each query's own extensions, by name: those merged into the snapshot, else its own."""
    queries = snapshot.extensions.get("queries")
    per_query = queries if isinstance(queries, Mapping) and queries else {snapshot.query: snapshot.extensions}
    return {str(name): ext for name, ext in per_query.items() if isinstance(ext, Mapping)}


def split_operator(names: Sequence[str], operator_id: str) -> tuple[str, str]:
    """(query, operator id within it) of an operator of a snapshot over the queries `names`
    (`query_names`): the prefix names the query where several were merged."""
    if len(names) == 1:
        return names[0], operator_id
    for name in sorted(names, key=len, reverse=True):  # the longest name first: `a/b` before `a`
        head = f"{name}{QUERY_SEPARATOR}"
        if operator_id.startswith(head):
            return name, operator_id[len(head):]
    raise KeyError(f"operator {operator_id!r} belongs to none of the queries {', '.join(names)}")


def query_of(names: Sequence[str], operator_id: str) -> str | None:
    """The query of `names` an operator belongs to (None: none of them)."""
    try:
        return split_operator(names, operator_id)[0]
    except KeyError:
        return None


def _batch_ratio(snapshot: Snapshot) -> float:
    if snapshot.batch_duration_s is None or not snapshot.trigger_interval_s:
        return -1.0
    return snapshot.batch_duration_s / snapshot.trigger_interval_s
