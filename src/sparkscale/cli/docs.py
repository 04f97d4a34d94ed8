"""`sparkscale docs config|cli`: the generated references (issue 34), printed for docs/. Hidden: a
maintainer's command (tests/unit/test_reference_docs.py fails when the committed pages are stale)."""

from __future__ import annotations

import click

from sparkscale.cli.reference import cli_markdown
from sparkscale.config.reference import configuration_markdown


@click.group("docs", hidden=True)
def docs() -> None:
    """Print a generated reference page."""


@docs.command("config")
def docs_config() -> None:
    """Print docs/configuration.md, generated from the config models."""
    click.echo(configuration_markdown(), nl=False)


@docs.command("cli")
def docs_cli() -> None:
    """Print docs/cli.md, generated from the product's commands (the root group this runs under)."""
    root = click.get_current_context().find_root()
    click.echo(cli_markdown(root.command), nl=False)
