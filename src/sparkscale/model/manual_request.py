"""An operator's request to the leader of an app and the leader's answer (daemon/manual.py serves
them; the store keeps them as znodes, store/zk_requests.py)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Annotated, TypedDict

from pydantic import AfterValidator, Field, GetCoreSchemaHandler, JsonValue
from pydantic_core import CoreSchema

from sparkscale.config.apps import MAX_EXECUTORS
from sparkscale.model.codec import Codec, between, one_of, reshaped, whole
from sparkscale.model.executor_shape import SHAPE_BOUNDS, ExecutorShape
from sparkscale.model.fields import MAX_TIME, FieldError, get, integer, object_at


class RequestType(StrEnum):
    """What an operator asks the leader for."""

    SCALE_EXECUTORS = "scale_executors"
    MIGRATE = "migrate"
    RESUME_MIGRATION = "resume_migration"  # of a journaled migration, by its id
    ABORT_MIGRATION = "abort_migration"


JOURNAL_REQUESTS = (RequestType.RESUME_MIGRATION, RequestType.ABORT_MIGRATION)  # on a journaled migration
REQUEST_TYPES = tuple(RequestType)
_SHAPE_KEYS = ("executor_cores", "executor_memory_mb")


def _shape(shape: dict[str, int]) -> dict[str, int]:
    """ExecutorShape's fields, all of them, within the shape's bounds (a malformed shape is an
    invalid request)."""
    if sorted(shape) != sorted(_SHAPE_KEYS):
        raise FieldError("", f"expected the keys {', '.join(_SHAPE_KEYS)} (got {', '.join(map(str, shape)) or 'none'})")
    for key, value in shape.items():
        integer(value, key, 1, SHAPE_BOUNDS[key])
    return shape


# A request is read from a znode anyone with access to ZooKeeper may write: every figure is an
# exact JSON integer or a finite number within bounds (a NaN expiry would never expire).
Target = Annotated[int, whole(0, MAX_EXECUTORS)]  # executors, or a migration's partitions
Time = Annotated[float, between(0, MAX_TIME)]


@dataclass(frozen=True)
class ManualRequest:
    """`scale_executors` to `to` executors, or `migrate` `query` to `to` partitions (None: as they
    are) with `strategy`, optionally restarting the app with a new executor shape (`shape`), then
    optionally to `executors` executors; or `resume_migration` / `abort_migration` of the journaled
    migration `migration` (its id). Written without `name` (the znode's)."""

    to: Target | None
    by: str
    requested_at: Time
    expires_at: Time
    name: Annotated[str, Field(exclude=True)] = ""
    type: Annotated[RequestType, one_of(RequestType)] = RequestType.SCALE_EXECUTORS
    query: str | None = None
    strategy: str | None = None
    executors: Target | None = None
    shape: Annotated[dict[str, Annotated[int, whole(1)]], AfterValidator(_shape)] | None = None  # ExecutorShape's
    migration: str | None = None  # a journaled migration's id

    @classmethod
    def __get_pydantic_core_schema__(cls, source: object, handler: GetCoreSchemaHandler) -> CoreSchema:
        return reshaped(handler, source, _request_in)

    @property
    def executor_shape(self) -> ExecutorShape | None:
        return ExecutorShape(**self.shape) if self.shape else None

    def to_json(self) -> bytes:
        return REQUEST_JSON.dumps(self).encode()

    @classmethod
    def from_znode(cls, name: str, data: bytes) -> ManualRequest:
        """Raises a FieldError (a ValueError) naming the field of an invalid request."""
        return replace(REQUEST_JSON.loads(data), name=name)

    @classmethod
    def from_object(cls, name: str, data: object) -> ManualRequest:
        """A request from its parsed JSON (the store's, NaN refused); raises a FieldError."""
        return replace(REQUEST_JSON.load(data), name=name)


def _request_in(value: object) -> dict[str, JsonValue]:
    """A scale request names its target; a journal request its migration; `by` is read as text."""
    obj = {k: v for k, v in object_at(value, "").items() if k != "name"}
    kind = obj.setdefault("type", RequestType.SCALE_EXECUTORS)
    if kind == RequestType.SCALE_EXECUTORS:
        get(obj, "to", "")
    obj.setdefault("to", None)  # a migration's: the partitions as they are
    if kind in JOURNAL_REQUESTS and not isinstance(obj.get("migration"), str):
        raise FieldError("migration", f"a {kind} request names no migration")
    obj["by"] = str(obj.get("by", ""))
    return obj


@dataclass(frozen=True)
class ManualResult:
    ok: bool
    detail: str
    decision_id: str | None = None
    leader: str | None = None

    def to_json(self) -> bytes:
        return RESULT_JSON.dumps(self).encode()

    @classmethod
    def from_json(cls, data: bytes) -> ManualResult:
        return RESULT_JSON.loads(data)


class RequestOptions(TypedDict, total=False):
    """A request's fields beyond its target (`ManualRequest`): what a migration or a journal
    request names."""

    type: RequestType
    query: str | None
    strategy: str | None
    executors: int | None
    shape: dict[str, int] | None
    migration: str | None


REQUEST_JSON: Codec[ManualRequest] = Codec(ManualRequest, label="request")
RESULT_JSON: Codec[ManualResult] = Codec(ManualResult, label="request result")
