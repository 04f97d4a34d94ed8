"""`sparkscale migrate`: rebalance a stateful query's state partitions and/or restart the executors
in a new shape, through the app's leader or, with none, under the leader lock here; and, for a
journaled migration, `--list`, `--resume ID` and `--abort ID` (the same two paths)."""

from __future__ import annotations

import json
import os
import socket
import sys
from typing import TYPE_CHECKING, Any, NoReturn

import click

from sparkscale.actuators.migration import registered_strategies
from sparkscale.cli.common import EXIT_CONFIG, config_options, leader_lock_or_exit, require_app, zk_or_exit
from sparkscale.config import Config
from sparkscale.monitors.migration_followup import FIGURES, FOLLOW_UP, PENDING, shown

if TYPE_CHECKING:
    from kazoo.client import KazooClient

    from sparkscale.actuators.base import ActionResult, ActuationContext
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
        operate(cfg, app_name, str(resume_id or abort_id), abort_id is not None, Progress(as_json), timeout_s)
    if app_name is None:
        click.echo("give --app to migrate (or --list, --resume ID, --abort ID)", err=True)
        sys.exit(EXIT_CONFIG)
    start(cfg, app_name, query, partitions, executors, executor_cores, executor_memory_mb, strategy,
          Progress(as_json), timeout_s)


class Progress:
    """What `migrate` prints while a migration goes on: each phase and recovery step once, then the result."""

    def __init__(self, as_json: bool):
        self.as_json = as_json
        self.shown: set[Any] = set()

    def show(self, journal: Journal) -> None:
        durations = journal.phase_durations()
        for phase, at in journal.phases.items():
            if (phase, at) in self.shown:
                continue
            self.shown.add((phase, at))  # a phase done again (a resumed migration redoes it) is shown again
            if self.as_json:
                click.echo(json.dumps({"migration": journal.id, "phase": phase, "duration_s": durations.get(phase),
                                       "at": at}))
            else:
                click.echo(f"  {phase:<14} {durations.get(phase, 0.0):8.2f} s")
        for key, step in recovery_steps(journal):
            if key in self.shown:
                continue
            self.shown.add(key)
            if self.as_json:
                click.echo(json.dumps({"migration": journal.id, "recovery": step["way"], "step": step["step"],
                                       "partitions": step["partitions"], "ok": step["ok"], "error": step.get("error")}))
            else:
                outcome = "ok" if step["ok"] else f"FAILED: {step.get('error')}"
                click.echo(f"  recovery {step['way']}: {step['step']} ({step['partitions']} partitions) {outcome}")

    def finish(self, ok: bool, detail: Any, figures: Any) -> NoReturn:
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


def recovery_steps(journal: Journal) -> list[tuple[Any, dict[str, Any]]]:
    """The recovery steps the journal records as ended (ok or not), each with a key of its own."""
    out = []
    for rec in [*journal.marks.get("recoveries", []), journal.marks.get("recovery") or {}]:
        for i, attempt in enumerate(rec.get("attempts", [])):
            for j, step in enumerate(attempt["steps"]):
                if "ok" in step:
                    out.append(((rec["began_at"], i, j), {**step, "way": attempt["way"],
                                                          "partitions": attempt["partitions"]}))
    return out


