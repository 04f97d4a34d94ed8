"""`sparkscale migrate`: rebalance a stateful query's state partitions and/or restart the executors
in a new shape, through the app's leader or, with none, under the leader lock here."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import click

from sparkscale.actuators.migration import registered_strategies
from sparkscale.cli.common import EXIT_CONFIG, config_options, require_app, zk_or_exit
from sparkscale.config import Config


@click.command("migrate")
@config_options
@click.option("--app", "app_name", required=True, help="The managed app.")
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
@click.option("--json", "as_json", is_flag=True, help="One JSON line per phase, then the result.")
@click.option("--timeout-s", type=float, default=900.0, show_default=True, help="How long to wait for the end.")
def migrate_command(cfg: Config, app_name: str, query: str | None, partitions: int | None, executors: int | None,
                    executor_cores: int | None, executor_memory_mb: int | None, strategy: str | None,
                    as_json: bool, timeout_s: float) -> None:
    """Rebalance a stateful query to PARTITIONS state partitions, and/or give the executors a new
    shape (a whole-application restart), showing each phase as it happens.

    With a daemon leading the app the migration runs in it (at its epoch, logged); with none, here,
    under the app's leader lock. Exit 0 when done, 1 when it failed or was rolled back."""
    import os
    import socket
    from dataclasses import asdict

    from sparkscale.actuators.base import ActuationContext
    from sparkscale.actuators.migration import Journal
    from sparkscale.daemon import manual
    from sparkscale.daemon.action_log import ActionLog
    from sparkscale.daemon.leader import LeaderElection, current_leader
    from sparkscale.pipeline.submit import ExecutorShape, with_stored_shape
    from sparkscale.pipeline.workloads import workload
    from sparkscale.protocol.queries import read_queries
    from sparkscale.protocol.znodes import journal_path
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
    by = f"cli:{socket.gethostname()}:{os.getpid()}"
    shown: set[str] = set()

    def show(journal: Journal) -> None:
        durations = journal.phase_durations()
        for phase in journal.phases:
            if phase in shown:
                continue
            shown.add(phase)
            if as_json:
                click.echo(json.dumps({"migration": journal.id, "phase": phase, "duration_s": durations.get(phase),
                                       "at": journal.phases[phase]}))
            else:
                click.echo(f"  {phase:<14} {durations.get(phase, 0.0):8.2f} s")

    def finish(ok: bool, detail: Any, figures: Any) -> None:
        if as_json:
            click.echo(json.dumps({"ok": ok, "detail": detail, "figures": figures}, default=str))
        else:
            click.echo(f"{'done' if ok else 'NOT done'}: {detail}")
            for key, value in (figures or {}).items():
                if not isinstance(value, (dict, list)):
                    click.echo(f"  {key:<18} {value}")
        sys.exit(0 if ok else 1)

    zk = zk_or_exit(cfg)
    try:
        if not as_json:
            click.echo(f"migrating {app_name}/{query} to {partitions or 'the same'} partitions ({strategy})"
                       + (f", executors restarted as {shape.describe()}" if shape else ""))
        leader = current_leader(zk, cfg.zookeeper.root, app_name)
        if leader is not None:
            started = time.time()

            def on_journal(data: bytes | None, _stat: Any) -> None:
                if data:
                    journal = Journal.from_json(data)
                    if journal.requested_at >= started - 1:
                        show(journal)

            zk.DataWatch(journal_path(cfg.zookeeper.root, app_name), on_journal)
            name = manual.submit_request(zk, cfg.zookeeper.root, app_name, partitions, by, timeout_s,
                                         type="migrate", query=query, strategy=strategy, executors=executors,
                                         shape=asdict(shape) if shape else None)
            answer = manual.wait_result(zk, cfg.zookeeper.root, app_name, name, timeout_s)
            if answer is None:
                click.echo(f"no answer from {leader} within {timeout_s:g} s; the request was withdrawn", err=True)
                sys.exit(1)
            body = json.loads(answer.detail) if answer.detail.startswith("{") else {"detail": answer.detail}
            finish(answer.ok, body.get("detail"), body.get("figures"))
        election = LeaderElection(zk, cfg.zookeeper.root, app_name, by)
        if not election.acquire(timeout_s=10.0):
            click.echo(f"could not take the leader lock of {app_name} within 10 s", err=True)
            sys.exit(1)
        try:
            # The same dispatch as the daemon's: logged, migrated, then the executors set, logged.
            meta = click.get_current_context().meta
            ctx = ActuationContext(cfg, app, zk, connect(cfg.redis), election.epoch or 0, lambda: election.is_leader,
                                   by, manual.app_restarter(cfg, app_name, meta["config_path"], meta["overrides"]),
                                   strategy=strategy, shape=shape,
                                   on_phase=lambda journal, _phase, _s: show(journal))
            _decision, result = manual.run_migration(
                ActionLog(connect(cfg.redis), cfg.redis.key_prefix, cfg.action_log), ctx, query, partitions,
                f"manual migration by {by}", executors=executors)
        finally:
            election.release()
        finish(result.status == "done", result.detail, result.figures)
    finally:
        zk.stop()
