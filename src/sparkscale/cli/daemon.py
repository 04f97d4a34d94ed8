"""The daemon and its operator commands: run, check-config, status, actions, explain, blocklist and
scale-executors (a manual scaling, through the leader or, with none, under the leader lock here)."""

from __future__ import annotations

import json
import sys
import time
from typing import TYPE_CHECKING, Any

import click
import redis

from sparkscale.apps.spark_properties import masked
from sparkscale.bounded import printable
from sparkscale.cli.common import (
    EXIT_CONFIG,
    EXIT_ENVIRONMENT,
    cli_store,
    client,
    client_errors,
    config_options,
    exit_invalid,
    load_or_exit,
)
from sparkscale.config import Config, ConfigError

if TYPE_CHECKING:
    from sparkscale.store.action_records import LoggedDecision


@click.command("check-config")
@click.argument("path", type=click.Path(dir_okay=False))
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a dotted config key.")
@click.option("--show", is_flag=True, help="Print the effective config (defaults filled in) as JSON.")
@click.option("--explain", "explain_key", metavar="KEY", default=None,
              help="Describe one dotted key (e.g. guards.scale_down_delay_s, apps[].mode): its type, default, "
                   "bounds and meaning, and the value the file gives it (each app's for an app key).")
def check_config(path: str, overrides: tuple[str, ...], show: bool, explain_key: str | None) -> None:
    """Validate a config file: exit 0 if usable, 2 naming the file, key and problem if not."""
    from sparkscale.config.explain import UnknownKey, explain, find_key

    ref = None
    if explain_key is not None:
        try:
            ref = find_key(explain_key)
        except UnknownKey as exc:
            click.echo(printable(f"--explain: {exc}"), err=True)
            sys.exit(EXIT_CONFIG)
    cfg = load_or_exit(path, overrides)
    if ref is not None:
        try:
            text = explain(ref, cfg, path)
        except UnknownKey as exc:
            click.echo(printable(f"--explain: {exc}"), err=True)
            sys.exit(EXIT_CONFIG)
        click.echo("\n".join(printable(line) for line in text.splitlines()))
    elif show:
        click.echo(json.dumps(shown_config(cfg), indent=2))
    else:
        click.echo(f"{path}: ok ({len(cfg.apps)} app(s), policy {cfg.policy.name})")


def shown_config(cfg: Config) -> dict[str, Any]:
    """The config as `--show` prints it: each app's spark_conf values masked where Spark's own rule
    calls the key a secret (apps/spark_properties.py), so the output can be pasted anywhere."""
    dump = cfg.model_dump(mode="json")
    for app in dump["apps"]:
        app["spark_conf"] = masked(app["spark_conf"])
    return dump


@click.command("run")
@config_options
@click.option("--max-cycles", type=click.IntRange(min=1), default=None, help="Stop after N cycles per app.")
def run(cfg: Config, max_cycles: int | None) -> None:
    """Run the daemon in the foreground (what systemd runs)."""
    from sparkscale.config.identities import DAEMON, set_process_identity
    from sparkscale.config.secrets import role_credentials
    from sparkscale.daemon.service import Daemon, DaemonStartError

    set_process_identity(DAEMON)  # the monitors' and actuators' clients too (security.identity_dir)
    try:
        role_credentials(cfg, DAEMON)
    except ConfigError as exc:
        exit_invalid("config", *exc.problems)
    meta = click.get_current_context().meta
    try:
        code = Daemon(cfg, max_cycles=max_cycles, config_path=meta["config_path"], overrides=meta["overrides"]).run()
    except DaemonStartError as exc:
        click.echo(f"sparkscale run: {exc}", err=True)
        sys.exit(EXIT_ENVIRONMENT)
    sys.exit(code)


