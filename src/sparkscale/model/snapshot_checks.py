"""What a snapshot must be beyond its fields' types: an operator graph without duplicates or
cycles, and the extensions the policies and guards read in the form they expect. Pure; errors
are FieldErrors whose path is from the snapshot's top (`edges[1][0]`, `app.cpu_fraction` of its
`extensions`)."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from sparkscale.config.apps import MAX_EXECUTORS
from sparkscale.model.fields import FieldError, boolean, join, object_at, optional_integer, optional_number
from sparkscale.model.placement import Placement


class Operator(Protocol):
    """What the graph check reads of an operator (`snapshot.OperatorFigures`)."""

    @property
    def id(self) -> str: ...

    @property
    def source(self) -> bool: ...


# ---------------------------------------------------------------------------------------------
# Structure: ids, edges, topological order


def check_graph(operators: Sequence[Operator], executor_ids: Sequence[str],
                edges: Sequence[tuple[str, str]]) -> tuple[str, ...]:
    """Check ids and edges, and return the topological order (Kahn's algorithm, sources first)."""
    index: dict[str, int] = {}
    for i, op in enumerate(operators):
        if op.id in index:
            raise FieldError(f"operators[{i}].id", f"duplicate operator id {op.id!r}")
        index[op.id] = i
    seen_executors: set[str] = set()
    for i, executor_id in enumerate(executor_ids):
        if executor_id in seen_executors:
            raise FieldError(f"executors[{i}].id", f"duplicate executor id {executor_id!r}")
        seen_executors.add(executor_id)

    downstream: dict[str, list[str]] = {op.id: [] for op in operators}
    indegree: dict[str, int] = {op.id: 0 for op in operators}
    seen_edges: set[tuple[str, str]] = set()
    for i, (up, down) in enumerate(edges):
        for end, name in ((0, up), (1, down)):
            if name not in index:
                raise FieldError(f"edges[{i}][{end}]", f"unknown operator {name!r}")
        if operators[index[down]].source:
            raise FieldError(f"edges[{i}][1]", f"{down!r} is a source operator; a source has no upstream operator")
        if (up, down) in seen_edges:
            raise FieldError(f"edges[{i}]", f"duplicate edge [{up!r}, {down!r}]")
        seen_edges.add((up, down))
        downstream[up].append(down)
        indegree[down] += 1

    # FIFO from the sources (then any other operator without upstream), in snapshot order:
    # deterministic, and sources get the first sequential ids as in DS2.
    roots = sorted((op for op in operators if indegree[op.id] == 0), key=lambda o: (not o.source, index[o.id]))
    queue = deque(op.id for op in roots)
    order: list[str] = []
    while queue:
        node = queue.popleft()
        order.append(node)
        for nxt in downstream[node]:
            indegree[nxt] -= 1
            if indegree[nxt] == 0:
                queue.append(nxt)
    if len(order) < len(operators):
        raise FieldError("edges", f"cycle through operators {' -> '.join(_find_cycle(downstream, indegree))}")
    return tuple(order)


def _find_cycle(downstream: Mapping[str, list[str]], indegree: Mapping[str, int]) -> list[str]:
    """One cycle among the operators Kahn's algorithm could not order (for the error message)."""
    remaining = {n for n, d in indegree.items() if d > 0}
    node = min(remaining)
    path: list[str] = []
    on_path: dict[str, int] = {}
    while node not in on_path:
        on_path[node] = len(path)
        path.append(node)
        node = next(n for n in downstream[node] if n in remaining)
    return [*path[on_path[node]:], node]


# ---------------------------------------------------------------------------------------------
# Extensions


# Extension figures the policies and guards read (the rest of `extensions` is free-form).
_FRACTIONS = ("cpu_fraction", "task_time_fraction", "memory_fraction")


def check_extensions(value: object, path: str) -> Mapping[str, Any]:
    """`extensions` is free-form, but what the policies and guards read of it must be what they
    expect: fractions in [0, 1], the executors asked for, a query's migratable flag, the executors'
    workers (`cluster`, read by the spread rule), and per-query extensions (a merged snapshot's
    `queries`) of the same form."""
    extensions = object_at(value, path)
    for scope in ("app", "host"):
        if scope in extensions:
            section = object_at(extensions[scope], join(path, scope))
            for key in _FRACTIONS:
                optional_number(section.get(key), join(join(path, scope), key), 0, 1)
    if "app" in extensions:
        optional_integer(extensions["app"].get("requested_executors"), join(path, "app.requested_executors"), 0,
                         MAX_EXECUTORS)
    if "query" in extensions:
        query = object_at(extensions["query"], join(path, "query"))
        if "migratable" in query:
            boolean(query["migratable"], join(path, "query.migratable"))
    if "cluster" in extensions:
        Placement.from_extension(extensions["cluster"], join(path, "cluster"))
    if "queries" in extensions:
        queries_path = join(path, "queries")
        for name, per_query in object_at(extensions["queries"], queries_path).items():
            check_extensions(per_query, join(queries_path, str(name)))
    return extensions
