"""The `sparkscale` command line. Every command that reads config takes `--config` and `--set`."""

from __future__ import annotations

import functools
import json
import sys
import time
from collections.abc import Callable
from typing import Any

import click
import redis

from sparkscale.config import PIPELINES, Config, ConfigError, load_config
from sparkscale.logsetup import configure_logging

EXIT_CONFIG = 2
EXIT_ENVIRONMENT = 3

CONFIG_ENV = "SPARKSCALE_CONFIG"


def _config_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add --config/--set and hand the command a loaded, validated Config (exit 2 if it is not)."""

    @click.option(
        "--config", "config_path", type=click.Path(dir_okay=False), envvar=CONFIG_ENV, default=None,
        help=f"YAML config file (default: built-in defaults; env {CONFIG_ENV}).",
    )
    @click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a dotted config key.")
    @functools.wraps(func)
    def wrapper(config_path: str | None, overrides: tuple[str, ...], **kwargs: Any) -> Any:
        cfg = _load_or_exit(config_path, overrides)
        # Commands that start other processes (a pipeline's driver) hand these on unchanged.
        click.get_current_context().meta.update(config_path=config_path, overrides=list(overrides))
        configure_logging(cfg.logging)
        return func(cfg, **kwargs)

    return wrapper


def _load_or_exit(path: str | None, overrides: tuple[str, ...]) -> Config:
    try:
        return load_config(path, overrides)
    except ConfigError as exc:
        click.echo(f"invalid config:\n{exc}", err=True)
        sys.exit(EXIT_CONFIG)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="sparkscale")
def main() -> None:
    """sparkscale: autoscaling for stateful Spark Structured Streaming pipelines."""


@main.command("check-config")
@click.argument("path", type=click.Path(dir_okay=False))
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a dotted config key.")
@click.option("--show", is_flag=True, help="Print the effective config (defaults filled in) as JSON.")
def check_config(path: str, overrides: tuple[str, ...], show: bool) -> None:
    """Validate a config file: exit 0 if usable, 2 naming the file, key and problem if not."""
    cfg = _load_or_exit(path, overrides)
    if show:
        click.echo(json.dumps(cfg.model_dump(mode="json"), indent=2))
    else:
        click.echo(f"{path}: ok ({len(cfg.apps)} app(s), policy {cfg.policy.name})")


@main.command("run")
@_config_options
@click.option("--max-cycles", type=click.IntRange(min=1), default=None, help="Stop after N cycles per app.")
def run(cfg: Config, max_cycles: int | None) -> None:
    """Run the daemon in the foreground (what systemd runs)."""
    from sparkscale.daemon.service import Daemon

    meta = click.get_current_context().meta
    sys.exit(Daemon(cfg, max_cycles=max_cycles, config_path=meta["config_path"], overrides=meta["overrides"]).run())


@main.command("status")
@_config_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def status(cfg: Config, as_json: bool) -> None:
    """The leader of each managed app, its executors and parallelism, and the last decision."""
    from sparkscale.daemon import status as app_status
    from sparkscale.daemon.leader import current_leader
    from sparkscale.daemon.operator_view import AppLine, pick_view, status_table
    from sparkscale.redisconn import connect

    client = connect(cfg.redis)
    zk = _zk_or_exit(cfg)
    try:
        lines = []
        for app in cfg.apps:
            leader = current_leader(zk, cfg.zookeeper.root, app.name)
            views = app_status.read(client, cfg.redis.key_prefix, app.name)
            lines.append(AppLine(app.name, leader, pick_view(leader, views)))
    except redis.RedisError as exc:
        click.echo(f"Redis at {cfg.redis.host}:{cfg.redis.port} is unreachable: {exc}", err=True)
        sys.exit(1)
    finally:
        zk.stop()
    if as_json:
        click.echo(json.dumps([line.to_dict() for line in lines], indent=2))
    else:
        click.echo(status_table(lines, time.time()))


@main.command("actions")
@_config_options
@click.option("--app", "app_name", default=None, help="Only this app.")
@click.option("--since", default="1d", show_default=True, help="How far back: 30s, 15m, 2h, 1d or an ISO time.")
@click.option("--all", "show_all", is_flag=True, help="Also the decisions that changed nothing.")
@click.option("--limit", type=click.IntRange(min=1), default=100, show_default=True, help="At most the newest N.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON lines instead of a table.")
def actions(cfg: Config, app_name: str | None, since: str, show_all: bool, limit: int, as_json: bool) -> None:
    """The action log: when, what, why, expected against actual outcome."""
    from sparkscale.daemon.action_log import ActionLog
    from sparkscale.daemon.operator_view import actions_table, parse_since
    from sparkscale.redisconn import connect

    try:
        since_s = parse_since(since, time.time())
    except ValueError as exc:
        click.echo(str(exc), err=True)
        sys.exit(EXIT_CONFIG)
    try:
        logged = ActionLog(connect(cfg.redis), cfg.redis.key_prefix, cfg.action_log).read(app_name, since_s)
    except redis.RedisError as exc:
        click.echo(f"Redis at {cfg.redis.host}:{cfg.redis.port} is unreachable: {exc}", err=True)
        sys.exit(1)
    if not show_all:
        logged = [d for d in logged if d.decision.plan.actions]
    logged = logged[-limit:]
    if as_json:
        for d in logged:
            click.echo(json.dumps(d.to_dict(), default=str))
    else:
        click.echo(actions_table(logged))


@main.command("blocklist")
@_config_options
@click.option("--app", "app_name", default=None, help="Only this app.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def blocklist(cfg: Config, app_name: str | None, as_json: bool) -> None:
    """Actions blocked for an app and diagnosis because they fell short of their expected outcome."""
    from sparkscale.daemon.action_log import BlocklistStore
    from sparkscale.daemon.operator_view import blocklist_table
    from sparkscale.redisconn import connect

    now = time.time()
    try:
        entries = BlocklistStore(connect(cfg.redis), cfg.redis.key_prefix).entries(now, app_name)
    except redis.RedisError as exc:
        click.echo(f"Redis at {cfg.redis.host}:{cfg.redis.port} is unreachable: {exc}", err=True)
        sys.exit(1)
    if as_json:
        click.echo(json.dumps([e.to_dict() for e in entries], indent=2))
    else:
        click.echo(blocklist_table(entries, now))


@main.command("scale-executors")
@_config_options
@click.option("--app", "app_name", required=True, help="The managed app.")
@click.option("--to", "to", type=click.IntRange(min=0), required=True, help="The executor count wanted.")
@click.option("--timeout-s", type=float, default=300.0, show_default=True,
              help="How long to wait for the change to be carried out.")
def scale_executors(cfg: Config, app_name: str, to: int, timeout_s: float) -> None:
    """Set an app's executor count by hand, through the leader lock and the action log.

    With a daemon leading the app, the request goes to it (it acts at its epoch and logs it); with
    none, this command takes the lock itself. Exit 0 when done, 1 when refused or failed."""
    import os
    import socket

    from sparkscale.actuators.executors import ExecutorActuator
    from sparkscale.daemon import manual
    from sparkscale.daemon.action_log import ActionLog
    from sparkscale.daemon.leader import LeaderElection, current_leader
    from sparkscale.monitors.spark_rest import SparkRestClient, SparkRestError
    from sparkscale.pipeline.submit import driver_ui_port
    from sparkscale.redisconn import connect

    cfg = _require_app(cfg, app_name)
    app = cfg.app(app_name)
    by = f"cli:{socket.gethostname()}:{os.getpid()}"
    zk = _zk_or_exit(cfg)
    try:
        leader = current_leader(zk, cfg.zookeeper.root, app_name)
        if leader is not None:
            click.echo(f"{app_name} is led by {leader}: asking it to scale to {to} executors")
            name = manual.submit_request(zk, cfg.zookeeper.root, app_name, to, by, timeout_s)
            answer = manual.wait_result(zk, cfg.zookeeper.root, app_name, name, timeout_s)
            if answer is None:
                click.echo(f"no answer within {timeout_s:g} s; the request was withdrawn", err=True)
                sys.exit(1)
            click.echo(f"{'done' if answer.ok else 'not done'}: {answer.detail} (decision {answer.decision_id}, "
                       f"by {answer.leader})")
            sys.exit(0 if answer.ok else 1)
        election = LeaderElection(zk, cfg.zookeeper.root, app_name, by)
        if not election.acquire(timeout_s=10.0):
            click.echo(f"could not take the leader lock of {app_name} within 10 s", err=True)
            sys.exit(1)
        try:
            rest = SparkRestClient.for_port(driver_ui_port(cfg, app), timeout_s=cfg.spark.rest_timeout_s)
            actuator = ExecutorActuator(zk, cfg.zookeeper.root, app_name, rest, cfg.actuator,
                                        lambda: election.is_leader)
            try:
                current = len(actuator.active_executor_ids())
            except SparkRestError as exc:
                click.echo(f"{app_name} does not answer on its Spark REST API: {exc}", err=True)
                sys.exit(1)
            decision_id, result = manual.carry_out(
                ActionLog(connect(cfg.redis), cfg.redis.key_prefix, cfg.action_log), actuator, app, to, by,
                current=current, identity=by, epoch=election.epoch or 0, snapshot_id="", at=time.time())
        finally:
            election.release()
        click.echo(f"{result.status}: {result.detail} (decision {decision_id}, epoch {election.epoch})")
        sys.exit(0 if result.status == "done" else 1)
    finally:
        zk.stop()


@main.group("cluster")
def cluster() -> None:
    """The embedded local environment: Spark standalone master and workers, Redis, ZooKeeper."""


@cluster.command("up")
@_config_options
def cluster_up(cfg: Config) -> None:
    """Start what is not running and wait until every service answers (idempotent)."""
    from sparkscale.localenv import EnvironmentStartError, LocalEnvironment, PreflightError

    started = time.monotonic()
    try:
        statuses = LocalEnvironment(cfg).up()
    except PreflightError as exc:
        click.echo(f"cannot start the embedded environment; this machine lacks:\n{exc}", err=True)
        sys.exit(EXIT_ENVIRONMENT)
    except EnvironmentStartError as exc:
        click.echo(f"cannot start the embedded environment: {exc}", err=True)
        sys.exit(EXIT_ENVIRONMENT)
    _print_status(statuses)
    click.echo(f"up in {time.monotonic() - started:.1f} s; run dir {cfg.cluster.run_path}")


@cluster.command("down")
@_config_options
def cluster_down(cfg: Config) -> None:
    """Stop exactly the processes `cluster up` started."""
    from sparkscale.localenv import LocalEnvironment

    stopped = LocalEnvironment(cfg).down()
    click.echo(f"stopped: {', '.join(stopped)}" if stopped else "nothing was running")


@cluster.command("status")
@_config_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def cluster_status(cfg: Config, as_json: bool) -> None:
    """Show what runs, with pids and ports; exit 1 if any service is down or not answering."""
    from dataclasses import asdict

    from sparkscale.localenv import LocalEnvironment

    statuses = LocalEnvironment(cfg).status()
    if as_json:
        click.echo(json.dumps([asdict(s) for s in statuses], indent=2))
    else:
        _print_status(statuses)
    sys.exit(0 if all(s.running and s.answers for s in statuses) else 1)


@main.group("pipeline")
def pipeline() -> None:
    """The managed PySpark pipelines: submit one to the master, stop it, see which run."""


@pipeline.command("submit")
@click.argument("app_name")
@_config_options
@click.option("--wait-s", type=float, default=180.0, show_default=True, help="How long to wait for the queries to run.")
def pipeline_submit(cfg: Config, app_name: str, wait_s: float) -> None:
    """Submit the managed app APP_NAME (its pipeline, per the config) and wait until its queries run."""
    from sparkscale.pipeline.submit import PipelineError, submit

    cfg = _require_app(cfg, app_name)
    meta = click.get_current_context().meta
    try:
        record = submit(cfg, app_name, meta["config_path"], meta["overrides"], wait_s=wait_s)
    except PipelineError as exc:
        click.echo(f"cannot submit {app_name}: {exc}", err=True)
        sys.exit(1)
    click.echo(f"{app_name} runs: driver pid {record.pid}, REST API http://127.0.0.1:{record.ui_port}/api/v1, "
               f"log {record.log}")


@pipeline.command("stop")
@click.argument("app_name")
@_config_options
def pipeline_stop(cfg: Config, app_name: str) -> None:
    """Stop the driver of APP_NAME (and its executors with it)."""
    from sparkscale.pipeline.submit import stop

    cfg = _require_app(cfg, app_name)
    click.echo(f"{app_name} stopped" if stop(cfg, app_name) else f"{app_name} was not running")


@main.command("loadgen")
@_config_options
@click.option("--app", "app_name", required=True, help="The managed app whose input streams to feed.")
@click.option("--profile", required=True,
              help="Rate profile: 1000 | constant:R[@Ds] | steps:1000@60s,4000@120s | ramp:A-B@Ds | "
                   "sine:BASE,AMP,PERIODs[@Ds] | diurnal:PEAK@Mm")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the record generator.")
@click.option("--max-duration-s", type=float, default=None, help="Stop after this many seconds at the latest.")
def loadgen(cfg: Config, app_name: str, profile: str, seed: int, max_duration_s: float | None) -> None:
    """Write generated records to an app's input streams at a rate that follows a profile.

    Logs the achieved rate every second (event loadgen.second) and warns when it falls behind."""
    import signal
    import threading

    from sparkscale.pipeline.loadgen import run_loadgen

    cfg = _require_app(cfg, app_name)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        summary = run_loadgen(cfg, app_name, profile, seed=seed, max_duration_s=max_duration_s, stop=stop)
    except ValueError as exc:
        click.echo(str(exc), err=True)
        sys.exit(EXIT_CONFIG)
    except KeyboardInterrupt:
        sys.exit(130)
    click.echo(f"run {summary.run_id}: sent {summary.records_sent} records in {summary.duration_s:.1f} s "
               f"({summary.records_sent / max(summary.duration_s, 1e-9):.0f}/s; target {summary.target_records})")


@main.command("verify")
@_config_options
@click.option("--app", "app_name", required=True, help="The managed app to check.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def verify(cfg: Config, app_name: str, as_json: bool) -> None:
    """Compare an app's output with a direct computation over everything produced for it.

    Prints lost, duplicated and total counts; exits 1 if anything was lost or duplicated. Run it
    once the app has processed all its input (it says so when it has not)."""
    from sparkscale.pipeline.check import unprocessed_records, verify_app
    from sparkscale.redisconn import connect

    cfg = _require_app(cfg, app_name)
    client = connect(cfg.redis)
    pending = unprocessed_records(client, cfg, cfg.app(app_name))
    client.close()
    result = verify_app(cfg, app_name)
    if as_json:
        click.echo(json.dumps({**result.to_dict(), "unprocessed_records": pending}, indent=2))
    else:
        click.echo(f"{app_name}: total expected {result.total_expected}, arrived {result.total_arrived}, "
                   f"lost {result.lost}, duplicated {result.duplicated}, unexpected {result.unexpected}")
        if result.mismatched_keys:
            click.echo(f"mismatched keys: {', '.join(result.mismatched_keys[:10])}"
                       + (f" (+{len(result.mismatched_keys) - 10} more)" if len(result.mismatched_keys) > 10 else ""))
        if pending:
            click.echo(f"note: {pending} input records are not processed yet; differences may only be lag")
    sys.exit(0 if result.ok else 1)


def _require_app(cfg: Config, app_name: str) -> Config:
    """`cfg` with `app_name` in it (a bare pipeline name gets a default app); exit 2 if unknown."""
    try:
        return cfg.with_app(app_name)
    except KeyError as exc:
        click.echo(f"{exc.args[0]}; a pipeline name ({', '.join(PIPELINES)}) also works", err=True)
        sys.exit(EXIT_CONFIG)


@main.command("migrate")
@_config_options
@click.option("--app", "app_name", required=True, help="The managed app.")
@click.option("--query", default=None, help="The query (default: the app's main query).")
@click.option("--partitions", type=click.IntRange(min=1), default=None,
              help="The new number of state partitions (default: as they are; then give a new shape).")
@click.option("--executors", type=click.IntRange(min=0), default=None, help="Then set this many executors.")
@click.option("--executor-cores", type=click.IntRange(min=1), default=None,
              help="New cores per executor: restarts the whole application (with the same strategy).")
@click.option("--executor-memory-mb", type=click.IntRange(min=256), default=None,
              help="New memory per executor, MiB: restarts the whole application (with the same strategy).")
@click.option("--strategy", type=click.Choice(["dsm", "dcr", "ccr"]), default=None,
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

    from sparkscale.actuators.executors import ExecutorActuator
    from sparkscale.actuators.migration import Journal
    from sparkscale.daemon import manual
    from sparkscale.daemon.action_log import ActionLog
    from sparkscale.daemon.leader import LeaderElection, current_leader
    from sparkscale.daemon.migrations import app_restarter, run_migration
    from sparkscale.monitors.spark_rest import SparkRestClient
    from sparkscale.pipeline.submit import ExecutorShape, driver_ui_port, with_stored_shape
    from sparkscale.pipeline.workloads import workload
    from sparkscale.protocol.znodes import journal_path
    from sparkscale.redisconn import connect

    cfg = _require_app(cfg, app_name)
    app = with_stored_shape(cfg.app(app_name), connect(cfg.redis), cfg.redis.key_prefix)
    query = query or workload(app.pipeline).query
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

    zk = _zk_or_exit(cfg)
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
            _decision, _journal, result = run_migration(
                cfg, app, zk, connect(cfg.redis), ActionLog(connect(cfg.redis), cfg.redis.key_prefix, cfg.action_log),
                election.epoch or 0, lambda: election.is_leader, by, query, partitions, strategy,
                f"manual migration by {by}", executors=executors,
                executor_actuator=ExecutorActuator(
                    zk, cfg.zookeeper.root, app_name,
                    SparkRestClient.for_port(driver_ui_port(cfg, app), timeout_s=cfg.spark.rest_timeout_s),
                    cfg.actuator, lambda: election.is_leader),
                on_phase=lambda journal, _phase, _s: show(journal), shape=shape,
                restart_app=app_restarter(cfg, app_name, click.get_current_context().meta["config_path"],
                                          click.get_current_context().meta["overrides"]))
        finally:
            election.release()
        finish(result.status == "done", result.detail, result.figures)
    finally:
        zk.stop()


def _zk_or_exit(cfg: Config) -> Any:
    from kazoo.client import KazooClient
    from kazoo.handlers.threading import KazooTimeoutError

    zk = KazooClient(hosts=cfg.zookeeper.hosts, timeout=cfg.zookeeper.session_timeout_s)
    try:
        zk.start(timeout=10)
    except KazooTimeoutError:
        click.echo(f"ZooKeeper at {cfg.zookeeper.hosts} is unreachable", err=True)
        sys.exit(1)
    return zk


def _print_status(statuses: list[Any]) -> None:
    rows = [("SERVICE", "STATE", "PID", "PORTS", "ANSWERS")]
    for s in statuses:
        rows.append(
            (
                s.name,
                "running" if s.running else "stopped",
                str(s.pid) if s.running else "-",
                ",".join(map(str, s.ports)) or "-",
                "yes" if s.answers else "no",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())


from sparkscale.bench.cli import bench, report_command  # noqa: E402
from sparkscale.bench.simulate import simulate_command  # noqa: E402


@main.command("demo")
@_config_options
@click.option("--minutes", type=click.FloatRange(min=1), default=5.0, show_default=True,
              help="How long the load runs (low a quarter, high 40 %, low the rest).")
@click.option("--app", "app_name", default="wordcount", show_default=True, help="The managed app to drive.")
@click.option("--low", "low_rate", type=click.IntRange(min=1), default=2000, show_default=True,
              help="The low load, records/s.")
@click.option("--high", "high_rate", type=click.IntRange(min=1), default=8000, show_default=True,
              help="The high load (the step up), records/s.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="Where the plot and figures go (default: <cluster.run_dir>/demo).")
def demo(cfg: Config, minutes: float, app_name: str, low_rate: int, high_rate: int, out_dir: str | None) -> None:
    """The main job: the embedded environment, APP under a steps load, the daemon (DS2) in the
    foreground; then a summary and a timeline plot. Exit 0 when every record was verified."""
    from pathlib import Path

    from sparkscale.bench.demo import DEMO_TIMINGS, DemoSpec, run_demo
    from sparkscale.localenv import EnvironmentStartError, PreflightError
    from sparkscale.pipeline.submit import PipelineError

    meta = click.get_current_context().meta
    overrides = [*DEMO_TIMINGS, *meta["overrides"]]  # the user's --set wins over the demo's timings
    cfg = _require_app(_load_or_exit(meta["config_path"], tuple(overrides)), app_name)
    # This process's own events (the load generator's one per second) would drown the daemon's log.
    configure_logging(cfg.logging.model_copy(update={"level": "warning"}))
    spec = DemoSpec(app=app_name, minutes=minutes, low_rate=low_rate, high_rate=high_rate,
                    out_dir=Path(out_dir) if out_dir else cfg.cluster.run_path / "demo")
    try:
        sys.exit(run_demo(cfg, spec, meta["config_path"], overrides, echo=click.echo))
    except (EnvironmentStartError, PreflightError, PipelineError) as exc:
        click.echo(f"demo failed: {exc}", err=True)
        sys.exit(EXIT_ENVIRONMENT)

from sparkscale.daemon.plan_cmd import plan_command  # noqa: E402 - registered after the group exists
from sparkscale.daemon.snapshot_cmd import snapshot_command  # noqa: E402

main.add_command(plan_command, "plan")
main.add_command(snapshot_command, "snapshot")
main.add_command(bench, "bench")
main.add_command(report_command, "report")
main.add_command(simulate_command, "simulate")


if __name__ == "__main__":  # pragma: no cover
    main()