@click.command("status")
@config_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def status(cfg: Config, as_json: bool) -> None:
    """The leader of each managed app, its executors and parallelism, and the last decision; and
    each migration that needs the operator (`sparkscale migrate --resume ID` / `--abort ID`)."""
    from sparkscale.actuators.migration import attention_line
    from sparkscale.client.connection import Connection
    from sparkscale.daemon.operator_view import AppLine, pick_view, status_table

    with client_errors(), Connection(cfg).zookeeper() as zk:
        store = cli_store(cfg, zk)
        try:
            lines = []
            for app in cfg.apps:
                leader = store.leaders.current_leader(app.name)
                views = store.status.read(app.name)
                journal = store.journals.journal(app.name).read()
                attention = attention_line(journal) if journal is not None and journal.needs_attention else None
                lines.append(AppLine(app.name, leader, pick_view(leader, views), attention))
        except redis.RedisError as exc:
            click.echo(f"Redis at {cfg.redis.host}:{cfg.redis.port} is unreachable: {exc}", err=True)
            sys.exit(1)
    if as_json:
        click.echo(json.dumps([line.to_dict() for line in lines], indent=2))
    else:
        click.echo(status_table(lines, time.time()))


@click.command("actions")
@config_options
@click.option("--app", "app_name", default=None, help="Only this app.")
@click.option("--since", default="1d", show_default=True, help="How far back: 30s, 15m, 2h, 1d or an ISO time.")
@click.option("--all", "show_all", is_flag=True, help="Also the decisions that changed nothing.")
@click.option("--limit", type=click.IntRange(min=1), default=100, show_default=True, help="At most the newest N.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON lines instead of a table.")
@click.option("--history", "as_history", is_flag=True,
              help="Print --app's decision history since --since as JSON, for `sparkscale plan --history`.")
def actions(cfg: Config, app_name: str | None, since: str, show_all: bool, limit: int, as_json: bool,
            as_history: bool) -> None:
    """The action log: when, what, why, expected against actual outcome."""
    from sparkscale.daemon.action_log import executed, past_decisions
    from sparkscale.daemon.operator_view import actions_table, parse_since
    from sparkscale.policies.history import DecisionHistory

    if as_history and app_name is None:
        click.echo("--history needs --app", err=True)
        sys.exit(EXIT_CONFIG)

    try:
        since_s = parse_since(since, time.time())
    except ValueError as exc:
        click.echo(str(exc), err=True)
        sys.exit(EXIT_CONFIG)
    try:
        store = cli_store(cfg)
        logged = store.actions.read(app_name, since_s)
    except redis.RedisError as exc:
        click.echo(f"Redis at {cfg.redis.host}:{cfg.redis.port} is unreachable: {exc}", err=True)
        sys.exit(1)
    if as_history:
        acted = executed(logged)
        # As the daemon hands it to the planner: when it last acted, 0.0 for never.
        last_action_at = (acted[-1].done_at if acted else None) or 0.0
        history = DecisionHistory(past_decisions(logged), last_action_at=last_action_at,
                                  blocklist=store.blocklist.blocklist(time.time(), app_name))
        click.echo(json.dumps(history.to_dict(), indent=2))
        return
    if not show_all:
        logged = [d for d in logged if d.decision.plan.actions]
    logged = logged[-limit:]
    if as_json:
        for d in logged:
            click.echo(json.dumps(d.to_dict(), default=str))
    else:
        click.echo(actions_table(logged))


