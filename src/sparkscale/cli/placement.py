"""`sparkscale cluster-plan`: the cluster as the placement policies see it (workers, their load, the
managed apps' executors on them, shuffle between hosts vs within one) and the plan a placement
policy makes for it. Changes nothing."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict

import click
import redis
from pydantic import JsonValue

from sparkscale.bounded import printable
from sparkscale.cli.common import exit_invalid, load_or_exit
from sparkscale.config import Config
from sparkscale.logsetup import configure_logging
from sparkscale.model.snapshot import Snapshot, SnapshotError, load_snapshots
from sparkscale.monitors.collector import AppNotRunningError, CollectOptions, NoQueriesYet, collect_snapshots
from sparkscale.monitors.spark_rest import SparkRestError
from sparkscale.policies.ds2 import capacity_task_overhead
from sparkscale.policies.placement.base import get_placement, registered_placements
from sparkscale.policies.placement.build import cluster_model
from sparkscale.policies.placement.model import ClusterModel


def _registered(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    known = registered_placements()
    if value is not None and value not in known:
        raise click.BadParameter(f"{value!r} is not a registered placement policy (registered: {', '.join(known)})")
    return value


def live_snapshots(cfg: Config) -> list[Snapshot]:
    """Every managed app's query snapshots now; an app that does not run is named on stderr, skipped."""
    out: list[Snapshot] = []
    for app in cfg.apps:
        try:
            out += collect_snapshots(cfg, app.name, None, CollectOptions())
        except (AppNotRunningError, NoQueriesYet, SparkRestError, redis.RedisError) as exc:
            click.echo(printable(f"{app.name}: left out ({exc})"), err=True)
    return out


@click.command("cluster-plan")
@click.argument("snapshot_paths", metavar="[SNAPSHOT]...", nargs=-1, type=click.Path(dir_okay=False))
@click.option("--config", "config_path", type=click.Path(dir_okay=False), envvar="SPARKSCALE_CONFIG",
              default=None, help="YAML config file (default: built-in defaults; env SPARKSCALE_CONFIG).")
@click.option("--policy", default=None, callback=_registered,
              help="Placement policy to plan with, a registered one (default: placement.name).")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a dotted config key.")
@click.option("--json", "as_json", is_flag=True, help="Print the model and the plan as JSON.")
def cluster_plan_command(snapshot_paths: tuple[str, ...], config_path: str | None, policy: str | None,
                         overrides: tuple[str, ...], as_json: bool) -> None:
    """Show the cluster and the placement plan for the managed apps: from snapshot files (each one
    snapshot or a JSON list, as `sparkscale snapshot` writes them, of the config's apps), or, with
    no file, from every managed app now."""
    cfg = load_or_exit(config_path, overrides)
    configure_logging(cfg.logging)
    snapshots: list[Snapshot] = []
    for path in snapshot_paths:
        try:
            snapshots += load_snapshots(path)
        except SnapshotError as exc:
            exit_invalid("snapshot", exc)
    if not snapshot_paths:
        snapshots = live_snapshots(cfg)
    apps = {a.name: a for a in cfg.apps}
    unknown = sorted({s.app for s in snapshots} - set(apps))
    if unknown:
        exit_invalid("snapshot", f"app(s) {', '.join(unknown)} are not in the config's apps")
    model = cluster_model(snapshots, apps, cfg.placement.worker_selection_policy, cfg.placement.host_cpus,
                          capacity_task_overhead(cfg.policy))
    if not model.workers:
        click.echo("no cluster view in the snapshots (loop.cluster_view off, or the master did not answer)",
                   err=True)
        sys.exit(1)
    name = policy or cfg.placement.name
    try:
        plan = get_placement(name).place(model, cfg.placement.section(name) if cfg.placement.section_model(name)
                                         else None)
    except (ValueError, ArithmeticError) as exc:
        exit_invalid("input", printable(f"placement {name} cannot plan with these figures and settings ({exc})"))
    if as_json:
        click.echo(json.dumps({"model": model_dict(model), "plan": plan.to_dict()}, indent=2))
    else:
        click.echo(model.to_table())
        click.echo("")
        click.echo(plan.to_table())


def model_dict(model: ClusterModel) -> dict[str, JsonValue]:
    out = asdict(model)
    out["landing"] = dict(model.landing)
    return out