def start(cfg: Config, app_name: str, query: str | None, partitions: int | None, executors: int | None,
          executor_cores: int | None, executor_memory_mb: int | None, strategy: str | None, progress: Progress,
          timeout_s: float) -> NoReturn:
    """A new migration: through the leading daemon, else under the app's leader lock here."""
    from dataclasses import asdict

    from sparkscale.daemon import manual
    from sparkscale.apps.submit import ExecutorShape, with_stored_shape
    from sparkscale.apps.workloads import workload
    from sparkscale.protocol.queries import read_queries
    from sparkscale.redisconn import connect

    cfg = require_app(cfg, app_name)
    app = with_stored_shape(cfg.app(app_name), connect(cfg.redis), cfg.redis.key_prefix)
    if query is None:
        # The app's one query as its agent lists it; a shipped pipeline's main query before that.
        known = sorted(read_queries(connect(cfg.redis), cfg.redis.key_prefix, app_name))
        if len(known) == 1:
            query = known[0]
        elif not known and app.pipeline is not None and not app.runs_script:
            query = workload(app.pipeline).query
        else:
            click.echo(f"give --query: {app_name} runs {', '.join(known) or 'no query yet'}", err=True)
            sys.exit(EXIT_CONFIG)
    strategy = strategy or cfg.migration.strategy
    shape = None
    if executor_cores is not None or executor_memory_mb is not None:
        shape = ExecutorShape(executor_cores or app.executor_cores, executor_memory_mb or app.executor_memory_mb)
    if partitions is None and shape is None:
        click.echo("nothing to do: give --partitions, or a new shape (--executor-cores, --executor-memory-mb)",
                   err=True)
        sys.exit(EXIT_CONFIG)
    if not progress.as_json:
        click.echo(f"migrating {app_name}/{query} to {partitions or 'the same'} partitions ({strategy})"
                   + (f", executors restarted as {shape.describe()}" if shape else ""))
    zk = zk_or_exit(cfg)
    try:
        if _leader(zk, cfg, app_name) is not None:
            # Only the new migration's journal is shown (one that began before this request is not).
            _through_leader(zk, cfg, app_name, progress, timeout_s, lambda j, since: j.requested_at >= since - 1,
                            partitions, type="migrate", query=query, strategy=strategy, executors=executors,
                            shape=asdict(shape) if shape else None)
        # The same dispatch as the daemon's: logged, migrated, then the executors set, logged.
        result = _under_lock(zk, cfg, app_name, progress, lambda action_log, ctx: manual.run_migration(
            action_log, ctx, query, partitions, f"manual migration by {ctx.identity}", executors=executors),
            strategy=strategy, shape=shape)
        progress.finish(result.status == "done", result.detail, result.figures)
    finally:
        zk.stop()


def operate(cfg: Config, app_name: str | None, migration_id: str, abort: bool, progress: Progress,
            timeout_s: float) -> NoReturn:
    """`--resume ID` / `--abort ID`: find the journal (exit 2 if no app has it open), then through
    the leading daemon, else under the app's leader lock here (`manual.operate_migration`)."""
    from sparkscale.actuators.migration import UnknownMigration, check_operable
    from sparkscale.daemon import manual

    verb = "abort" if abort else "resume"
    zk = zk_or_exit(cfg)
    try:
        journal = find_journal(zk, cfg, app_name, migration_id, verb)
        cfg = require_app(cfg, journal.app)
        if not progress.as_json:
            click.echo(f"{verb} {journal.app}/{journal.query} migration {journal.id} ({journal.status} at "
                       f"{journal.next}: {journal.detail or 'no detail'})")
        if _leader(zk, cfg, journal.app) is not None:
            _through_leader(zk, cfg, journal.app, progress, timeout_s, lambda j, _since: j.id == migration_id,
                            None, type=f"{verb}_migration", migration=migration_id, query=journal.query)

        def carry_out(action_log: Any, ctx: ActuationContext) -> tuple[str, ActionResult]:
            from sparkscale.actuators.migration import JournalStore

            try:  # again, under the lock: another operator may have ended it meanwhile
                current = check_operable(JournalStore(zk, cfg.zookeeper.root, journal.app).read(), journal.app,
                                         migration_id, verb)
            except UnknownMigration as exc:
                click.echo(str(exc), err=True)
                sys.exit(EXIT_CONFIG)
            return manual.operate_migration(action_log, ctx, current, abort)

        result = _under_lock(zk, cfg, journal.app, progress, carry_out)
        progress.finish(result.status == "done", result.detail, result.figures)
    finally:
        zk.stop()


def find_journal(zk: KazooClient, cfg: Config, app_name: str | None, migration_id: str, verb: str) -> Journal:
    """The open journal of migration `migration_id` among `app_name`'s (or every configured app's);
    exit 2 naming the id and what the journals hold when there is none."""
    from sparkscale.actuators.migration import JournalStore, UnknownMigration, check_operable

    names = [app_name] if app_name is not None else [a.name for a in cfg.apps]
    held = []
    for name in names:
        journal = JournalStore(zk, cfg.zookeeper.root, name).read()
        if journal is not None and journal.id == migration_id:
            try:
                return check_operable(journal, name, migration_id, verb)
            except UnknownMigration as exc:
                click.echo(str(exc), err=True)
                sys.exit(EXIT_CONFIG)
        held.append(f"{name}: {journal.id} ({journal.status})" if journal else f"{name}: none")
    click.echo(f"no journaled migration {migration_id} to {verb} (journals: {'; '.join(held) or 'no app'})", err=True)
    sys.exit(EXIT_CONFIG)


