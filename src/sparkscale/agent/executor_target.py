"""The executor target the agent keeps: set by the daemon's commands (`set_executors`,
`decommission`), published to Redis (the daemon counts executors still starting against it), and
held by trimming executors beyond it, because standalone mode has no scale-in of its own: the master
only stops launching, it never removes."""

from __future__ import annotations

from typing import Any

import redis
import structlog

from sparkscale.agent.args import CommandRefused, bool_arg, int_arg
from sparkscale.agent.executors import SparkExecutors
from sparkscale.config import AppConfig
from sparkscale.protocol.commands import Command
from sparkscale.protocol.keys import executor_target_key

log = structlog.get_logger(__name__)


class ExecutorTarget:
    """The app's executor target (`total`; None: none set) and the commands that change it."""

    def __init__(self, executors: SparkExecutors, app: AppConfig, redis_client: redis.Redis, prefix: str) -> None:
        self.executors = executors
        self.app = app
        self.redis = redis_client
        self.prefix = prefix
        self.total: int | None = None

    def reconcile(self) -> None:
        """Trim executors beyond the target: the master only stops launching, it never removes."""
        if self.total is None:
            return
        active = [e for e in self.executors.list() if e.active]
        surplus = len(active) - self.total
        if surplus > 0:
            victims = [e.id for e in active[-surplus:]]
            removed = self.executors.remove(victims)
            log.info("agent.executors_trimmed", app=self.app.name, target=self.total, removed=removed)

    def set(self, total: int | None) -> None:
        """Remember the executor target and publish it: the daemon counts executors still starting."""
        self.total = total
        key = executor_target_key(self.prefix, self.app.name)
        try:
            if total is None:
                self.redis.delete(key)
            else:
                self.redis.set(key, str(total))
        except redis.RedisError as exc:
            log.warning("agent.target_unpublished", app=self.app.name, target=total, error=str(exc))

    def set_executors(self, command: Command) -> dict[str, Any]:
        total = int_arg(command.args, "total")
        # A surge is the first half of a replacement (one more, then the old one goes): it may
        # exceed max_executors by one for as long as the replacement takes.
        surge = bool_arg(command.args, "surge", False)
        active = [e for e in self.executors.list() if e.active]
        if surge and total != len(active) + 1:
            raise CommandRefused(f"a surge adds exactly one executor ({len(active)} active, asked {total})")
        ceiling = self.app.max_executors + (1 if surge else 0)
        if not self.app.min_executors <= total <= ceiling:
            raise CommandRefused(
                f"total {total} is outside [min_executors, max_executors] = "
                f"[{self.app.min_executors}, {self.app.max_executors}]"
            )
        self.set(total)
        if not self.executors.request_total(total):
            raise CommandRefused(f"Spark did not accept the executor target {total}")
        removed = self.executors.remove([e.id for e in active[total:][::-1]]) if len(active) > total else []
        return {"target": total, "active_before": len(active), "removed": removed, "graceful": self.executors.graceful}

    def decommission(self, command: Command) -> dict[str, Any]:
        active = [e for e in self.executors.list() if e.active]
        active_ids = [e.id for e in active]
        if "executor_ids" in command.args:
            given = command.args["executor_ids"]
            if not isinstance(given, list) or not given:
                raise CommandRefused("executor_ids must be a non-empty list")
            ids = [str(i) for i in given]
            unknown = [i for i in ids if i not in active_ids]
            if unknown:
                raise CommandRefused(f"no active executors with ids {unknown} (active: {active_ids})")
        elif "count" in command.args:
            count = int_arg(command.args, "count")
            if count < 1:
                raise CommandRefused(f"count must be at least 1 (got {count})")
            # The most recently added go first: they hold the least cached state and shuffle output.
            ids = active_ids[::-1][:count]
        else:
            raise CommandRefused("decommission needs 'executor_ids' or 'count'")
        remaining = len(active) - len(ids)
        if remaining < self.app.min_executors:
            raise CommandRefused(
                f"decommissioning {len(ids)} of {len(active)} would leave {remaining}, "
                f"below min_executors {self.app.min_executors}"
            )
        # Lower the target first, or the master would launch a replacement when the executor exits.
        self.set(remaining)
        self.executors.request_total(remaining)
        removed = self.executors.remove(ids)
        if not removed:
            raise CommandRefused(f"Spark decommissioned none of {ids}")
        return {"removed": removed, "target": remaining, "graceful": self.executors.graceful}
