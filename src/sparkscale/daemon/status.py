"""What each daemon last saw of each app, for `sparkscale status` (a Redis hash per app).

`<prefix><app>:status`, one field per daemon identity, the value JSON: role (leader / standby),
epoch, when the cycle ran, its result, the executors and parallelism seen (over all the app's
queries), each query's own figures (`queries`), and the last decision. Entries of daemons that
stopped stay, with their age, until the same identity writes again. The records are
model/app_status.py; the hash is read and written by store/redis_status.py.
"""

from __future__ import annotations

import time

import redis

from sparkscale.model.app_status import APP_STATUS_JSON, QUERY_VIEW_JSON, AppStatus, QueryView, Role
from sparkscale.model.snapshot import Snapshot
from sparkscale.store.redis_status import RedisStatus

__all__ = ["APP_STATUS_JSON", "QUERY_VIEW_JSON", "AppStatus", "QueryView", "Role", "age", "publish", "query_view",
           "read"]


def query_view(snapshot: Snapshot, partitions: int | None) -> QueryView:
    """The figures of one query's (unmerged) snapshot that `status` and the cycle log show."""
    sources = [op for op in snapshot.operators if op.source]
    estimates = snapshot.extensions.get("source")
    estimates = estimates if isinstance(estimates, dict) else {}
    backlog_known = bool(sources) and all(op.backlog is not None for op in sources)
    return QueryView(
        query=snapshot.query,
        arrival_rate=round(sum(op.arrival_rate or 0.0 for op in sources), 3) if sources else None,
        arrival_estimate=str(estimates.get("arrival_estimate", "unknown")),
        backlog_records=sum(op.backlog or 0.0 for op in sources) if backlog_known else None,
        backlog_estimate=str(estimates.get("backlog_estimate", "unknown")) if backlog_known else "unknown",
        partitions=partitions,
        idle=estimates.get("idle") is True,
    )


def publish(client: redis.Redis, prefix: str, app: str, status: AppStatus) -> None:
    """Publish this daemon's view (for a caller without a store, daemon/feeds.py)."""
    RedisStatus(client, prefix).publish(app, status)


def read(client: redis.Redis, prefix: str, app: str) -> list[AppStatus]:
    """Every daemon's view of `app`, freshest first (one that does not parse skipped, logged)."""
    return RedisStatus(client, prefix).read(app)


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
