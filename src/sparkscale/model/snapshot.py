"""Snapshot version 1: what the monitors saw of one streaming query over one observation window.

The snapshot is the only input of every policy, so it is validated once, here, with errors that
name the offending field (`operators[2].instances[0].useful_time_s: expected a number >= 0`).

Forward compatibility: fields this version does not know are kept (in `extra` at every level, and
the explicit top-level `extensions` object for new figures such as host CPU) and written back by
`to_dict`, so a snapshot from a newer monitor survives a read-write round trip unchanged.
"""

from __future__ import annotations

import copy
import json
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkscale.config.apps import MAX_EXECUTOR_CORES, MAX_EXECUTORS, app_name_problem
from sparkscale.model.fields import (
    FieldError,
    boolean,
    describe,
    get,
    integer,
    join,
    list_at,
    number,
    object_at,
    optional_integer,
    optional_number,
    optional_string,
    parse_json,
    read_json,
    string,
)
from sparkscale.model.placement import Placement

SNAPSHOT_VERSION = 1

# Bounds of a snapshot file's figures: far beyond any real stream, yet small enough that a policy's
# arithmetic on them (rates from counts over times, their ratios) stays finite. A measured amount
# other than 0 is at least SMALLEST: dividing by 5e-324 records or seconds overflows to inf.
MAX_RECORDS = 1e15  # records in one window, or waiting
MAX_RATE = 1e12  # records/s
MAX_SECONDS = 1e9  # any duration (31 years)
SMALLEST = 1e-6  # the smallest record count or duration other than 0 (Spark measures milliseconds)
MAX_PARALLELISM = 100_000  # tasks of one stage


class SnapshotError(FieldError):
    """A snapshot that cannot be used; `path` is the field path (`operators[2].parallelism`),
    `source` the file it was read from."""


def _frozen(mapping: Mapping[str, Any] | None) -> dict[str, Any]:
    """A private deep copy, so that the caller's dict cannot change a frozen snapshot. A plain dict
    (not a MappingProxyType) so that snapshots still pickle and deep-copy; treat it as read-only."""
    return copy.deepcopy(dict(mapping)) if mapping else {}


def _thawed(mapping: Mapping[str, Any]) -> dict[str, Any]:
    return copy.deepcopy(dict(mapping))


@dataclass(frozen=True)
class ExecutorFigures:
    """One executor the application holds now (the driver is not an executor)."""

    id: str
    host: str
    cores: int
    extra: Mapping[str, Any] = field(default_factory=dict, hash=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "extra", _frozen(self.extra))

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "host": self.host, "cores": self.cores, **_thawed(self.extra)}


@dataclass(frozen=True)
class InstanceFigures:
    """One operator instance (task slot) over the window: records in and out, and its useful time.

    Useful time is run time less time spent waiting for input or output (DS2's W_u), so
    `records_in / useful_time_s` is the rate the instance could sustain if it never waited.
    """

    records_in: float
    records_out: float
    useful_time_s: float
    executor: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict, hash=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "extra", _frozen(self.extra))

    def to_dict(self) -> dict[str, Any]:
        return {
            "records_in": self.records_in,
            "records_out": self.records_out,
            "useful_time_s": self.useful_time_s,
            "executor": self.executor,
            **_thawed(self.extra),
        }


@dataclass(frozen=True)
class OperatorFigures:
    """One operator (a stage of the query): its partitions and its instances' figures.

    `arrival_rate` (records/s from outside) and `backlog` (records waiting) describe sources only.
    A source whose backlog is unknown has `backlog` None, written as `"backlog_known": false` (a
    missing `backlog` has always meant 0, and a null one is refused).
    """

    id: str
    parallelism: int
    instances: tuple[InstanceFigures, ...] = ()
    source: bool = False
    arrival_rate: float | None = None
    backlog: float | None = None
    extra: Mapping[str, Any] = field(default_factory=dict, hash=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "instances", tuple(self.instances))
        object.__setattr__(self, "extra", _frozen(self.extra))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "source": self.source, "parallelism": self.parallelism}
        if self.arrival_rate is not None:
            out["arrival_rate"] = self.arrival_rate
        if self.backlog is not None:
            out["backlog"] = self.backlog
        elif self.source:
            out["backlog_known"] = False
        out["instances"] = [inst.to_dict() for inst in self.instances]
        out.update(_thawed(self.extra))
        return out


