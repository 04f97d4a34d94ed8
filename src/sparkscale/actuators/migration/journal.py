"""A migration's journal in ZooKeeper (`R/apps/{app}/migration`, JSON) and the metrics it gives
(the record itself, `Journal`, is model/journal.py; its store store/zk_journal.py).

The journal's `next` phase is written before its step runs and its `phases` record when each step
completed; which phases there are, and in which order, is its strategy's phase table. Writes are
fenced: a compare-and-set on the version last read or written and, for a leader, in one
transaction with a check of its own lock znode, so a deposed leader cannot overwrite its successor's
journal (`JournalFenced`, logged as `migration.fenced`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sparkscale.actuators.migration.base import MigrationError, UnknownMigration, get_strategy
from sparkscale.model.executor_shape import ExecutorShape
from sparkscale.model.journal import Journal
from sparkscale.store.zk_journal import WriteFenced, ZkJournal


class JournalFenced(MigrationError):
    """A journal write refused: the writer no longer holds the app's leader lock, or the journal
    changed since it read it (a successor took the migration over). Nothing was written."""


class JournalStore(ZkJournal):
    """The app's journal znode (store/zk_journal.py), its refused writes raised as JournalFenced, a
    MigrationError, for the migration's steps."""

    def write(self, journal: Journal) -> None:
        try:
            super().write(journal)
        except WriteFenced as exc:
            raise JournalFenced(str(exc)) from None


PhaseCallback = Callable[[Journal, str, float], None]


def new_shape(journal: Journal) -> ExecutorShape | None:
    """The executor shape the migration gives the app (None: the shape stays, only the query restarts)."""
    return ExecutorShape(**journal.shape) if journal.shape else None


def operator_commands(journal: Journal) -> tuple[str, str]:
    """The commands that continue (`--resume`) or undo (`--abort`) a journaled migration."""
    base = f"sparkscale migrate --app {journal.app}"
    return f"{base} --resume {journal.id}", f"{base} --abort {journal.id}"


def check_operable(journal: Journal | None, app: str, migration_id: str, verb: str) -> Journal:
    """The app's journal if it is migration `migration_id` and still open; else UnknownMigration
    naming the id and what the journal holds (the CLI's exit 2)."""
    if journal is None or journal.id != migration_id:
        held = f"its journal holds {journal.id} ({journal.status})" if journal else "it has no journal"
        raise UnknownMigration(f"no migration {migration_id} of {app} to {verb}: {held}")
    if not journal.open:
        raise UnknownMigration(f"migration {migration_id} of {app} is {journal.status}: nothing to {verb}")
    return journal


def attention_line(journal: Journal) -> str:
    """One line for an operator: where the migration stopped, why, and how to go on."""
    resume, abort = operator_commands(journal)
    return (f"{journal.app}/{journal.query} migration {journal.id} {journal.status} (reached "
            f"{journal.phase_reached}; {journal.detail or 'no detail'}): {resume} | {abort}")


def phase_metrics(journal: Journal) -> dict[str, Any]:
    """The figures known when the migration ends, in seconds (Shukla & Simmhan §4; None: not
    applicable to the strategy, or not known, then with the reason under `not_measured`). Restore
    ends at the new run's first output (`first_output_at`, for every strategy), never at a phase;
    catch-up, recovery and stabilisation need the query's progress afterwards
    (`sparkscale.monitors.migration_followup`).

    The wait for the running batch to end is `boundary_wait_s` for every strategy (DCR's drain,
    inside CCR's stop, none for DSM's abort), counted in `drain_s` (DCR) and `capture_s` (CCR) alike
    and never in `rebalance_s`."""
    p, d, marks = journal.phases, journal.phase_durations(), journal.marks
    strategy = get_strategy(journal.strategy)
    notes: dict[str, str] = {}
    stop_wait = _stop_wait_s(marks.get("stop"), strategy.waits_for_boundary(), "drained" in p)
    drained = "drained" in d and not marks.get("drain")  # a drain note: the sources could not be paused
    if "drain" in marks and "drained" in d:
        notes["drain_s"] = str(marks["drain"])
    boundary = None
    if not strategy.waits_for_boundary():
        boundary = 0.0  # an abort: the running batch is abandoned and recomputed, not waited for
    elif stop_wait is not None:
        boundary = round(stop_wait + (d.get("drained", 0.0)), 3)
    elif "stopped" in d:
        notes["boundary_wait_s"] = "the stop was answered by a successor (already stopped): its wait is unknown"
    if isinstance(marks.get("stop"), dict) and marks["stop"].get("inside_batch"):
        notes["boundary_wait_s"] = "no boundary came (sources that cannot pause): the stop landed inside a batch"
    # The stop itself (query.stop, after the boundary): part of the rebalance, the seed's kill.
    stop_net = None if "stopped" not in d else round(d["stopped"] - (stop_wait or 0.0), 3)
    rebalance = [x for x in (stop_net, d.get("repartitioned"), d.get("restarted")) if x is not None]
    first_output = marks.get("first_output_at")
    if first_output is None:
        notes["restore_s"] = str(marks.get("first_output") or "no output of the restarted query seen yet")
    return {
        # §4 (1): request -> first output of the restarted query (its first batch with input rows).
        "restore_s": round(first_output - journal.requested_at, 3) if first_output is not None else None,
        # Sources paused (DSM: none) -> the running batch ended, nothing admitted left unprocessed.
        "boundary_wait_s": boundary,
        # §4 (2), DCR: request -> every admitted record processed (pause + boundary wait; its commit is
        # the just-in-time checkpoint).
        "drain_s": round(p["drained"] - journal.requested_at + (stop_wait or 0.0), 3) if drained else None,
        # §4 (2), CCR: request -> the unprocessed input captured (pause + boundary wait + capture), the
        # query's stop itself left to the rebalance.
        "capture_s": (round(p["captured"] - journal.requested_at - stop_net, 3)
                      if "captured" in p and stop_net is not None else None),
        # CCR's capture step alone: writing the unprocessed input's positions (offsets) to the DataStore;
        # the records stay in the replayable input streams and are not copied.
        "capture_positions_s": d.get("captured"),
        # §4 (3): the seed's rebalance (kill and redeploy): the stop less its boundary wait, the state
        # repartition and the restart.
        "rebalance_s": round(sum(rebalance), 3),
        "total_s": round(p["done"] - journal.requested_at, 3) if "done" in p else None,
        # Arrived but not processed at the capture, by position: what the restarted query reads first.
        "captured_records": marks.get("captured_records"),
        # Of those, admitted to a batch but not processed (0 after a stop at a batch boundary).
        "captured_in_flight_records": marks.get("captured_in_flight_records"),
        **({"not_measured": "; ".join(f"{k}: {v}" for k, v in notes.items())} if notes else {}),
    }


def _stop_wait_s(stop: object, waits: bool, drained: bool) -> float | None:
    """Seconds of the stop step spent waiting for the running batch to end, from the agent's answer."""
    if not waits:
        return 0.0
    if isinstance(stop, dict) and stop.get("waited_s") is not None:
        return float(stop["waited_s"])
    return 0.0 if drained else None  # answered "already stopped": after a drain nothing was left to wait for
