"""The managed pipelines: `sparkscale pipeline submit|run|stop`."""

from __future__ import annotations

import json
import sys

import click

from sparkscale.cli.common import EXIT_CONFIG, config_options, require_app
from sparkscale.config import Config


@click.group("pipeline")
def pipeline() -> None:
    """The managed PySpark pipelines: submit one to the master, stop it, see which run."""


@pipeline.command("submit")
@click.argument("app_name")
@config_options
@click.option("--wait-s", type=float, default=180.0, show_default=True, help="How long to wait for the queries to run.")
def pipeline_submit(cfg: Config, app_name: str, wait_s: float) -> None:
    """Submit the managed app APP_NAME (its pipeline, per the config) and wait until its queries run."""
    from sparkscale.apps.submit import PipelineError, submit

    cfg = require_app(cfg, app_name)
    meta = click.get_current_context().meta
    try:
        record = submit(cfg, app_name, meta["config_path"], meta["overrides"], wait_s=wait_s)
    except PipelineError as exc:
        click.echo(f"cannot submit {app_name}: {exc}", err=True)
        sys.exit(1)
    from sparkscale.monitors.spark_rest import SparkRestError, driver_rest

    try:  # where the driver's agent says its REST API is (any port, the driver's host)
        rest = driver_rest(cfg, cfg.app(app_name)).base_url
    except SparkRestError as exc:
        rest = f"unknown ({exc.cause})"
    from sparkscale.apps.driver_record import current_driver

    driver = current_driver(cfg, app_name)
    click.echo(f"{app_name} runs: supervisor pid {record.pid}, driver pid {driver.pid if driver else 'unknown'}, "
               f"REST API {rest}, log {record.log}")


@pipeline.command("run")
@click.argument("app_name")
@config_options
def pipeline_run(cfg: Config, app_name: str) -> None:
    """Run the driver of APP_NAME in the foreground and restart it from its checkpoints after a crash
    (what `pipeline submit` and systemd's sparkscale-app@.service start; SIGTERM stops it)."""
    import signal
    import threading

    from sparkscale.apps.supervisor import run_supervised

    cfg = require_app(cfg, app_name)
    meta = click.get_current_context().meta
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    sys.exit(run_supervised(cfg, app_name, meta["config_path"], list(meta["overrides"]), stop))


@pipeline.command("stop")
@click.argument("app_name")
@config_options
def pipeline_stop(cfg: Config, app_name: str) -> None:
    """Stop the driver of APP_NAME (and its executors with it)."""
    from sparkscale.apps.submit import stop

    cfg = require_app(cfg, app_name)
    click.echo(f"{app_name} stopped" if stop(cfg, app_name) else f"{app_name} was not running")