@dataclass(frozen=True)
class Snapshot:
    """Snapshot v1 of one query of one application. Structure (ids, edges, acyclicity) is checked
    on construction; field types are checked by `from_dict`."""

    app: str
    query: str
    taken_at: float
    window_s: float
    executors: tuple[ExecutorFigures, ...]
    operators: tuple[OperatorFigures, ...]
    edges: tuple[tuple[str, str], ...]
    trigger_interval_s: float | None = None
    batch_duration_s: float | None = None
    extensions: Mapping[str, Any] = field(default_factory=dict, hash=False)
    extra: Mapping[str, Any] = field(default_factory=dict, hash=False, repr=False)
    version: int = SNAPSHOT_VERSION
    _topological: tuple[str, ...] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "executors", tuple(self.executors))
        object.__setattr__(self, "operators", tuple(self.operators))
        object.__setattr__(self, "edges", tuple((str(a), str(b)) for a, b in self.edges))
        object.__setattr__(self, "extensions", _frozen(self.extensions))
        object.__setattr__(self, "extra", _frozen(self.extra))
        if self.version != SNAPSHOT_VERSION:
            raise SnapshotError("version", f"expected {SNAPSHOT_VERSION}, got {self.version!r}")
        object.__setattr__(self, "_topological", _check_structure(self))

    # -- queries ------------------------------------------------------------------------------

    def operator(self, operator_id: str) -> OperatorFigures:
        for op in self.operators:
            if op.id == operator_id:
                return op
        raise KeyError(operator_id)

    def topological_order(self) -> tuple[str, ...]:
        """Operator ids, upstream before downstream, sources first (DS2 numbers operators so)."""
        return self._topological

    def upstream(self, operator_id: str) -> tuple[str, ...]:
        return tuple(a for a, b in self.edges if b == operator_id)

    @property
    def cores(self) -> int:
        """Executor cores the application holds now."""
        return sum(e.cores for e in self.executors)

    # -- (de)serialisation --------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "version": self.version,
            "app": self.app,
            "query": self.query,
            "taken_at": self.taken_at,
            "window_s": self.window_s,
            "trigger_interval_s": self.trigger_interval_s,
            "batch_duration_s": self.batch_duration_s,
            "executors": [e.to_dict() for e in self.executors],
            "operators": [o.to_dict() for o in self.operators],
            "edges": [[a, b] for a, b in self.edges],
        }
        if self.extensions:
            out["extensions"] = _thawed(self.extensions)
        out.update(_thawed(self.extra))
        return out

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, data: Any) -> Snapshot:
        try:
            return _parse_snapshot(data)
        except FieldError as exc:
            raise _snapshot_error(exc) from None

    @classmethod
    def from_json(cls, text: str | bytes) -> Snapshot:
        try:
            data = parse_json(text)
        except FieldError as exc:
            raise _snapshot_error(exc) from None
        return cls.from_dict(data)


def _snapshot_error(exc: FieldError) -> SnapshotError:
    return exc if isinstance(exc, SnapshotError) else SnapshotError(exc.path, exc.problem, exc.source)


def load_snapshot(path: str | Path) -> Snapshot:
    """Read and validate a snapshot file; errors name the file and the field."""
    [snapshot] = _load(path, allow_list=False)
    return snapshot


def load_snapshots(path: str | Path) -> list[Snapshot]:
    """A snapshot file: one snapshot, or a JSON list of the snapshots of one app's queries (as
    `sparkscale snapshot` writes); errors name the file and the field (`[1].operators[0].id`)."""
    return _load(path, allow_list=True)


def _load(path: str | Path, allow_list: bool) -> list[Snapshot]:
    try:
        data = read_json(path)
        if not allow_list or not isinstance(data, list):
            return [Snapshot.from_dict(data)]
        if not data:
            raise FieldError("", "an empty list: expected a snapshot or a list of snapshots")
        out: list[Snapshot] = []
        for n, item in enumerate(data):
            if not isinstance(item, Mapping):
                raise FieldError(f"[{n}]", f"expected a snapshot object (got {describe(item)})")
            try:
                snap = Snapshot.from_dict(item)
            except FieldError as exc:
                raise exc.under(f"[{n}]") from None
            if out and snap.app != out[0].app:
                raise FieldError(f"[{n}].app", f"{snap.app!r}, but [0] is of app {out[0].app!r}: a list holds the "
                                 "snapshots of one app's queries")
            if any(s.query == snap.query for s in out):
                raise FieldError(f"[{n}].query", f"query {snap.query!r} appears twice in the list")
            out.append(snap)
        return out
    except FieldError as exc:
        raise _snapshot_error(exc.in_file(str(path))) from None


