"""What is wrong with a config: each problem with its source, key and value, all of them in one error
(`sparkscale check-config` exits 2 with them). Apart from the loader, which imports every section,
so that reading a secret on use (secrets.py) can raise them too."""

from __future__ import annotations

from dataclasses import dataclass

from sparkscale.bounded import printable

MAX_SHOWN_CHARS = 200  # of a value in a message: a longer one is cut, saying how long it was


@dataclass(frozen=True)
class ConfigProblem:
    """One thing wrong with a config: where it came from, which key, what it held, what is wanted."""

    source: str
    key: str
    message: str
    value: object = None
    has_value: bool = False

    def __str__(self) -> str:
        """One line; the source, key and message may hold user text: control characters in them are
        escaped (`\\x1b`), so that they do not act on the operator's terminal."""
        got = f" (got {shown(self.value)})" if self.has_value else ""
        key = f"{self.key}: " if self.key else ""
        return printable(f"{self.source}: {key}{self.message}{got}")


def shown(value: object) -> str:
    """A value as a message shows it: its repr (which escapes control characters), an integer of
    many digits by its length, a long text cut."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**40:
        return f"an integer of {len(str(abs(value)))} digits"
    text = repr(value)
    if len(text) > MAX_SHOWN_CHARS:
        return f"{text[:MAX_SHOWN_CHARS // 2]}... ({len(text)} characters)"
    return text


class ConfigError(Exception):
    """A config that cannot be used; `str()` lists every problem, one per line."""

    def __init__(self, problems: list[ConfigProblem]):
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))
