"""`sparkscale snapshot --app NAME`: one live snapshot of a running app, as JSON.

Registered in cli.py as `main.add_command(snapshot_command, "snapshot")`. Exit 2 for a bad config
or an unknown app, 1 when the app does not run (its REST API does not answer) or a service fails.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click
import redis

from sparkscale.config import ConfigError, load_config
from sparkscale.logsetup import configure_logging
from sparkscale.monitors.collector import AppNotRunningError, CollectOptions, collect_snapshot
from sparkscale.monitors.spark_rest import SparkRestError

EXIT_INVALID = 2  # as cli.EXIT_CONFIG (not imported: cli.py imports this module)
EXIT_FAILED = 1


@click.command("snapshot")
@click.option("--app", "app_name", required=True, help="The managed app (or a pipeline name) to look at.")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), envvar="SPARKSCALE_CONFIG",
              default=None, help="YAML config file (default: built-in defaults; env SPARKSCALE_CONFIG).")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a dotted config key.")
@click.option("--out", "out_path", type=click.Path(dir_okay=False), default=None,
              help="Write the snapshot JSON to this file instead of stdout.")
@click.option("--window-s", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Observation window (default: loop.window_s).")
def snapshot_command(app_name: str, config_path: str | None, overrides: tuple[str, ...], out_path: str | None,
                     window_s: float | None) -> None:
    """Print (or write to --out) one live Snapshot v1 of APP's query over the last window."""
    try:
        cfg = load_config(config_path, overrides)
    except ConfigError as exc:
        click.echo(f"invalid config:\n{exc}", err=True)
        sys.exit(EXIT_INVALID)
    configure_logging(cfg.logging)
    try:
        cfg = cfg.with_app(app_name)
    except KeyError as exc:
        click.echo(f"invalid --app: {exc.args[0]}", err=True)
        sys.exit(EXIT_INVALID)
    try:
        snapshot = collect_snapshot(cfg, app_name, CollectOptions(window_s=window_s))
    except AppNotRunningError as exc:
        click.echo(str(exc), err=True)
        sys.exit(EXIT_FAILED)
    except SparkRestError as exc:
        click.echo(f"cannot read {app_name!r} from Spark: {exc}", err=True)
        sys.exit(EXIT_FAILED)
    except redis.RedisError as exc:
        click.echo(f"cannot read {app_name!r} from Redis at {cfg.redis.host}:{cfg.redis.port}: {exc}", err=True)
        sys.exit(EXIT_FAILED)
    text = snapshot.to_json(indent=2)
    if out_path:
        Path(out_path).write_text(text + "\n")
        click.echo(f"snapshot of {app_name}/{snapshot.query} written to {out_path}", err=True)
    else:
        click.echo(text)