def list_migrations(cfg: Config, app_name: str | None, as_json: bool) -> None:
    """`--list`: each app's journaled migration that is not done, or done with follow-up figures
    (each app keeps its last one); figures still pending are measured now from the history."""
    import time

    from sparkscale.actuators.migration import JournalStore
    from sparkscale.daemon.operator_view import migration_dict, migrations_table
    from sparkscale.redisconn import connect

    names = [require_app(cfg, app_name).app(app_name).name] if app_name is not None else [a.name for a in cfg.apps]
    zk = zk_or_exit(cfg)
    try:
        journals = [j for name in names if (j := JournalStore(zk, cfg.zookeeper.root, name).read()) is not None
                    and (j.status != "done" or FOLLOW_UP in j.marks)]
    finally:
        zk.stop()
    now, client = time.time(), connect(cfg.redis)  # connects on a pending follow-up's read only
    follow_ups = {j.id: shown(cfg, client, j, now) for j in journals}
    if as_json:
        click.echo(json.dumps([migration_dict(j, follow_ups[j.id]) for j in journals], indent=2, default=str))
    else:
        click.echo(migrations_table(journals, now, follow_ups))


# -- the two paths --------------------------------------------------------------------------------


def _by() -> str:
    return f"cli:{socket.gethostname()}:{os.getpid()}"


def _leader(zk: KazooClient, cfg: Config, app_name: str) -> str | None:
    from sparkscale.daemon.leader import current_leader

    return current_leader(zk, cfg.zookeeper.root, app_name)


def _through_leader(zk: KazooClient, cfg: Config, app_name: str, progress: Progress, timeout_s: float,
                    mine: Any, to: int | None, **request: Any) -> NoReturn:
    """Ask the leading daemon (a request znode), show the journal's phases as it writes them
    (`mine(journal, since)`: the journal is this request's), and exit with its answer."""
    import time

    from sparkscale.daemon import manual
    from sparkscale.model.journal import Journal
    from sparkscale.protocol.znodes import journal_path

    started = time.time()

    def on_journal(data: bytes | None, _stat: Any) -> None:
        if data:
            journal = Journal.from_json(data)
            if mine(journal, started):
                progress.show(journal)

    zk.DataWatch(journal_path(cfg.zookeeper.root, app_name), on_journal)
    name = manual.submit_request(zk, cfg.zookeeper.root, app_name, to, _by(), timeout_s, **request)
    answer = manual.wait_result(zk, cfg.zookeeper.root, app_name, name, timeout_s)
    if answer is None:
        click.echo(f"no answer from the leader of {app_name} within {timeout_s:g} s; the request was withdrawn",
                   err=True)
        sys.exit(1)
    body = json.loads(answer.detail) if answer.detail.startswith("{") else {"detail": answer.detail}
    if body.get("refused"):
        click.echo(body.get("detail"), err=True)
        sys.exit(EXIT_CONFIG)
    progress.finish(answer.ok, body.get("detail"), body.get("figures"))


def _under_lock(zk: KazooClient, cfg: Config, app_name: str, progress: Progress, act: Any,
                **request: Any) -> ActionResult:
    """Take the app's leader lock (no daemon leads it), `act(action_log, ctx)` at its epoch, release."""
    from sparkscale.actuators.base import ActuationContext
    from sparkscale.daemon import manual
    from sparkscale.daemon.action_log import ActionLog
    from sparkscale.apps.submit import with_stored_shape
    from sparkscale.redisconn import connect

    by = _by()
    election = leader_lock_or_exit(zk, cfg, app_name, by)
    try:
        client = connect(cfg.redis)
        app = with_stored_shape(cfg.app(app_name), client, cfg.redis.key_prefix)
        meta = click.get_current_context().meta
        ctx = ActuationContext(cfg, app, zk, client, election.epoch or 0, lambda: election.is_leader, by,
                               manual.app_restarter(cfg, app_name, meta["config_path"], meta["overrides"]),
                               on_phase=lambda journal, _phase, _s: progress.show(journal), **request)
        _decision, result = act(ActionLog(client, cfg.redis.key_prefix, cfg.action_log), ctx)
        return result
    finally:
        election.release()
