"""What each daemon last saw of each app, for `sparkscale status` (a Redis hash per app).

`<prefix><app>:status`, one field per daemon identity, the value JSON: role (leader / standby),
epoch, when the cycle ran, its result, the executors and parallelism seen, and the last decision.
Entries of daemons that stopped stay, with their age, until the same identity writes again.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import redis

from sparkscale.protocol.keys import status_key


@dataclass(frozen=True)
class AppStatus:
    daemon: str
    role: str  # leader | standby
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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AppStatus:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


def publish(client: redis.Redis, prefix: str, app: str, status: AppStatus) -> None:
    client.hset(status_key(prefix, app), status.daemon, json.dumps(status.to_dict()))


def read(client: redis.Redis, prefix: str, app: str) -> list[AppStatus]:
    """Every daemon's view of `app`, freshest first."""
    raw = client.hgetall(status_key(prefix, app))
    views = [AppStatus.from_dict(json.loads(value)) for value in raw.values()]
    return sorted(views, key=lambda s: s.cycle_at, reverse=True)


def age(t: float | None, now: float | None = None) -> str:
    """'12 s ago', '3 min ago', or '-'."""
    if t is None:
        return "-"
    seconds = max((now if now is not None else time.time()) - t, 0.0)
    if seconds < 120:
        return f"{seconds:.0f} s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.1f} h ago"
