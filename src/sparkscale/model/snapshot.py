"""Snapshot version 1: what the monitors saw of one streaming query over one observation window.

The snapshot is the only input of every policy, so it is validated once, when read, with errors
that name the offending field (`operators[2].instances[0].useful_time_s: expected a number >= 0`).
Its JSON is generated from the dataclasses' annotations (`model/codec.py`); the hooks below only
say where the JSON differs from the fields.

Forward compatibility: fields this version does not know are kept (in `extra` at every level, and
the explicit top-level `extensions` object for new figures such as host CPU) and written back by
`to_dict`, so a snapshot from a newer monitor survives a read-write round trip unchanged.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, GetCoreSchemaHandler, JsonValue
from pydantic_core import CoreSchema

from sparkscale.config.apps import MAX_EXECUTOR_CORES, app_name_problem
from sparkscale.model.codec import FLAG, NAME, Check, Codec, between, ordered, reshaped, whole
from sparkscale.model.fields import FieldError, boolean, describe, get, number, object_at, read_json, string
from sparkscale.model.memory_figures import MemoryFigures
from sparkscale.model.snapshot_checks import check_extensions, check_graph

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


def _frozen(mapping: Mapping[str, Any] | None) -> dict[str, JsonValue]:
    """A private deep copy, so that the caller's dict cannot change a frozen snapshot. A plain dict
    (not a MappingProxyType) so that snapshots still pickle and deep-copy; treat it as read-only."""
    return copy.deepcopy(dict(mapping)) if mapping else {}


def _app_name(value: object) -> str:
    app = string(value, "")
    problem = app_name_problem(app)
    if problem:
        raise FieldError("", f"{problem}, as an app name in the config (got {describe(app)})")
    return app


def _version(value: object) -> int:
    if value != SNAPSHOT_VERSION or isinstance(value, bool):
        raise FieldError("", f"expected {SNAPSHOT_VERSION} (got {describe(value)})")
    return SNAPSHOT_VERSION


def _edge(value: object) -> tuple[str, str]:
    if not isinstance(value, list | tuple) or len(value) != 2:
        raise FieldError("", f"expected a pair [upstream, downstream] of operator ids (got {describe(value)})")
    return string(value[0], "[0]"), string(value[1], "[1]")


def _some(operators: tuple[OperatorFigures, ...]) -> tuple[OperatorFigures, ...]:
    if not operators:
        raise FieldError("", "expected at least one operator")
    return operators


def _extensions(value: object) -> Mapping[str, Any]:
    """What the policies and guards read of `extensions` (snapshot_checks.py), the memory figures too."""
    extensions = check_extensions(value, "")
    MemoryFigures.of(extensions)
    return extensions


Records = Annotated[float, between(0, MAX_RECORDS, smallest=SMALLEST)]
Seconds = Annotated[float, between(0, MAX_SECONDS, smallest=SMALLEST)]
Interval = Annotated[float, between(0, MAX_SECONDS, strict=True, smallest=SMALLEST)]  # above 0
Extra = Mapping[str, Any]  # keys this version does not know: arbitrary JSON, written back


def _with_extra(value: object, known: frozenset[str]) -> dict[str, JsonValue]:
    """A JSON object's known keys as fields, the others under `extra`."""
    obj = object_at(value, "")
    return {**{k: v for k, v in obj.items() if k in known}, "extra": {k: v for k, v in obj.items() if k not in known}}


def _flat(data: dict[str, Any]) -> dict[str, JsonValue]:
    """The written fields with `extra`'s keys among them again."""
    extra = data.pop("extra", None) or {}
    return {**data, **extra}


@dataclass(frozen=True)
class ExecutorFigures:
    """One executor the application holds now (the driver is not an executor)."""

    id: Annotated[str, NAME]
    host: Annotated[str, NAME]
    cores: Annotated[int, whole(1, MAX_EXECUTOR_CORES)]
    extra: Extra = field(default_factory=dict, hash=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "extra", _frozen(self.extra))

    @classmethod
    def __get_pydantic_core_schema__(cls, source: object, handler: GetCoreSchemaHandler) -> CoreSchema:
        return reshaped(handler, source, lambda v: _with_extra(v, _EXECUTOR_KEYS), _flat)

    def to_dict(self) -> dict[str, JsonValue]:
        return EXECUTOR_JSON.dump_object(self)


