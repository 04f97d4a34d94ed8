"""`sparkscale simulate`: the real policies against a simulated dataflow (sparkscale_lab/bench/simulate.py).
A plug-in of the `sparkscale` command (entry-point group `sparkscale.commands`).

Every input is bounded (issue 32: `--peak-cores 0` was a ZeroDivisionError, `--graph linear:10000000`
and `--apps 100000` ran for ever): each option by its range, the graph and the profile by their
parsers, and the run as a whole by the work it would do (`run_problem`); a bad one exits 2 naming it.
"""

from __future__ import annotations

import json
import math
import sys

import click

from sparkscale.cli.common import load_or_exit
from sparkscale.cli.offline import EXIT_INVALID, FiniteRange, registered_policy
from sparkscale.config.apps import MAX_PARTITIONS
from sparkscale_lab.bench.measures import segments
from sparkscale_lab.bench.sim_graph import GRAPH_FORMS, parse_graph
from sparkscale_lab.bench.simulate import SimSpec, render, simulate
from sparkscale_lab.pipelines.profiles import LoadProfile, parse_profile

MAX_APPS = 1000
MAX_APP_SECONDS = 1_000_000  # apps x simulated seconds: each app keeps a sample per second
# Apps x cycles x operator instances, the figures the snapshots of a run hold: the documented run
# (docs/results/simulate/results.md: 100 apps x 36 cycles x 1,000 operators x 16) builds 5.8e7 in 12 min.
MAX_INSTANCE_FIGURES = 100_000_000
MIN_PEAK_RATE = 1e-3  # records/s: true rates are drawn from the peak, and a rate of 0 divides by zero
MIN_DURATION_S = 2.0
SOURCE_PARTITIONS = 4  # as simulate() builds each snapshot


def run_problem(graph_operators: int, profile: LoadProfile, apps: int, interval_s: float,
                partitions: int) -> str | None:
    """What is wrong with a run of this size, or None: it must last MIN_DURATION_S, have some
    load, and do no more work than MAX_APP_SECONDS and MAX_INSTANCE_FIGURES allow."""
    duration_s = profile.duration_s
    if duration_s is None:
        return f"profile {profile.spec!r} never ends; give every step a duration"
    if duration_s < MIN_DURATION_S:
        return (f"profile {profile.spec!r} lasts {duration_s:g} s; a simulation needs at least {MIN_DURATION_S:g} s "
                "(it samples each whole second from 1 s on, and measures the samples before the end)")
    peak = max(s.rate for s in segments(profile))  # as simulate() draws the true rates from it
    if peak < MIN_PEAK_RATE:
        return f"profile {profile.spec!r} peaks at {peak:g} records/s; a simulation needs at least {MIN_PEAK_RATE:g}"
    app_seconds = apps * math.ceil(duration_s)
    if app_seconds > MAX_APP_SECONDS:
        return (f"{apps} app(s) x {duration_s:g} s is {app_seconds:g} app-seconds, above the {MAX_APP_SECONDS:g} "
                "a run may simulate (fewer apps or a shorter profile)")
    cycles = math.ceil(duration_s / max(interval_s, 1.0))  # the simulation steps whole seconds
    figures = apps * cycles * (graph_operators * partitions + SOURCE_PARTITIONS)
    if figures > MAX_INSTANCE_FIGURES:
        return (f"{apps} app(s) x {cycles} cycles x {graph_operators} operators x "
                f"{partitions} partitions is {figures:g} instance figures, above the {MAX_INSTANCE_FIGURES:g} a run "
                "may build (fewer apps, operators or partitions, a longer --interval-s or a shorter profile)")
    return None


@click.command("simulate")
@click.option("--graph", "graph", required=True, help=f"The query's operators: {GRAPH_FORMS}.")
@click.option("--profile", required=True, help="Load profile (sparkscale loadgen's syntax); must end.")
@click.option("--policy", required=True, callback=registered_policy, help="A registered policy.")
@click.option("--apps", type=click.IntRange(1, MAX_APPS), default=1, show_default=True)
@click.option("--interval-s", type=FiniteRange(0, 3600, min_open=True), default=10.0, show_default=True,
              help="Simulated seconds per cycle (a cycle is at most once per simulated second).")
@click.option("--scaling", type=click.Choice(["linear", "sublinear"]), default="linear", show_default=True)
@click.option("--partitions", type=click.IntRange(1, MAX_PARTITIONS), default=16, show_default=True,
              help="Partitions of every operator at the start (a stage uses at most that many cores).")
@click.option("--peak-cores", type=FiniteRange(0.1, 1000), default=12.0, show_default=True,
              help="Cores the profile's peak needs (true rates are drawn around that).")
@click.option("--restart-cost-s", type=FiniteRange(0, 3600), default=10.0, show_default=True,
              help="Seconds a set_parallelism (migration) stops the query.")
@click.option("--seed", type=click.IntRange(0, 2**63 - 1), default=1, show_default=True)
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
        operators = len(parse_graph(graph).operators) - 1
        problem = run_problem(operators, parse_profile(profile), apps, interval_s, partitions)
        if problem is not None:
            raise ValueError(problem)
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
