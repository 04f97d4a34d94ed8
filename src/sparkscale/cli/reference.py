"""docs/cli.md, generated from the click command tree (issue 34), so that the reference cannot drift
from what the commands take: every command and group with its usage, help text and options. Pure:
the text of the page for a root group, nothing written.

Only the commands registered on the group itself: the lab's (bench, demo, ...) come through the
entry-point group `sparkscale.commands` and exist only where the lab is installed.
"""

from __future__ import annotations

import inspect
from typing import Any

import click

from sparkscale.config.reference import markdown_cell, markdown_text

REGENERATE = "sparkscale docs cli > docs/cli.md"

_INTRO = f"""\
# Command reference

<!-- Generated from the click commands (src/sparkscale/cli/): do not edit.
     Regenerate with `{REGENERATE}`. -->

The product's commands only. The laboratory's commands (`bench`, `report`, `demo`, `loadgen`,
`verify`, `simulate`) are plug-ins that exist where the lab is installed (`pip install
'sparkscale[lab]'`); `sparkscale COMMAND --help` describes them there. Exit codes: 0 done, 1 failed,
2 a bad config, argument or input file, 3 the environment cannot be used. Every command also takes
`-h`/`--help`.
"""

_HEADER = "| Option | Type | Default | Description |\n|---|---|---|---|"


def cli_markdown(root: click.Command, name: str = "sparkscale") -> str:
    """The whole page for `root` invoked as `name`: each command, groups before their commands."""
    parts = [_INTRO]
    for ctx in _walk(click.Context(root, info_name=name, **root.context_settings)):
        parts.append(_command(ctx))
    return "\n".join(parts)


def _walk(ctx: click.Context) -> list[click.Context]:
    """`ctx` and the contexts of every command under it that is not hidden, by name."""
    found = [ctx]
    if isinstance(ctx.command, click.Group):
        for name in sorted(ctx.command.commands):
            command = ctx.command.commands[name]
            if not command.hidden:
                found += _walk(click.Context(command, info_name=name, parent=ctx))
    return found


def _command(ctx: click.Context) -> str:
    command = ctx.command
    depth = min(ctx.command_path.count(" ") + 2, 4)
    usage = " ".join([ctx.command_path, *command.collect_usage_pieces(ctx)])
    lines = [f"{'#' * depth} `{ctx.command_path}`", "", f"Usage: `{usage}`", ""]
    help_text = inspect.cleandoc(command.help or "").replace("\b\n", "")
    if help_text:
        lines += [markdown_text(help_text), ""]
    if isinstance(command, click.Group):
        visible = [(n, c) for n, c in sorted(command.commands.items()) if not c.hidden]
        lines += ["Commands:", ""]
        lines += [f"- `{n}`: {markdown_text(c.get_short_help_str(limit=200))}" for n, c in visible]
        lines.append("")
    options = [_option(p, ctx) for p in command.get_params(ctx)
               if isinstance(p, click.Option) and not p.hidden and not set(p.opts) & set(ctx.help_option_names)]
    if options:
        lines += [_HEADER, *options, ""]
    return "\n".join(lines)


def _option(option: click.Option, ctx: click.Context) -> str:
    names = ", ".join([*option.opts, *option.secondary_opts]) + (f" {option.metavar}" if option.metavar else "")
    kind = "flag" if option.is_flag else _type(option.type)
    help_text = " ".join((option.help or "").split())
    if option.required:
        help_text += " Required."
    if option.multiple:
        help_text += " May be given several times."
    if option.envvar:
        help_text += f" Env: `{option.envvar}`."
    cells = [f"`{markdown_cell(names)}`", markdown_cell(kind), _default(option, ctx),
             markdown_cell(markdown_text(help_text))]
    return "| " + " | ".join(cells) + " |"


def _default(option: click.Option, ctx: click.Context) -> str:
    """The default an operator sees: none for a flag that is off, a None or an empty multiple option."""
    default = option.get_default(ctx, call=True)
    if isinstance(default, (tuple, list)) and default:
        return ", ".join(f"`{markdown_cell(str(d))}`" for d in default)
    if default is True or (isinstance(default, (str, int, float)) and not isinstance(default, bool)):
        return f"`{markdown_cell(str(default))}`"
    return ""  # none: a flag that is off, None, an empty multiple option, click's "unset"


def _type(kind: click.ParamType[Any, Any]) -> str:
    """An option's value type, with its range or choices: `integer >= 1`, `one of ccr, dcr, dsm`."""
    if isinstance(kind, click.Choice):
        return "one of " + ", ".join(str(c) for c in kind.choices)
    if isinstance(kind, (click.IntRange, click.FloatRange)):
        base = "integer" if isinstance(kind, click.IntRange) else "number"
        low = None if kind.min is None else f"{'>' if kind.min_open else '>='} {kind.min}"
        high = None if kind.max is None else f"{'<' if kind.max_open else '<='} {kind.max}"
        return " ".join([base, ", ".join(b for b in (low, high) if b)])
    return {"text": "text", "integer": "integer", "float": "number", "boolean": "boolean"}.get(kind.name, kind.name)
