"""The managed pipelines: `sparkscale pipeline submit|run|stop`."""

from __future__ import annotations

import sys

import click

from sparkscale.cli.common import client, client_errors, config_options, require_app
from sparkscale.cli.waiting import Waiting
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
    with client_errors(), Waiting(f"{app_name}'s driver to start and its queries to run (at most {wait_s:g} s)"):
        done = client(cfg).submit(app_name, wait_s)
    click.echo(f"{app_name} runs: supervisor pid {done.record.pid}, driver pid {done.driver_pid or 'unknown'}, "
               f"REST API {done.rest_url}, log {done.record.log}")


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
    with client_errors():
        stopped = client(cfg).stop(app_name)
    click.echo(f"{app_name} stopped" if stopped else f"{app_name} was not running")
