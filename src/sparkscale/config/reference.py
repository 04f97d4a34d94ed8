"""docs/configuration.md, generated from the config models (issue 34), so that the reference cannot
drift from what the loader accepts: every key with its type, default, bounds, description and an
example (keys.py reads them off the models). Pure: the text of the page, nothing written."""

from __future__ import annotations

from sparkscale.config.keys import KeyDoc, config_keys

REGENERATE = "sparkscale docs config > docs/configuration.md"

_INTRO = f"""\
# Configuration reference

<!-- Generated from the config models (src/sparkscale/config/, each policy's own section model):
     do not edit. Regenerate with `{REGENERATE}`. -->

Every key of the config file. Every key has a default aimed at the embedded local environment
(`sparkscale cluster up`), so a file names only the keys it changes; unknown keys are errors.
configs/sparkscale.yaml is the shipped file, commented. Override any key on the command line with
`--set dotted.key=value` (list items by index or by name: `--set apps.wordcount.max_executors=4`),
and explain one with `sparkscale check-config FILE --explain KEY`.

Keys are written as dotted paths; `apps[]` is an item of the list `apps`. Bounds: `[a, b]` includes
both ends, `(a, b)` excludes them. The settings sections of the built-in policies, placement
policies and their models are listed under `policy` and `placement`; a plug-in brings its own.
"""

_HEADER = "| Key | Type | Default | Bounds | Example | Description |\n|---|---|---|---|---|---|"


def configuration_markdown() -> str:
    """The whole page: an introduction, then per section its description and a table of its keys."""
    parts = [_INTRO]
    rows: list[str] = []
    for key in config_keys(builtin_only=True):
        if key.is_section:
            parts += _table(rows)
            rows = []
            parts.append(_section(key))
        else:
            rows.append(_row(key))
    parts += _table(rows)
    return "\n".join(parts)


def _section(key: KeyDoc) -> str:
    depth = min(key.key.count(".") + 2, 4)
    lines = [f"{'#' * depth} `{key.key}`", "", markdown_text(key.description)]
    if key.is_list:
        lines += ["", f"Default: `{markdown_cell(key.default_text)}`."]
        if key.example_text and key.example_text != key.default_text:
            lines[-1] += f" Example: `{markdown_cell(key.example_text)}`."
    return "\n".join(lines) + "\n"


def _row(key: KeyDoc) -> str:
    bounds = f"`{markdown_cell(key.bounds_text)}`" if key.bounds_text else ""
    default = f"`{markdown_cell(key.default_text)}`" if key.has_default else "required"
    cells = [f"`{key.key}`", key.type_text, default, bounds, f"`{markdown_cell(key.example_text)}`",
             markdown_cell(markdown_text(key.description))]
    return "| " + " | ".join(cells) + " |"


def _table(rows: list[str]) -> list[str]:
    return [_HEADER + "\n" + "\n".join(rows) + "\n"] if rows else []


def markdown_text(text: str) -> str:
    """Prose for markdown: a <name> placeholder shown, not taken for an HTML tag (escaped outside
    code spans only: inside one, `&lt;` would show as it is)."""
    pieces = text.split("`")
    return "`".join(p if i % 2 else p.replace("<", "&lt;") for i, p in enumerate(pieces))


def markdown_cell(text: str) -> str:
    return text.replace("|", "\\|")


if __name__ == "__main__":
    print(configuration_markdown(), end="")
