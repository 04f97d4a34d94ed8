"""What is wrong with a config: each problem with its source, key and value, all of them in one error
(`sparkscale check-config` exits 2 with them). Apart from the loader, which imports every section,
so that reading a secret on use (secrets.py) can raise them too."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ConfigProblem:
    """One thing wrong with a config: where it came from, which key, what it held, what is wanted."""

    source: str
    key: str
    message: str
    value: Any = None
    has_value: bool = False

    def __str__(self) -> str:
        got = f" (got {self.value!r})" if self.has_value else ""
        key = f"{self.key}: " if self.key else ""
        return f"{self.source}: {key}{self.message}{got}"


class ConfigError(Exception):
    """A config that cannot be used; `str()` lists every problem, one per line."""

    def __init__(self, problems: list[ConfigProblem]):
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))
