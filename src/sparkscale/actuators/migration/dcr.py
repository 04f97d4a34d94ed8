"""DCR, drain-checkpoint-restore: pause the sources; drain (the query finishes all it admitted); stop
at that clean boundary (the last commit is the just-in-time checkpoint); repartition; restart;
restore (the new run has loaded its state); then resume the sources.

The `restored` phase is the seed's INIT (state loaded, sources still paused); the restore *metric*
ends, as for every strategy, at the new run's first output, which comes after the resume (the
runner's `done` step waits for it: `MigrationRunner._await_first_output`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparkscale.actuators.migration.base import MigrationStrategy, RestoreProbe, register_strategy

if TYPE_CHECKING:
    from sparkscale.model.journal import Journal


@register_strategy
class DrainCheckpointRestore(MigrationStrategy):
    name = "dcr"
    # Shukla & Simmhan §3.1 (Drain, Checkpoint and Restore): drain, JIT checkpoint, restore, then resume.
    phases = ("requested", "paused", "drained", "stopped", "repartitioned", "restarted", "restored", "resumed",
              "done")

    def restored(self, probe: RestoreProbe, journal: Journal) -> bool:
        """The new run has left initialisation (its state loaded) and waits for data: the sources
        are still paused, so there is no batch with input to wait for yet (its first output, the end
        of the restore metric, is waited for after the resume)."""
        status = probe.query_status(journal.query)
        return status is not None and status.get("message") != "Initializing sources"