# ---------------------------------------------------------------------------------------------
# Structure: ids, edges, topological order


def _check_structure(snap: Snapshot) -> tuple[str, ...]:
    """Check ids and edges, and return the topological order (Kahn's algorithm, sources first)."""
    index: dict[str, int] = {}
    for i, op in enumerate(snap.operators):
        if op.id in index:
            raise SnapshotError(f"operators[{i}].id", f"duplicate operator id {op.id!r}")
        index[op.id] = i
    seen_executors: set[str] = set()
    for i, ex in enumerate(snap.executors):
        if ex.id in seen_executors:
            raise SnapshotError(f"executors[{i}].id", f"duplicate executor id {ex.id!r}")
        seen_executors.add(ex.id)

    downstream: dict[str, list[str]] = {op.id: [] for op in snap.operators}
    indegree: dict[str, int] = {op.id: 0 for op in snap.operators}
    seen_edges: set[tuple[str, str]] = set()
    for i, (up, down) in enumerate(snap.edges):
        for end, name in ((0, up), (1, down)):
            if name not in index:
                raise SnapshotError(f"edges[{i}][{end}]", f"unknown operator {name!r}")
        if snap.operators[index[down]].source:
            raise SnapshotError(f"edges[{i}][1]", f"{down!r} is a source operator; a source has no upstream operator")
        if (up, down) in seen_edges:
            raise SnapshotError(f"edges[{i}]", f"duplicate edge [{up!r}, {down!r}]")
        seen_edges.add((up, down))
        downstream[up].append(down)
        indegree[down] += 1

    # FIFO from the sources (then any other operator without upstream), in snapshot order:
    # deterministic, and sources get the first sequential ids as in DS2.
    roots = sorted((op for op in snap.operators if indegree[op.id] == 0), key=lambda o: (not o.source, index[o.id]))
    queue = deque(op.id for op in roots)
    order: list[str] = []
    while queue:
        node = queue.popleft()
        order.append(node)
        for nxt in downstream[node]:
            indegree[nxt] -= 1
            if indegree[nxt] == 0:
                queue.append(nxt)
    if len(order) < len(snap.operators):
        raise SnapshotError("edges", f"cycle through operators {' -> '.join(_find_cycle(downstream, indegree))}")
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
# Parsing with field paths


_TOP_KEYS = {"version", "app", "query", "taken_at", "window_s", "trigger_interval_s", "batch_duration_s",
             "executors", "operators", "edges", "extensions"}
_EXECUTOR_KEYS = {"id", "host", "cores"}
_OPERATOR_KEYS = {"id", "source", "parallelism", "arrival_rate", "backlog", "backlog_known", "instances"}
_INSTANCE_KEYS = {"records_in", "records_out", "useful_time_s", "executor"}
# Extension figures the policies and guards read (the rest of `extensions` is free-form).
_FRACTIONS = ("cpu_fraction", "task_time_fraction", "memory_fraction")


def _extra(obj: Mapping[str, Any], known: set[str]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in known}


def _seconds(value: Any, path: str, strict: bool = False) -> float:
    return number(value, path, 0, MAX_SECONDS, strict=strict, smallest=SMALLEST)


