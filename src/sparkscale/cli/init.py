"""`sparkscale init [DIR]`: the shipped commented config and the systemd units, filled in for this
host, written where the operator starts from (sparkscale/host_files.py); then the next steps."""

from __future__ import annotations

import sys

import click

from sparkscale.cli.common import EXIT_CONFIG


@click.command("init")
@click.argument("directory", type=click.Path(file_okay=False), default=".")
@click.option("--user", default=None, help="The user the units run as (default: the current one).")
@click.option("--executable", default=None, type=click.Path(dir_okay=False),
              help="The `sparkscale` the units run (default: this installation's).")
@click.option("--force", is_flag=True, help="Overwrite files that are there already.")
def init_command(directory: str, user: str | None, executable: str | None, force: bool) -> None:
    """Write sparkscale.yaml (every key, commented, at its default) and the systemd units
    sparkscale.service and sparkscale-app@.service into DIRECTORY (default: here), the units filled
    in for this host: this installation's `sparkscale`, the user (--user, default: you) and the
    config's path. Then print the next steps. Exit 2, naming the file, when one is there already
    (unless --force)."""
    from sparkscale.host_files import existing, host_setup, next_steps, write

    try:
        setup = host_setup(directory, user, executable)
        files = setup.files()
    except (FileNotFoundError, ValueError) as exc:
        click.echo(f"cannot init: {exc}", err=True)
        sys.exit(EXIT_CONFIG)
    there = existing(files)
    if there and not force:
        click.echo(f"{there[0]} exists: not overwritten (--force to overwrite"
                   + (f"; also there: {', '.join(str(p) for p in there[1:])})" if there[1:] else ")"), err=True)
        sys.exit(EXIT_CONFIG)
    try:
        write(files)
    except OSError as exc:
        click.echo(f"cannot write {exc.filename or directory}: {exc.strerror or exc}", err=True)
        sys.exit(EXIT_CONFIG)
    for f in files:
        click.echo(f"wrote {f.path}")
    click.echo(f"(the units run {setup.executable} as {setup.user}:{setup.group} on {setup.config_path})\n")
    click.echo(next_steps(setup))
