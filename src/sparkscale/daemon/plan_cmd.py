"""`sparkscale plan SNAPSHOT`: the plan a policy makes for a snapshot, offline; changes nothing.

The guards run with an empty history and no migration, i.e. as on the daemon's first decision for
the app (so a scale-down is held by the scale-down delay unless it is 0). Registered in cli.py as
`main.add_command(plan_command, "plan")`; kept apart so that it imports no daemon machinery.
"""

from __future__ import annotations

import json
import sys

import click

from sparkscale.config import AppConfig, ConfigError, load_config
from sparkscale.policies.base import DecisionHistory, get_policy
from sparkscale.policies.guards import GuardInput, apply_guards
from sparkscale.snapshot import SnapshotError, load_snapshot

EXIT_INVALID = 2  # as cli.EXIT_CONFIG (not imported: cli.py imports this module)
POLICIES = ("ds2", "dhalion", "threshold")


@click.command("plan")
@click.argument("snapshot_path", metavar="SNAPSHOT", type=click.Path(dir_okay=False))
@click.option("--config", "config_path", type=click.Path(dir_okay=False), envvar="SPARKSCALE_CONFIG",
              default=None, help="YAML config file (default: built-in defaults; env SPARKSCALE_CONFIG).")
@click.option("--policy", type=click.Choice(POLICIES), default=None, help="Policy to use (default: policy.name).")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a dotted config key.")
@click.option("--json", "as_json", is_flag=True, help="Print DESIGN.md's plan JSON instead of a table.")
def plan_command(snapshot_path: str, config_path: str | None, policy: str | None,
                 overrides: tuple[str, ...], as_json: bool) -> None:
    """Print the plan a policy makes for the snapshot file SNAPSHOT (nothing is changed)."""
    try:
        cfg = load_config(config_path, overrides)
    except ConfigError as exc:
        click.echo(f"invalid config:\n{exc}", err=True)
        sys.exit(EXIT_INVALID)
    try:
        snapshot = load_snapshot(snapshot_path)
    except SnapshotError as exc:
        click.echo(f"invalid snapshot: {exc}", err=True)
        sys.exit(EXIT_INVALID)

    app = next((a for a in cfg.apps if a.name == snapshot.app), None) or AppConfig(name=snapshot.app)
    history = DecisionHistory.empty()
    raw = get_policy(policy or cfg.policy.name).decide(snapshot, history, cfg.policy, app)
    plan = apply_guards(raw, GuardInput(snapshot, history, app), cfg.guards, cfg.loop)
    click.echo(json.dumps(plan.to_dict(), indent=2) if as_json else plan.to_table())
