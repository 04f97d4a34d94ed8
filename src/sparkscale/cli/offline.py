"""Commands that change nothing: `plan` (a policy's plan for a snapshot file), `snapshot` (live
snapshots of a running app's queries, as JSON) and `simulate` (the real policies against a simulated
dataflow)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
import redis

from sparkscale.bench.simulate import GRAPH_FORMS, SimSpec, parse_graph, render, simulate
from sparkscale.cli.common import exit_invalid, load_or_exit
from sparkscale.config import AppConfig
from sparkscale.logsetup import configure_logging
from sparkscale.monitors.collector import AppNotRunningError, CollectOptions, NoQueriesYet, collect_snapshots
from sparkscale.monitors.spark_rest import SparkRestError
from sparkscale.pipeline.profiles import parse_profile
from sparkscale.policies.base import registered_policies
from sparkscale.policies.history import DecisionHistory, HistoryError, load_history
from sparkscale.policies.planner import decide_app
from sparkscale.snapshot import SnapshotError, load_snapshots

EXIT_INVALID = 2  # a bad config, snapshot, app or argument (as common.EXIT_CONFIG)
EXIT_FAILED = 1


def _registered_policy(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
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
@click.option("--policy", default=None, callback=_registered_policy,
              help="Policy to use, a registered one (default: policy.name).")
@click.option("--history", "history_path", type=click.Path(dir_okay=False), default=None,
              help="A decision history (JSON, as `sparkscale actions --history` writes) to decide with.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a dotted config key.")
@click.option("--json", "as_json", is_flag=True, help="Print DESIGN.md's plan JSON instead of a table.")
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
        exit_invalid("input", f"{snapshot_path}: policy {policy or cfg.policy.name} cannot plan with these figures "
                              f"and settings ({exc})")
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
@click.option("--window-s", type=click.FloatRange(min=0, min_open=True), default=None,
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
        click.echo(f"invalid --app: {exc.args[0]}", err=True)
        sys.exit(EXIT_INVALID)
    try:
        snapshots = collect_snapshots(cfg, app_name, query, CollectOptions(window_s=window_s))
    except AppNotRunningError as exc:
        click.echo(str(exc), err=True)
        sys.exit(EXIT_FAILED)
    except NoQueriesYet as exc:
        click.echo(str(exc), err=True)
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


@click.command("simulate")
@click.option("--graph", "graph", required=True, help=f"The query's operators: {GRAPH_FORMS}.")
@click.option("--profile", required=True, help="Load profile (sparkscale loadgen's syntax); must end.")
@click.option("--policy", required=True, callback=_registered_policy, help="A registered policy.")
@click.option("--apps", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--interval-s", type=float, default=10.0, show_default=True, help="Simulated seconds per cycle.")
@click.option("--scaling", type=click.Choice(["linear", "sublinear"]), default="linear", show_default=True)
@click.option("--partitions", type=click.IntRange(min=1), default=16, show_default=True,
              help="Partitions of every operator at the start (a stage uses at most that many cores).")
@click.option("--peak-cores", type=float, default=12.0, show_default=True,
              help="Cores the profile's peak needs (true rates are drawn around that).")
@click.option("--restart-cost-s", type=float, default=10.0, show_default=True,
              help="Seconds a set_parallelism (migration) stops the query.")
@click.option("--seed", type=int, default=1, show_default=True)
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="Config whose policy, guards and loop settings to use (default: built-in defaults).")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a dotted config key.")
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
@click.option("--out", "out_path", type=click.Path(dir_okay=False), default=None, help="Also write the JSON here.")
def simulate_command(graph: str, profile: str, policy: str, apps: int, interval_s: float, scaling: str,
                     partitions: int, peak_cores: float, restart_cost_s: float, seed: int, config_path: str | None,
                     overrides: tuple[str, ...], as_json: bool, out_path: str | None) -> None:
    """Run a policy against a simulated dataflow and print convergence and planning time."""
    cfg = load_or_exit(config_path, overrides)
    try:
        parse_graph(graph)
        if parse_profile(profile).duration_s is None:
            raise ValueError(f"profile {profile!r} never ends; give every step a duration")
    except ValueError as exc:
        click.echo(f"invalid argument: {exc}", err=True)
        sys.exit(EXIT_INVALID)
    spec = SimSpec(graph=graph, profile=profile, policy=policy, apps=apps, interval_s=interval_s,
                   window_s=cfg.loop.window_s, scaling=scaling, peak_cores=peak_cores, partitions=partitions,
                   restart_cost_s=restart_cost_s, seed=seed)
    result = simulate(spec, cfg)
    summary = result.summary()
    if out_path:
        with open(out_path, "w") as f:
            json.dump({"command": "sparkscale " + " ".join(sys.argv[1:]), **summary}, f, indent=2)
    click.echo(json.dumps(summary, indent=2) if as_json else render(result))
