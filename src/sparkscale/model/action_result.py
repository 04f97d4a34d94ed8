"""What happened to one action (an actuator's report, actuators/base.py), as the action log keeps it.
Here, below the actuators, so that the store (src/sparkscale/store/) reads it without them."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

from pydantic import JsonValue

from sparkscale.model.plan import Action

Status = Literal["done", "failed", "skipped"]


@dataclass(frozen=True)
class ActionResult:
    """What happened to one action. Durations are from the command's sending."""

    action: Action
    status: Status
    detail: str
    command: str | None = None
    ack_s: float | None = None
    confirm_s: float | None = None
    executors_after: int | None = None
    figures: dict[str, Any] | None = None  # e.g. a migration's metrics

    def to_dict(self) -> dict[str, JsonValue]:
        out = asdict(self)
        out["action"] = self.action.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ActionResult:
        return cls(Action.from_dict(data["action"]), data["status"], data.get("detail", ""), data.get("command"),
                   data.get("ack_s"), data.get("confirm_s"), data.get("executors_after"), data.get("figures"))
