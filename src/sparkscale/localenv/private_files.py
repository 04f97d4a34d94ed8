"""Files that may hold a secret (a service's config with its password, a driver's Spark properties):
written readable by this user only, so that nothing but the process they are for can read them."""

from __future__ import annotations

import os
from pathlib import Path


def write_private(path: Path, text: str) -> None:
    """Write `text` to `path` with mode 0600, also when the file exists with another mode."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # a file left by an earlier run keeps its mode otherwise
    with os.fdopen(fd, "w") as f:
        f.write(text)