@dataclass(frozen=True)
class InstanceFigures:
    """One operator instance (task slot) over the window: records in and out, and its useful time.

    Useful time is run time less time spent waiting for input or output (DS2's W_u), so
    `records_in / useful_time_s` is the rate the instance could sustain if it never waited.
    """

    records_in: Records
    records_out: Records
    useful_time_s: Seconds
    executor: Annotated[str, NAME] | None = None
    extra: Extra = field(default_factory=dict, hash=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "extra", _frozen(self.extra))

    @classmethod
    def __get_pydantic_core_schema__(cls, source: object, handler: GetCoreSchemaHandler) -> CoreSchema:
        return reshaped(handler, source, lambda v: _with_extra(v, _INSTANCE_KEYS), _flat)

    def to_dict(self) -> dict[str, JsonValue]:
        return INSTANCE_JSON.dump_object(self)


@dataclass(frozen=True)
class OperatorFigures:
    """One operator (a stage of the query): its partitions and its instances' figures.

    `arrival_rate` (records/s from outside) and `backlog` (records waiting) describe sources only.
    A source whose backlog is unknown has `backlog` None, written as `"backlog_known": false` (a
    missing `backlog` has always meant 0, and a null one is refused).
    """

    id: Annotated[str, NAME]
    parallelism: Annotated[int, whole(1, MAX_PARALLELISM)]
    instances: tuple[InstanceFigures, ...] = ()
    source: Annotated[bool, FLAG] = False
    arrival_rate: Annotated[float, between(0, MAX_RATE)] | None = None
    backlog: Annotated[float, between(0, MAX_RECORDS)] | None = None
    extra: Extra = field(default_factory=dict, hash=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "instances", tuple(self.instances))
        object.__setattr__(self, "extra", _frozen(self.extra))

    @classmethod
    def __get_pydantic_core_schema__(cls, source: object, handler: GetCoreSchemaHandler) -> CoreSchema:
        return reshaped(handler, source, _operator_in, _operator_out)

    def to_dict(self) -> dict[str, JsonValue]:
        return OPERATOR_JSON.dump_object(self)


def _operator_in(value: object) -> dict[str, JsonValue]:
    """A source's arrival rate is required and its backlog 0 unless given, or unknown (None) with
    `"backlog_known": false`; `backlog_known` is no field of its own. `instances` may be empty, not
    left out."""
    fields = _with_extra(value, _OPERATOR_KEYS)
    fields.pop("backlog_known", None)
    obj = object_at(value, "")
    get(obj, "instances", "")
    if obj.get("source") is True:
        number(get(obj, "arrival_rate", ""), "arrival_rate", 0, MAX_RATE)
        fields["backlog"] = number(obj.get("backlog", 0), "backlog", 0, MAX_RECORDS)
        if not boolean(obj.get("backlog_known", True), "backlog_known"):
            if "backlog" in obj:
                raise FieldError("backlog", "given while backlog_known is false")
            fields["backlog"] = None
    return fields


def _operator_out(data: dict[str, Any]) -> dict[str, JsonValue]:
    """Optional figures only when known; a source's unknown backlog as `"backlog_known": false`."""
    out = ordered(data, ("id", "source", "parallelism"))
    for key in ("arrival_rate", "backlog"):
        if out[key] is None:
            del out[key]
    if data["backlog"] is None and data["source"]:
        out["backlog_known"] = False
    out["instances"] = out.pop("instances")
    return _flat(out)


