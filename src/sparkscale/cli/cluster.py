"""`sparkscale cluster up|down|status`: the embedded local environment (Spark standalone master and
workers, Redis, ZooKeeper)."""

from __future__ import annotations

import json
import sys
import time
from typing import TYPE_CHECKING

import click

from sparkscale.cli.common import EXIT_ENVIRONMENT, config_options
from sparkscale.cli.waiting import Waiting
from sparkscale.config import Config

if TYPE_CHECKING:
    from sparkscale.localenv.environment import ServiceStatus


@click.group("cluster")
def cluster() -> None:
    """The embedded local environment: Spark standalone master and workers, Redis, ZooKeeper."""


@cluster.command("up")
@config_options
def cluster_up(cfg: Config) -> None:
    """Start what is not running and wait until every service answers (idempotent)."""
    from sparkscale.localenv import EnvironmentStartError, LocalEnvironment, PreflightError

    started = time.monotonic()
    services = (f"the Spark master, {cfg.cluster.workers} worker(s), Redis and ZooKeeper to answer "
                f"(at most {cfg.cluster.start_timeout_s:g} s)")
    try:
        with Waiting(services):
            statuses = LocalEnvironment(cfg).up()
    except PreflightError as exc:
        click.echo(f"cannot start the embedded environment; this machine lacks:\n{exc}", err=True)
        sys.exit(EXIT_ENVIRONMENT)
    except EnvironmentStartError as exc:
        click.echo(f"cannot start the embedded environment: {exc}", err=True)
        sys.exit(EXIT_ENVIRONMENT)
    _print_status(statuses)
    click.echo(f"up in {time.monotonic() - started:.1f} s; run dir {cfg.cluster.run_path}")


@cluster.command("down")
@config_options
def cluster_down(cfg: Config) -> None:
    """Stop exactly the processes `cluster up` started."""
    from sparkscale.localenv import LocalEnvironment

    stopped = LocalEnvironment(cfg).down()
    click.echo(f"stopped: {', '.join(stopped)}" if stopped else "nothing was running")


@cluster.command("status")
@config_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def cluster_status(cfg: Config, as_json: bool) -> None:
    """Show what runs, with pids and ports; exit 1 if any service is down or not answering."""
    from dataclasses import asdict

    from sparkscale.localenv import LocalEnvironment

    statuses = LocalEnvironment(cfg).status()
    if as_json:
        click.echo(json.dumps([asdict(s) for s in statuses], indent=2))
    else:
        _print_status(statuses)
    sys.exit(0 if all(s.running and s.answers for s in statuses) else 1)


def _print_status(statuses: list[ServiceStatus]) -> None:
    rows = [("SERVICE", "STATE", "PID", "PORTS", "ANSWERS")]
    for s in statuses:
        rows.append(
            (
                s.name,
                "running" if s.running else "stopped",
                str(s.pid) if s.running else "-",
                ",".join(f"{s.host}:{port}" for port in s.ports) or "-",
                "yes" if s.answers else "no",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False)).rstrip())
