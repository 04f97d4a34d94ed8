"""Migrations: a stateful query from N to M state partitions (Shukla & Simmhan, adapted to Spark).

A stateful Structured Streaming query's state partitions are fixed at its first run; changing them
means stopping the query, repartitioning its checkpointed state offline
(`spark._streamingCheckpointManager.repartition`, run by the in-driver agent) and restarting it.
How the stop and restart are done is the strategy (the paper's DSM, DCR and CCR), one module
each, registered by name (base.py: `register_strategy`, `get_strategy`, or a plug-in through the
entry-point group `sparkscale.migration_strategies`):

- DSM (dsm.py; the paper's §2, the default Storm rebalance): stop at once, abandoning the running
  batch; repartition with `enforce_exactly_once_sink=False` (the abandoned batch is skipped and
  recomputed); restart. Sources keep admitting: the restarted query catches up.
- DCR (dcr.py; §3.1, drain-checkpoint-restore): pause the sources; drain (the query finishes all it
  admitted); stop at that clean boundary (the last commit is the just-in-time checkpoint);
  repartition; restart; restore (the new run has loaded its state: the phase, not the metric);
  then resume the sources.
- CCR (ccr.py; §3.2, capture-checkpoint-resume): pause and stop at the next batch boundary in one
  step, without waiting to drain; capture the positions (source offsets and stream positions) of
  what arrived but was not processed into the Redis DataStore (the records stay in the input
  streams); repartition; restart; resume at once: the captured records come first in the ordered
  input streams, so they are replayed before any newer one.

A migration may also give the executors a new shape (cores, memory): Spark fixes both for an
application's life, so then the restart step restarts the whole application (stop the driver,
submit it again with the new shape) instead of only the query; the strategies are the same, the
pause (in Redis) outlives the driver, and the partitions may stay as they are.

Each migration is a journal in ZooKeeper (`R/apps/{app}/migration`, JSON; journal.py) whose `next`
phase is written before its step runs and whose `phases` record when each step completed. The
runner (runner.py) walks the strategy's phase table and knows no strategy by name. Every step is
idempotent (the agent answers "already" for a stopped query, an already repartitioned checkpoint
or a running query), so a daemon that dies at any phase is replaced by one that reads the journal
and completes the migration (`resume`). A failed step never strands the app (recovery.py): before
the state was repartitioned it rolls back (restart with the old partitions, resume the sources);
after it, it finishes forward (`done_degraded`), else rolls back where a repartition back is
possible, else resumes the sources anyway and stops `needs_attention` for the operator's
`sparkscale migrate --resume ID` / `--abort ID` (`MigrationRunner.resume`, `MigrationRunner.abort`).

The seed's metrics (§4), the same definitions for every strategy, in seconds from the request:
`phase_metrics` (journal.py) gives restore (to the new run's first output), the boundary wait,
drain (DCR), capture (CCR) and rebalance when the migration ends; catch-up, recovery and rate
stabilisation come from the query's per-batch progress history from the request on, which is the
monitors' part (`sparkscale.monitors.migration_metrics`, also the first-output finder used here).
"""

from sparkscale.actuators.migration.base import (
    MigrationBusy,
    MigrationError,
    MigrationStrategy,
    RestoreProbe,
    UnknownMigration,
    UnknownStrategy,
    get_strategy,
    phases_of,
    register_strategy,
    registered_strategies,
)
from sparkscale.actuators.migration.journal import (
    JournalFenced,
    JournalStore,
    PhaseCallback,
    attention_line,
    check_operable,
    new_shape,
    operator_commands,
    phase_metrics,
)
from sparkscale.actuators.migration.runner import MigrationRunner

# The built-in strategies register on import, in this order (that of registered_strategies()): not sorted.
from sparkscale.actuators.migration import dsm, dcr, ccr  # noqa: F401  isort: skip

__all__ = [
    "JournalFenced",
    "JournalStore",
    "MigrationBusy",
    "MigrationError",
    "MigrationRunner",
    "MigrationStrategy",
    "PhaseCallback",
    "RestoreProbe",
    "UnknownMigration",
    "UnknownStrategy",
    "attention_line",
    "check_operable",
    "get_strategy",
    "new_shape",
    "operator_commands",
    "phase_metrics",
    "phases_of",
    "register_strategy",
    "registered_strategies",
]