@dataclass(frozen=True)
class Snapshot:
    """Snapshot v1 of one query of one application. Structure (ids, edges, acyclicity) is checked
    on construction; field types are checked by `from_dict`."""

    app: Annotated[str, Check(_app_name)]
    query: Annotated[str, NAME]
    taken_at: Annotated[float, between()]
    window_s: Interval
    executors: tuple[ExecutorFigures, ...]
    operators: Annotated[tuple[OperatorFigures, ...], AfterValidator(_some)]
    edges: tuple[Annotated[tuple[str, str], Check(_edge)], ...]
    trigger_interval_s: Interval | None = None
    batch_duration_s: Seconds | None = None
    extensions: Annotated[Mapping[str, Any], Check(_extensions)] = field(
        default_factory=dict, hash=False)
    extra: Extra = field(default_factory=dict, hash=False, repr=False)
    version: Annotated[int, Check(_version)] = SNAPSHOT_VERSION
    _topological: tuple[str, ...] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "executors", tuple(self.executors))
        object.__setattr__(self, "operators", tuple(self.operators))
        object.__setattr__(self, "edges", tuple((str(a), str(b)) for a, b in self.edges))
        object.__setattr__(self, "extensions", _frozen(self.extensions))
        object.__setattr__(self, "extra", _frozen(self.extra))
        if self.version != SNAPSHOT_VERSION:
            raise SnapshotError("version", f"expected {SNAPSHOT_VERSION}, got {self.version!r}")
        try:
            order = check_graph(self.operators, [e.id for e in self.executors], self.edges)
        except FieldError as exc:
            raise _snapshot_error(exc) from None
        object.__setattr__(self, "_topological", order)

    @classmethod
    def __get_pydantic_core_schema__(cls, source: object, handler: GetCoreSchemaHandler) -> CoreSchema:
        return reshaped(handler, source, _snapshot_in, _snapshot_out)

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

    @property
    def memory(self) -> MemoryFigures:
        """The app's memory and GC figures (model/memory_figures.py); None each where not measured."""
        return MemoryFigures.of(self.extensions)

    # -- (de)serialisation --------------------------------------------------------------------

    def to_dict(self) -> dict[str, JsonValue]:
        return SNAPSHOT_JSON.dump_object(self)

    def to_json(self, indent: int | None = None) -> str:
        return SNAPSHOT_JSON.dumps(self, indent)

    @classmethod
    def from_dict(cls, data: object) -> Snapshot:
        return SNAPSHOT_JSON.load(data)

    @classmethod
    def from_json(cls, text: str | bytes) -> Snapshot:
        return SNAPSHOT_JSON.loads(text)


_TOP_KEYS = frozenset({"version", "app", "query", "taken_at", "window_s", "trigger_interval_s", "batch_duration_s",
                       "executors", "operators", "edges", "extensions"})
_TOP_ORDER = ("version", "app", "query", "taken_at", "window_s", "trigger_interval_s", "batch_duration_s",
              "executors", "operators", "edges")
_EXECUTOR_KEYS = frozenset({"id", "host", "cores"})
_OPERATOR_KEYS = frozenset({"id", "source", "parallelism", "arrival_rate", "backlog", "backlog_known", "instances"})
_INSTANCE_KEYS = frozenset({"records_in", "records_out", "useful_time_s", "executor"})


def _snapshot_in(value: object) -> dict[str, JsonValue]:
    """The version first: a snapshot of another version is not read any further."""
    version = get(object_at(value, ""), "version", "")
    try:
        _version(version)
    except FieldError as exc:
        raise FieldError("version", exc.problem) from None
    return _with_extra(value, _TOP_KEYS)


def _snapshot_out(data: dict[str, Any]) -> dict[str, JsonValue]:
    data.pop("_topological", None)
    extensions = data.pop("extensions")
    out = ordered(data, _TOP_ORDER)
    if extensions:
        out["extensions"] = extensions
    return _flat(out)


SNAPSHOT_JSON: Codec[Snapshot] = Codec(Snapshot, SnapshotError, "snapshot")
EXECUTOR_JSON: Codec[ExecutorFigures] = Codec(ExecutorFigures, SnapshotError)
OPERATOR_JSON: Codec[OperatorFigures] = Codec(OperatorFigures, SnapshotError)
INSTANCE_JSON: Codec[InstanceFigures] = Codec(InstanceFigures, SnapshotError)


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
