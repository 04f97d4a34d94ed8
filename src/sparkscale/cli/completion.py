"""`sparkscale completion bash|zsh`: click's shell completion script for `sparkscale`."""

from __future__ import annotations

import click
from click.shell_completion import get_completion_class

PROG = "sparkscale"
COMPLETE_VAR = "_SPARKSCALE_COMPLETE"  # click's name for it: _{PROG}_COMPLETE, upper case


@click.command("completion")
@click.argument("shell", type=click.Choice(["bash", "zsh"]))
def completion_command(shell: str) -> None:
    """Print the completion script of SHELL for `sparkscale` (commands, options, choices).

    \b
    bash:  eval "$(sparkscale completion bash)"   (in ~/.bashrc), or save it:
           sparkscale completion bash > ~/.local/share/bash-completion/completions/sparkscale
    zsh:   eval "$(sparkscale completion zsh)"    (in ~/.zshrc, after compinit)
    """
    root = click.get_current_context().find_root().command  # the `sparkscale` group (no import of cli/)
    cls = get_completion_class(shell)
    assert cls is not None  # click ships bash and zsh
    click.echo(cls(root, {}, PROG, COMPLETE_VAR).source())
