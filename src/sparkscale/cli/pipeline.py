"""The managed pipelines: `sparkscale pipeline submit|run|stop`, `loadgen` (feed an app's input streams)
and `verify` (check an app's output against its input)."""

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
    from sparkscale.pipeline.submit import PipelineError, submit

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
    from sparkscale.pipeline.supervisor import current_driver

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

    from sparkscale.pipeline.supervisor import run_supervised

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
    from sparkscale.pipeline.submit import stop

    cfg = require_app(cfg, app_name)
    click.echo(f"{app_name} stopped" if stop(cfg, app_name) else f"{app_name} was not running")


@click.command("loadgen")
@config_options
@click.option("--app", "app_name", required=True, help="The managed app whose input streams to feed.")
@click.option("--profile", required=True,
              help="Rate profile: 1000 | constant:R[@Ds] | steps:1000@60s,4000@120s | ramp:A-B@Ds | "
                   "sine:BASE,AMP,PERIODs[@Ds] | diurnal:PEAK@Mm")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the record generator.")
@click.option("--max-duration-s", type=float, default=None, help="Stop after this many seconds at the latest.")
def loadgen(cfg: Config, app_name: str, profile: str, seed: int, max_duration_s: float | None) -> None:
    """Write generated records to an app's input streams at a rate that follows a profile.

    Logs the achieved rate every second (event loadgen.second) and warns when it falls behind."""
    import signal
    import threading

    from sparkscale.pipeline.loadgen import run_loadgen

    cfg = require_app(cfg, app_name)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        summary = run_loadgen(cfg, app_name, profile, seed=seed, max_duration_s=max_duration_s, stop=stop)
    except ValueError as exc:
        click.echo(str(exc), err=True)
        sys.exit(EXIT_CONFIG)
    except KeyboardInterrupt:
        sys.exit(130)
    click.echo(f"run {summary.run_id}: sent {summary.records_sent} records in {summary.duration_s:.1f} s "
               f"({summary.records_sent / max(summary.duration_s, 1e-9):.0f}/s; target {summary.target_records})")


@click.command("verify")
@config_options
@click.option("--app", "app_name", required=True, help="The managed app to check.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def verify(cfg: Config, app_name: str, as_json: bool) -> None:
    """Compare an app's output with a direct computation over everything produced for it.

    Prints lost, duplicated and total counts; exits 1 if anything was lost or duplicated. Run it
    once the app has processed all its input (it says so when it has not)."""
    from sparkscale.pipeline.check import unprocessed_records, verify_app
    from sparkscale.redisconn import connect

    cfg = require_app(cfg, app_name)
    client = connect(cfg.redis)
    pending = unprocessed_records(client, cfg, cfg.app(app_name))
    client.close()
    result = verify_app(cfg, app_name)
    if as_json:
        click.echo(json.dumps({**result.to_dict(), "unprocessed_records": pending}, indent=2))
    else:
        click.echo(f"{app_name}: total expected {result.total_expected}, arrived {result.total_arrived}, "
                   f"lost {result.lost}, duplicated {result.duplicated}, unexpected {result.unexpected}")
        if result.mismatched_keys:
            click.echo(f"mismatched keys: {', '.join(result.mismatched_keys[:10])}"
                       + (f" (+{len(result.mismatched_keys) - 10} more)" if len(result.mismatched_keys) > 10 else ""))
        if pending:
            click.echo(f"note: {pending} input records are not processed yet; differences may only be lag")
    sys.exit(0 if result.ok else 1)
