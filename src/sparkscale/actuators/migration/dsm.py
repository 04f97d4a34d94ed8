"""DSM, the default (Storm) migration: stop at once, abandoning the running batch; repartition without
enforcing the exactly-once sink (the abandoned batch is skipped and recomputed); restart. The sources
keep admitting: the restarted query catches up."""

from __future__ import annotations

from typing import Any

from sparkscale.actuators.migration.base import MigrationStrategy, register_strategy


@register_strategy
class DefaultMigration(MigrationStrategy):
    name = "dsm"
    # Shukla & Simmhan §2 (Background and Motivation): Default Storm Migration, a rebalance at once.
    phases = ("requested", "stopped", "repartitioned", "restarted", "restored", "done")

    def stop_command(self, query: str, timeout_s: float) -> tuple[str, dict[str, Any]]:
        """Abort at once: the running batch is abandoned (recomputed after the restart)."""
        return "abort_query", {"query": query, "hold": True}

    def waits_for_boundary(self) -> bool:
        """No: the abort does not wait for the running batch (its `boundary_wait_s` is 0)."""
        return False

    def enforce_exactly_once_sink(self) -> bool:
        """No: a query stopped mid-batch has a failed last batch; skip it, it is recomputed."""
        return False
