"""Commands that change nothing: `plan` (a policy's plan for a snapshot file), `snapshot` (live
snapshots of a running app's queries, as JSON). `simulate` (the real policies against a simulated
dataflow) is the lab's (sparkscale_lab/cli/simulate.py)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import click
import redis

from sparkscale.bounded import printable
from sparkscale.cli.common import exit_invalid, load_or_exit
from sparkscale.config import AppConfig
from sparkscale.logsetup import configure_logging
from sparkscale.model.snapshot import SnapshotError, load_snapshots
from sparkscale.monitors.collector import AppNotRunningError, CollectOptions, NoQueriesYet, collect_snapshots
from sparkscale.monitors.spark_rest import SparkRestError
from sparkscale.policies.base import registered_policies
from sparkscale.policies.history import DecisionHistory, HistoryError, load_history
from sparkscale.policies.planner import decide_app

EXIT_INVALID = 2  # a bad config, snapshot, app or argument (as common.EXIT_CONFIG)
EXIT_FAILED = 1


class FiniteRange(click.FloatRange):
    """click's FloatRange, refusing NaN too (which compares false with both bounds and so passes
    FloatRange) and infinities: an option's number is finite and within its range."""

    name = "finite float range"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        number: float = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{number} is not a finite number", param, ctx)
        return number


def registered_policy(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """A policy name known to the registry now (so a plug-in or a policy registered in-process works)."""
    known = registered_policies()
    if value is not None and value not in known:
        raise click.BadParameter(f"{value!r} is not a registered policy (registered: {', '.join(known)})")
    return value


# The planner's one decide path, as in the daemon. Without --history the history is empty and no
# migration runs, i.e. as on the daemon's first decision for the app (so a scale-down is held by the
# scale-down delay unless it is 0); --history FILE replays a decision that depended on history.
@click.command("plan")
@click.argument("snapshot_path", metavar="SNAPSHOT", type=click.Path(dir_okay=False))
@click.option("--config", "config_path", type=click.Path(dir_okay=False), envvar="SPARKSCALE_CONFIG",
              default=None, help="YAML config file (default: built-in defaults; env SPARKSCALE_CONFIG).")
@click.option("--policy", default=None, callback=registered_policy,
              help="Policy to use, a registered one (default: policy.name).")
@click.option("--history", "history_path", type=click.Path(dir_okay=False), default=None,
              help="A decision history (JSON, as `sparkscale actions --history` writes) to decide with.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a dotted config key.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the plan as JSON (type, app, actions, explanation, figures) instead of a table.")
def plan_command(snapshot_path: str, config_path: str | None, policy: str | None, history_path: str | None,
                 overrides: tuple[str, ...], as_json: bool) -> None:
    """Print the plan a policy makes for the snapshot file SNAPSHOT (nothing is changed): one
    snapshot (of a query, or an app's merged one), or a JSON list of an app's query snapshots."""
    cfg = load_or_exit(config_path, overrides)
    try:
        snapshots = load_snapshots(snapshot_path)
    except SnapshotError as exc:
        exit_invalid("snapshot", exc)
    history = DecisionHistory.empty()
    if history_path is not None:
        try:
            history = load_history(history_path)
        except HistoryError as exc:
            exit_invalid("history", exc)
    snapshot = snapshots[0]
    app = next((a for a in cfg.apps if a.name == snapshot.app), None) or AppConfig(name=snapshot.app)
    try:
        plan = decide_app(snapshots, history, cfg, app, policy=policy)
    except (ValueError, ArithmeticError) as exc:
        # The last line of defence, not the validation: every figure and setting is bounded when it
        # is read, yet a policy's arithmetic on an extreme combination of them (a catch-up of 1e-320 s
        # on a backlog) can still fail. Say which inputs, rather than print a traceback.
        exit_invalid("input", printable(f"{snapshot_path}: policy {policy or cfg.policy.name} cannot plan with "
                                        f"these figures and settings ({exc})"))
    click.echo(json.dumps(plan.to_dict(), indent=2) if as_json else plan.to_table())


# Exit 2 for a bad config, an unknown app or query, 1 when the app does not run (its REST API does
# not answer), has no query yet, or a service fails.
@click.command("snapshot")
@click.option("--app", "app_name", required=True, help="The managed app (or a pipeline name) to look at.")
@click.option("--query", "query", default=None,
              help="One query of the app (its name, or its id when unnamed); default: every running query.")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), envvar="SPARKSCALE_CONFIG",
              default=None, help="YAML config file (default: built-in defaults; env SPARKSCALE_CONFIG).")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a dotted config key.")
@click.option("--out", "out_path", type=click.Path(dir_okay=False), default=None,
              help="Write the snapshot JSON to this file instead of stdout.")
@click.option("--window-s", type=FiniteRange(min=0, min_open=True), default=None,
              help="Observation window (default: loop.window_s).")
def snapshot_command(app_name: str, query: str | None, config_path: str | None, overrides: tuple[str, ...],
                     out_path: str | None, window_s: float | None) -> None:
    """Print (or write to --out) live Snapshot v1 JSON of APP's queries over the last window: one
    object with --query or when the app has one query, else a list with one snapshot per query."""
    cfg = load_or_exit(config_path, overrides)
    configure_logging(cfg.logging)
    try:
        cfg = cfg.with_app(app_name)
    except KeyError as exc:
        click.echo(printable(f"invalid --app: {exc.args[0]}"), err=True)
        sys.exit(EXIT_INVALID)
    try:
        snapshots = collect_snapshots(cfg, app_name, query, CollectOptions(window_s=window_s))
    except AppNotRunningError as exc:
        click.echo(printable(str(exc)), err=True)
        sys.exit(EXIT_FAILED)
    except NoQueriesYet as exc:
        click.echo(printable(str(exc)), err=True)
        sys.exit(EXIT_INVALID if query is not None and exc.known else EXIT_FAILED)
    except SparkRestError as exc:
        click.echo(f"cannot read {app_name!r} from Spark: {exc}", err=True)
        sys.exit(EXIT_FAILED)
    except redis.RedisError as exc:
        click.echo(f"cannot read {app_name!r} from Redis at {cfg.redis.host}:{cfg.redis.port}: {exc}", err=True)
        sys.exit(EXIT_FAILED)
    if len(snapshots) == 1:
        text = snapshots[0].to_json(indent=2)
    else:
        text = json.dumps([s.to_dict() for s in snapshots], indent=2)
    if out_path:
        Path(out_path).write_text(text + "\n")
        what = (f"snapshot of {app_name}/{snapshots[0].query}" if len(snapshots) == 1
                else f"snapshots of {app_name}'s queries {', '.join(s.query for s in snapshots)}")
        click.echo(f"{what} written to {out_path}", err=True)
    else:
        click.echo(text)
