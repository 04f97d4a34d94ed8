"""`sparkscale simulate`: the real policies against a simulated dataflow (sparkscale_lab/bench/simulate.py).
A plug-in of the `sparkscale` command (entry-point group `sparkscale.commands`)."""

from __future__ import annotations

import json
import sys

import click

from sparkscale.cli.common import load_or_exit
from sparkscale.cli.offline import EXIT_INVALID, registered_policy
from sparkscale_lab.bench.sim_graph import GRAPH_FORMS, parse_graph
from sparkscale_lab.bench.simulate import SimSpec, render, simulate
from sparkscale_lab.pipelines.profiles import parse_profile


@click.command("simulate")
@click.option("--graph", "graph", required=True, help=f"The query's operators: {GRAPH_FORMS}.")
@click.option("--profile", required=True, help="Load profile (sparkscale loadgen's syntax); must end.")
@click.option("--policy", required=True, callback=registered_policy, help="A registered policy.")
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
