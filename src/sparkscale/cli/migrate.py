"""`sparkscale migrate`: rebalance a stateful query's state partitions and/or restart the executors
in a new shape, and, for a journaled migration, `--list`, `--resume ID` and `--abort ID`. A thin
layer over the client API (sparkscale/client/migrations.py): it parses, calls and prints."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any, NoReturn

import click

from sparkscale.actuators.migration import registered_strategies
from sparkscale.actuators.migration.base import IDLE_RESTORED_S
from sparkscale.cli.common import EXIT_CONFIG, client, client_errors, config_options
from sparkscale.cli.waiting import Waiting
from sparkscale.config import Config
from sparkscale.monitors.migration_followup import FIGURES, FOLLOW_UP, PENDING

if TYPE_CHECKING:
    from pydantic import JsonValue

    from sparkscale.client import MigrationOutcome
    from sparkscale.model.journal import Journal

@click.command("migrate")
@config_options
@click.option("--app", "app_name", default=None, help="The managed app (needed to start a migration).")
@click.option("--query", default=None, help="The query (default: the app's main query).")
@click.option("--partitions", type=click.IntRange(min=1), default=None,
              help="The new number of state partitions (default: as they are; then give a new shape).")
@click.option("--executors", type=click.IntRange(min=0), default=None, help="Then set this many executors.")
@click.option("--executor-cores", type=click.IntRange(min=1), default=None,
              help="New cores per executor: restarts the whole application (with the same strategy).")
@click.option("--executor-memory-mb", type=click.IntRange(min=256), default=None,
              help="New memory per executor, MiB: restarts the whole application (with the same strategy).")
@click.option("--strategy", type=click.Choice(registered_strategies()), default=None,
              help="How to migrate (default: migration.strategy).")
@click.option("--resume", "resume_id", default=None, metavar="ID",
              help="Continue the journaled migration ID from its last recorded phase to done.")
@click.option("--abort", "abort_id", default=None, metavar="ID",
              help="Undo the journaled migration ID: back to its old partitions where safe, else forward; "
                   "the query running and its sources resumed either way.")
@click.option("--list", "list_open", is_flag=True,
              help="List the journaled migrations that are not done, and the follow-up figures of a done one.")
@click.option("--json", "as_json", is_flag=True, help="One JSON line per phase, then the result.")
@click.option("--timeout-s", type=float, default=900.0, show_default=True, help="How long to wait for the end.")
def migrate_command(cfg: Config, app_name: str | None, query: str | None, partitions: int | None,
                    executors: int | None, executor_cores: int | None, executor_memory_mb: int | None,
                    strategy: str | None, resume_id: str | None, abort_id: str | None, list_open: bool,
                    as_json: bool, timeout_s: float) -> None:
    """Rebalance a stateful query to PARTITIONS state partitions, and/or give the executors a new
    shape (a whole-application restart), showing each phase as it happens.

    With a daemon leading the app the migration runs in it (at its epoch, logged); with none, here,
    under the app's leader lock. A step that fails after the repartition is recovered: forward
    (done_degraded, counted as done), else back to the old partitions (rolled back), else the
    migration needs attention: go on with --resume ID or --abort ID (--list shows them). Exit 0
    when done (or, for --abort, aborted), 1 when it failed, was rolled back or needs attention, 2
    for bad arguments or an unknown migration ID."""
    modes = [name for name, on in (("--resume", resume_id), ("--abort", abort_id), ("--list", list_open)) if on]
    if modes:
        given = [name for name, value in (("--query", query), ("--partitions", partitions), ("--executors", executors),
                                          ("--executor-cores", executor_cores),
                                          ("--executor-memory-mb", executor_memory_mb), ("--strategy", strategy))
                 if value is not None]
        if len(modes) > 1 or given:
            click.echo(f"{', '.join(modes + given)}: --resume, --abort and --list each go alone (with --app, "
                       "--json, --timeout-s at most)", err=True)
            sys.exit(EXIT_CONFIG)
        if list_open:
            list_migrations(cfg, app_name, as_json)
            return
        progress = Progress(as_json, f"the leader or the lock of the app with migration {resume_id or abort_id}")
        with client_errors(), progress.waiting:
            outcome = client(cfg).operate_migration(app_name, str(resume_id or abort_id), abort_id is not None,
                                                    timeout_s, on_journal=progress.show, note=progress.note)
        progress.finish_with(outcome)
    if app_name is None:
        click.echo("give --app to migrate (or --list, --resume ID, --abort ID)", err=True)
        sys.exit(EXIT_CONFIG)
    from sparkscale.client.migrations import MigrationRequest

    progress = Progress(as_json, f"{app_name}'s leader or lock, then the migration to start")
    request = MigrationRequest(app_name, query, partitions, executors, executor_cores, executor_memory_mb, strategy)
    with client_errors(), progress.waiting:
        outcome = client(cfg).migrate(request, timeout_s, on_journal=progress.show, note=progress.note)
    progress.finish_with(outcome)


class Progress:
    """What `migrate` prints while a migration goes on: each phase and recovery step once, then the
    result; and on stderr, while it waits, which phase is under way (`waiting`, cli/waiting.py)."""

    def __init__(self, as_json: bool, first: str = "the migration to start"):
        self.as_json = as_json
        self.shown: set[tuple[object, ...]] = set()  # phases (phase, at) and recovery steps shown
        self.waiting = Waiting(first)

    def show(self, journal: Journal) -> None:
        echo = self.waiting.echo  # clear of the spinner's line on a terminal
        durations = journal.phase_durations()
        for phase, at in journal.phases.items():
            if (phase, at) in self.shown:
                continue
            self.shown.add((phase, at))  # a phase done again (a resumed migration redoes it) is shown again
            if self.as_json:
                echo(json.dumps({"migration": journal.id, "phase": phase, "duration_s": durations.get(phase),
                                 "at": at}))
            else:
                echo(f"  {phase:<14} {durations.get(phase, 0.0):8.2f} s")
        for key, step in recovery_steps(journal):
            if key in self.shown:
                continue
            self.shown.add(key)
            if self.as_json:
                echo(json.dumps({"migration": journal.id, "recovery": step["way"], "step": step["step"],
                                 "partitions": step["partitions"], "ok": step["ok"], "error": step.get("error")}))
            else:
                outcome = "ok" if step["ok"] else f"FAILED: {step.get('error')}"
                echo(f"  recovery {step['way']}: {step['step']} ({step['partitions']} partitions) {outcome}")
        self.waiting.waiting_for(under_way(journal))

    def note(self, line: str) -> None:
        """What the client is about to do (not in --json, whose lines are phases and the result)."""
        if not self.as_json:
            self.waiting.echo(line)

    def finish_with(self, outcome: MigrationOutcome) -> NoReturn:
        self.finish(outcome.ok, outcome.detail, outcome.figures)

    def finish(self, ok: bool, detail: JsonValue, figures: dict[str, Any] | None) -> NoReturn:
        if self.as_json:
            click.echo(json.dumps({"ok": ok, "detail": detail, "figures": figures}, default=str))
        else:
            click.echo(f"{'done' if ok else 'NOT done'}: {detail}")
            pending = (figures or {}).get(FOLLOW_UP) == PENDING
            for key, value in (figures or {}).items():
                if not isinstance(value, (dict, list)) and not (pending and value is None and key in FIGURES):
                    click.echo(f"  {key:<18} {value}")
            if pending:  # the migration is done; what follows it is measured without keeping the caller
                click.echo("  catch-up, recovery and stabilisation come later: `sparkscale migrate --list` shows "
                           "them (and `sparkscale explain` this decision)")
        sys.exit(0 if ok else 1)


# What each phase's step waits for (actuators/migration/runner.py's steps), as a wait names it.
WAITS_FOR = {
    "requested": "the migration to be journaled",
    "paused": "the sources to pause",
    "drained": "the query to finish the input it admitted",
    "stopped": "the query to stop at a batch boundary",
    "captured": "the unprocessed input to be captured",
    "repartitioned": "the state to be repartitioned",
    "restarted": "the query (or, for a new shape, the application) to restart",
    "resumed": "the sources to resume",
    "restored": "the restarted query to restore its state",
    "done": f"the restarted query's first batch with input, which times the restore (or {IDLE_RESTORED_S:g} s "
            "without input; at most migration.phase_timeout_s)",
}


def under_way(journal: Journal) -> str:
    """What a wait on the migration waits for now: its phase's step, or, once it has ended, the
    rest of the request (an executor count set after it waits up to actuator.confirm_timeout_s)."""
    if journal.active:
        step = WAITS_FOR.get(journal.next, journal.next)
        return f"migration {journal.id} ({journal.status}, phase {journal.next}): {step}"
    return (f"the rest of the request: migration {journal.id} is {journal.status} (then the executor count, "
            "if given, until Spark shows it)")


def recovery_steps(journal: Journal) -> list[tuple[tuple[object, int, int], dict[str, Any]]]:
    """The recovery steps the journal records as ended (ok or not), each with a key of its own."""
    out: list[tuple[tuple[object, int, int], dict[str, Any]]] = []
    for rec in [*journal.marks.get("recoveries", []), journal.marks.get("recovery") or {}]:
        for i, attempt in enumerate(rec.get("attempts", [])):
            for j, step in enumerate(attempt["steps"]):
                if "ok" in step:
                    out.append(((rec["began_at"], i, j), {**step, "way": attempt["way"],
                                                          "partitions": attempt["partitions"]}))
    return out


def list_migrations(cfg: Config, app_name: str | None, as_json: bool) -> None:
    """`--list`: each app's journaled migration that is not done, or done with follow-up figures."""
    import time

    from sparkscale.daemon.operator_view import migration_dict, migrations_table

    with client_errors():
        found = client(cfg).open_migrations(app_name)
    journals, follow_ups = [m.journal for m in found], {m.journal.id: m.follow_up for m in found}
    if as_json:
        click.echo(json.dumps([migration_dict(j, follow_ups[j.id]) for j in journals], indent=2, default=str))
    else:
        click.echo(migrations_table(journals, time.time(), follow_ups))