def _parse_snapshot(data: Any) -> Snapshot:
    """Fields are checked in the order DESIGN.md lists them, so the first error is the first field."""
    top = object_at(data, "snapshot")
    version = get(top, "version", "")
    if version != SNAPSHOT_VERSION or isinstance(version, bool):
        raise SnapshotError("version", f"expected {SNAPSHOT_VERSION} (got {describe(version)})")
    app = string(get(top, "app", ""), "app")
    problem = app_name_problem(app)
    if problem:
        raise SnapshotError("app", f"{problem}, as an app name in the config (got {describe(app)})")
    query = string(get(top, "query", ""), "query")
    taken_at = number(get(top, "taken_at", ""), "taken_at")
    window_s = _seconds(get(top, "window_s", ""), "window_s", strict=True)
    trigger = top.get("trigger_interval_s")
    trigger_interval_s = None if trigger is None else _seconds(trigger, "trigger_interval_s", strict=True)
    batch = top.get("batch_duration_s")
    batch_duration_s = None if batch is None else _seconds(batch, "batch_duration_s")
    executor_items = list_at(get(top, "executors", ""), "executors")
    executors = tuple(_parse_executor(item, f"executors[{i}]") for i, item in enumerate(executor_items))
    operator_items = list_at(get(top, "operators", ""), "operators")
    operators = tuple(_parse_operator(item, f"operators[{i}]") for i, item in enumerate(operator_items))
    if not operators:
        raise SnapshotError("operators", "expected at least one operator")
    edges = tuple(_parse_edge(item, f"edges[{i}]") for i, item in enumerate(list_at(get(top, "edges", ""), "edges")))
    extensions = _check_extensions(top.get("extensions", {}), "extensions")
    return Snapshot(
        version=version,
        app=app,
        query=query,
        taken_at=taken_at,
        window_s=window_s,
        trigger_interval_s=trigger_interval_s,
        batch_duration_s=batch_duration_s,
        executors=executors,
        operators=operators,
        edges=edges,
        extensions=extensions,
        extra=_extra(top, _TOP_KEYS),
    )


def _parse_executor(value: Any, path: str) -> ExecutorFigures:
    obj = object_at(value, path)
    return ExecutorFigures(
        id=string(get(obj, "id", path), join(path, "id")),
        host=string(get(obj, "host", path), join(path, "host")),
        cores=integer(get(obj, "cores", path), join(path, "cores"), 1, MAX_EXECUTOR_CORES),
        extra=_extra(obj, _EXECUTOR_KEYS),
    )


def _parse_operator(value: Any, path: str) -> OperatorFigures:
    obj = object_at(value, path)
    op_id = string(get(obj, "id", path), join(path, "id"))
    source = boolean(obj.get("source", False), join(path, "source"))
    parallelism = integer(get(obj, "parallelism", path), join(path, "parallelism"), 1, MAX_PARALLELISM)
    if source:
        arrival = number(get(obj, "arrival_rate", path), join(path, "arrival_rate"), 0, MAX_RATE)
        backlog: float | None = number(obj.get("backlog", 0), join(path, "backlog"), 0, MAX_RECORDS)
        if not boolean(obj.get("backlog_known", True), join(path, "backlog_known")):
            if "backlog" in obj:
                raise SnapshotError(join(path, "backlog"), "given while backlog_known is false")
            backlog = None
    else:
        arrival = optional_number(obj.get("arrival_rate"), join(path, "arrival_rate"), 0, MAX_RATE)
        backlog = optional_number(obj.get("backlog"), join(path, "backlog"), 0, MAX_RECORDS)
    instances_path = join(path, "instances")
    instances = list_at(get(obj, "instances", path), instances_path)
    return OperatorFigures(
        id=op_id,
        source=source,
        parallelism=parallelism,
        arrival_rate=arrival,
        backlog=backlog,
        instances=tuple(_parse_instance(item, f"{instances_path}[{i}]") for i, item in enumerate(instances)),
        extra=_extra(obj, _OPERATOR_KEYS),
    )


def _parse_instance(value: Any, path: str) -> InstanceFigures:
    obj = object_at(value, path)
    return InstanceFigures(
        records_in=number(get(obj, "records_in", path), join(path, "records_in"), 0, MAX_RECORDS, smallest=SMALLEST),
        records_out=number(get(obj, "records_out", path), join(path, "records_out"), 0, MAX_RECORDS,
                           smallest=SMALLEST),
        useful_time_s=_seconds(get(obj, "useful_time_s", path), join(path, "useful_time_s")),
        executor=optional_string(obj.get("executor"), join(path, "executor")),
        extra=_extra(obj, _INSTANCE_KEYS),
    )


def _parse_edge(value: Any, path: str) -> tuple[str, str]:
    if not isinstance(value, list) or len(value) != 2:
        raise SnapshotError(path, f"expected a pair [upstream, downstream] of operator ids (got {describe(value)})")
    return string(value[0], f"{path}[0]"), string(value[1], f"{path}[1]")


def _check_extensions(value: Any, path: str) -> Mapping[str, Any]:
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
            _check_extensions(per_query, join(queries_path, str(name)))
    return extensions