@click.command("explain")
@config_options
@click.argument("decision_id")
@click.option("--json", "as_json", is_flag=True, help="Print the whole record (and its kept snapshot) as JSON.")
def explain(cfg: Config, decision_id: str, as_json: bool) -> None:
    """Everything behind one decision: its actions and reasons, the full explanation, the figures,
    the expected and actual outcome, what executing it did and the snapshot it saw.

    DECISION_ID is the id at the end of the daemon's `cycle` line (or in `actions --json`)."""
    from sparkscale.config.identities import OPERATOR
    from sparkscale.daemon.explain import explain_json, explain_text, kept_snapshot, parse_decision_id
    from sparkscale.redisconn import connect_as

    try:
        wanted = parse_decision_id(decision_id)
    except ValueError as exc:
        click.echo(str(exc), err=True)
        sys.exit(EXIT_CONFIG)
    redis_client = connect_as(cfg, OPERATOR)
    log = cli_store(cfg, redis_client=redis_client).actions
    try:
        logged = log.decision(wanted)
        snapshot = kept_snapshot(log, logged) if logged is not None else None
    except redis.RedisError as exc:
        click.echo(f"Redis at {cfg.redis.host}:{cfg.redis.port} is unreachable: {exc}", err=True)
        sys.exit(1)
    if logged is None:
        click.echo(f"no decision {wanted} in the action log at {cfg.redis.host}:{cfg.redis.port} "
                   f"(key prefix {cfg.redis.key_prefix!r}): unknown id, or trimmed since "
                   f"(action_log.max_entries, action_log.max_age_days)", err=True)
        sys.exit(EXIT_CONFIG)
    follow = migration_follow_ups(cfg, redis_client, logged)
    click.echo(explain_json(logged, snapshot, follow) if as_json else explain_text(logged, snapshot, follow))


def migration_follow_ups(cfg: Config, client: redis.Redis, logged: LoggedDecision) -> dict[str, Any]:
    """The follow-up figures of the migrations the decision carried out that were pending when its
    results were logged: as the app's journal holds them now, or measured now from the history."""
    from kazoo.exceptions import KazooException
    from kazoo.handlers.threading import KazooTimeoutError

    from sparkscale import zkconn
    from sparkscale.actuators.migration import JournalStore
    from sparkscale.config.identities import OPERATOR
    from sparkscale.daemon.followup import follow_ups, pending_migrations

    wanted = pending_migrations(logged.results or ())
    if not wanted:
        return {}
    zk = zkconn.client_as(cfg, OPERATOR)
    try:
        zk.start(timeout=10)
        journal = JournalStore(zk, cfg.zookeeper.root, logged.decision.app).read()
    except (KazooTimeoutError, KazooException) as exc:
        return dict.fromkeys(wanted, f"not known: ZooKeeper at {cfg.zookeeper.hosts} is unreachable ({exc})")
    finally:
        zk.stop()
    return follow_ups(cfg, client, journal, wanted, time.time())


@click.command("blocklist")
@config_options
@click.option("--app", "app_name", default=None, help="Only this app.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def blocklist(cfg: Config, app_name: str | None, as_json: bool) -> None:
    """Actions blocked for an app and diagnosis because they fell short of their expected outcome."""
    from sparkscale.daemon.operator_view import blocklist_table

    now = time.time()
    try:
        entries = cli_store(cfg).blocklist.entries(now, app_name)
    except redis.RedisError as exc:
        click.echo(f"Redis at {cfg.redis.host}:{cfg.redis.port} is unreachable: {exc}", err=True)
        sys.exit(1)
    if as_json:
        click.echo(json.dumps([e.to_dict() for e in entries], indent=2))
    else:
        click.echo(blocklist_table(entries, now))


@click.command("scale-executors")
@config_options
@click.option("--app", "app_name", required=True, help="The managed app.")
@click.option("--to", "to", type=click.IntRange(min=0), required=True, help="The executor count wanted.")
@click.option("--timeout-s", type=float, default=300.0, show_default=True,
              help="How long to wait for the change to be carried out.")
def scale_executors(cfg: Config, app_name: str, to: int, timeout_s: float) -> None:
    """Set an app's executor count by hand, through the leader lock and the action log.

    With a daemon leading the app, the request goes to it (it acts at its epoch and logs it); with
    none, this command takes the lock itself. Exit 0 when done, 1 when refused or failed."""
    with client_errors():
        outcome = client(cfg).scale_executors(app_name, to, timeout_s, note=click.echo)
    if outcome.by is not None:  # the leader did it
        click.echo(f"{outcome.status}: {outcome.detail} (decision {outcome.decision_id}, by {outcome.by})")
    else:
        click.echo(f"{outcome.status}: {outcome.detail} (decision {outcome.decision_id}, epoch {outcome.epoch})")
    sys.exit(0 if outcome.ok else 1)
