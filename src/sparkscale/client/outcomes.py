"""What the client's calls return."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pydantic import JsonValue

    from sparkscale.apps.submit import PipelineRecord

Note = Callable[[str], None]  # what the client is doing or waiting for, one line at a time


def silent(_line: str) -> None:
    pass


@dataclass(frozen=True)
class Submitted:
    record: PipelineRecord
    driver_pid: int | None
    rest_url: str


@dataclass(frozen=True)
class ScaleOutcome:
    ok: bool
    status: str  # the action's result status ("done", "failed", ...), or done/not done from a leader
    detail: str
    decision_id: str | None
    by: str | None  # the leader that carried it out; None when this client did, under the lock
    epoch: int | None  # the lock's epoch when this client carried it out


@dataclass(frozen=True)
class MigrationOutcome:
    ok: bool
    detail: JsonValue  # a sentence, or what the leader answered
    figures: dict[str, Any] | None
