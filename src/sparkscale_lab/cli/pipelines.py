"""The lab's pipeline commands: `loadgen` (feed an app's input streams) and `verify` (check an
app's output against its input). Plug-ins of the `sparkscale` command (entry-point group
`sparkscale.commands`)."""

from __future__ import annotations

import json
import sys

import click

from sparkscale.cli.common import EXIT_CONFIG, config_options, require_app
from sparkscale.config import Config


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

    from sparkscale_lab.pipelines.loadgen import run_loadgen

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
    from sparkscale.config.identities import OPERATOR
    from sparkscale.redisconn import connect_as
    from sparkscale_lab.pipelines.check import unprocessed_records, verify_app

    cfg = require_app(cfg, app_name)
    client = connect_as(cfg, OPERATOR)
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
