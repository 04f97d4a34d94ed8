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
import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SNAPSHOT_VERSION = 1



class SnapshotError(ValueError):
    """A snapshot that cannot be used; `path` is the field path (`operators[2].parallelism`)."""

    def __init__(self, path: str, problem: str, source: str | None = None):
        self.path = path
        self.problem = problem
        self.source = source
        where = f"{source}: " if source else ""
        super().__init__(f"{where}{path}: {problem}" if path else f"{where}{problem}")


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
        return _parse_snapshot(data)

    @classmethod
    def from_json(cls, text: str | bytes) -> Snapshot:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SnapshotError("", f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
        return _parse_snapshot(data)


def load_snapshot(path: str | Path) -> Snapshot:
    """Read and validate a snapshot file; errors name the file and the field."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise SnapshotError("", f"cannot read file: {exc.strerror}", source=str(path)) from None
    try:
        return Snapshot.from_json(text)
    except SnapshotError as exc:
        raise SnapshotError(exc.path, exc.problem, source=str(path)) from None


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

_MISSING = object()


def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def _describe(value: Any) -> str:
    text = json.dumps(value) if isinstance(value, (str, int, float, bool, type(None))) else type(value).__name__
    return text if len(text) <= 40 else text[:37] + "..."


def _get(obj: Mapping[str, Any], key: str, path: str, default: Any = _MISSING) -> Any:
    if key in obj:
        return obj[key]
    if default is _MISSING:
        raise SnapshotError(_join(path, key), "missing")
    return default


def _object(value: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise SnapshotError(path, f"expected an object (got {_describe(value)})")
    return value


def _list(value: Any, path: str) -> Sequence[Any]:
    if not isinstance(value, list):
        raise SnapshotError(path, f"expected a list (got {_describe(value)})")
    return value


def _str(value: Any, path: str) -> str:
    if not isinstance(value, str) or not value:
        raise SnapshotError(path, f"expected a non-empty string (got {_describe(value)})")
    return value


def _bool(value: Any, path: str) -> bool:
    if not isinstance(value, bool):
        raise SnapshotError(path, f"expected true or false (got {_describe(value)})")
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _number(value: Any, path: str, minimum: float | None = None, strict: bool = False) -> float:
    ok = _is_number(value) and (minimum is None or (value > minimum if strict else value >= minimum))
    if not ok:
        bound = "" if minimum is None else f" {'>' if strict else '>='} {minimum:g}"
        raise SnapshotError(path, f"expected a number{bound} (got {_describe(value)})")
    return value


def _int(value: Any, path: str, minimum: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise SnapshotError(path, f"expected an integer >= {minimum} (got {_describe(value)})")
    return value


def _optional_number(value: Any, path: str, minimum: float, strict: bool = False) -> float | None:
    return None if value is None else _number(value, path, minimum, strict)


def _extra(obj: Mapping[str, Any], known: set[str]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in known}


def _parse_snapshot(data: Any) -> Snapshot:
    """Fields are checked in the order DESIGN.md lists them, so the first error is the first field."""
    top = _object(data, "snapshot")
    version = _get(top, "version", "")
    if version != SNAPSHOT_VERSION or isinstance(version, bool):
        raise SnapshotError("version", f"expected {SNAPSHOT_VERSION} (got {_describe(version)})")
    app = _str(_get(top, "app", ""), "app")
    query = _str(_get(top, "query", ""), "query")
    taken_at = _number(_get(top, "taken_at", ""), "taken_at")
    window_s = _number(_get(top, "window_s", ""), "window_s", 0, strict=True)
    trigger_interval_s = _optional_number(top.get("trigger_interval_s"), "trigger_interval_s", 0, strict=True)
    batch_duration_s = _optional_number(top.get("batch_duration_s"), "batch_duration_s", 0)
    executor_items = _list(_get(top, "executors", ""), "executors")
    executors = tuple(_parse_executor(item, f"executors[{i}]") for i, item in enumerate(executor_items))
    operator_items = _list(_get(top, "operators", ""), "operators")
    operators = tuple(_parse_operator(item, f"operators[{i}]") for i, item in enumerate(operator_items))
    if not operators:
        raise SnapshotError("operators", "expected at least one operator")
    edges = tuple(_parse_edge(item, f"edges[{i}]") for i, item in enumerate(_list(_get(top, "edges", ""), "edges")))
    extensions = _object(top.get("extensions", {}), "extensions")
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
    obj = _object(value, path)
    return ExecutorFigures(
        id=_str(_get(obj, "id", path), _join(path, "id")),
        host=_str(_get(obj, "host", path), _join(path, "host")),
        cores=_int(_get(obj, "cores", path), _join(path, "cores"), 1),
        extra=_extra(obj, _EXECUTOR_KEYS),
    )


def _parse_operator(value: Any, path: str) -> OperatorFigures:
    obj = _object(value, path)
    op_id = _str(_get(obj, "id", path), _join(path, "id"))
    source = _bool(obj.get("source", False), _join(path, "source"))
    parallelism = _int(_get(obj, "parallelism", path), _join(path, "parallelism"), 1)
    if source:
        arrival = _number(_get(obj, "arrival_rate", path), _join(path, "arrival_rate"), 0)
        backlog: float | None = _number(obj.get("backlog", 0), _join(path, "backlog"), 0)
        if not _bool(obj.get("backlog_known", True), _join(path, "backlog_known")):
            if "backlog" in obj:
                raise SnapshotError(_join(path, "backlog"), "given while backlog_known is false")
            backlog = None
    else:
        arrival = _optional_number(obj.get("arrival_rate"), _join(path, "arrival_rate"), 0)
        backlog = _optional_number(obj.get("backlog"), _join(path, "backlog"), 0)
    instances_path = _join(path, "instances")
    instances = _list(_get(obj, "instances", path), instances_path)
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
    obj = _object(value, path)
    executor = obj.get("executor")
    return InstanceFigures(
        records_in=_number(_get(obj, "records_in", path), _join(path, "records_in"), 0),
        records_out=_number(_get(obj, "records_out", path), _join(path, "records_out"), 0),
        useful_time_s=_number(_get(obj, "useful_time_s", path), _join(path, "useful_time_s"), 0),
        executor=None if executor is None else _str(executor, _join(path, "executor")),
        extra=_extra(obj, _INSTANCE_KEYS),
    )


def _parse_edge(value: Any, path: str) -> tuple[str, str]:
    if not isinstance(value, list) or len(value) != 2:
        raise SnapshotError(path, f"expected a pair [upstream, downstream] of operator ids (got {_describe(value)})")
    return _str(value[0], f"{path}[0]"), _str(value[1], f"{path}[1]")

