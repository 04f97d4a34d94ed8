"""What each daemon last saw of each app, as `sparkscale status` reads it (published each cycle by
daemon/feeds.py through the store, store/redis_status.py: `<prefix><app>:status`, one field per
daemon identity)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Annotated, Any

from pydantic import GetCoreSchemaHandler, JsonValue
from pydantic_core import CoreSchema

from sparkscale.model.codec import Codec, one_of, reshaped
from sparkscale.model.fields import object_at


class Role(StrEnum):
    """A daemon's part for an app: it holds the app's leader lock and acts, or it only watches."""

    LEADER = "leader"
    STANDBY = "standby"


@dataclass(frozen=True)
class QueryView:
    """One query of the app as the last cycle saw it (backlog None: its sources cannot tell)."""

    query: str
    arrival_rate: float | None
    arrival_estimate: str
    backlog_records: float | None
    backlog_estimate: str
    partitions: int | None  # state/shuffle partitions now
    idle: bool = False  # caught up: its latest report was an idle sample (Spark found no new data)

    @classmethod
    def __get_pydantic_core_schema__(cls, source: object, handler: GetCoreSchemaHandler) -> CoreSchema:
        # A figure an older daemon did not write is unknown.
        return reshaped(handler, source, lambda v: {**_UNKNOWN_FIGURES, **object_at(v, "")})

    def to_dict(self) -> dict[str, JsonValue]:
        return QUERY_VIEW_JSON.dump_object(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> QueryView:
        return QUERY_VIEW_JSON.load(data)

    def summary(self) -> str:
        """One line: `counts: 2000 rec/s (position), backlog 12 (source_metrics), 4 partitions`
        (`, idle` after the backlog while the query is caught up and finds no new data)."""
        rate = "-" if self.arrival_rate is None else f"{self.arrival_rate:.4g} rec/s"
        backlog = ("backlog unknown" if self.backlog_records is None
                   else f"backlog {self.backlog_records:g} ({self.backlog_estimate})")
        idle = ", idle" if self.idle else ""
        parts = "" if self.partitions is None else f", {self.partitions} partitions"
        return f"{self.query}: {rate} ({self.arrival_estimate}), {backlog}{idle}{parts}"


_UNKNOWN_FIGURES = {"arrival_rate": None, "arrival_estimate": "unknown", "backlog_records": None,
                    "backlog_estimate": "unknown", "partitions": None}


@dataclass(frozen=True)
class AppStatus:
    daemon: str
    role: Annotated[Role, one_of(Role)]
    epoch: int | None
    cycle_at: float
    result: str  # ok | absent | unreachable | error
    executors: int | None = None
    parallelism: dict[str, int] = field(default_factory=dict)
    last_decision: str | None = None  # one line: mode and what the plan did
    last_decision_at: float | None = None
    last_action: str | None = None
    last_action_at: float | None = None
    detail: str = ""
    queries: tuple[QueryView, ...] = ()
    # What the operator should act on now: the cluster cannot start what the app needs, or the
    # placement policy's warning for the whole cluster (`policies/capacity.py`, `cluster_planner`)
    warnings: tuple[str, ...] = ()

    @classmethod
    def __get_pydantic_core_schema__(cls, source: object, handler: GetCoreSchemaHandler) -> CoreSchema:
        return reshaped(handler, source, _status_in)

    def to_dict(self) -> dict[str, JsonValue]:
        return APP_STATUS_JSON.dump_object(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AppStatus:
        return APP_STATUS_JSON.load(data)


def _status_in(value: object) -> dict[str, JsonValue]:
    """Keys of a newer daemon are ignored; queries that are no object are left out, warnings read
    as text."""
    obj = dict(object_at(value, ""))
    obj["queries"] = [q for q in obj.get("queries") or () if isinstance(q, dict)]
    obj["warnings"] = [str(w) for w in obj.get("warnings") or ()]
    return obj


QUERY_VIEW_JSON: Codec[QueryView] = Codec(QueryView, label="query view")
APP_STATUS_JSON: Codec[AppStatus] = Codec(AppStatus, label="status")
