"""Reading a secret file: a regular file that neither group nor others can read or write
(mode & 0o077 == 0), holding UTF-8 text. A password others can read is no longer one, and one others
can write lets them choose it. Messages name the file and the fix, never the content."""

from __future__ import annotations

import os
import stat
from pathlib import Path

# A password or USER:PASSWORD line is short; /dev/zero's like, or a log file named by mistake, is not read whole.
MAX_SECRET_BYTES = 64 * 1024


class SecretFileProblem(ValueError):
    """A secret file that cannot be used. The message names the file and the fix, never its content
    (a ValueError, so a config validator reports it under its key)."""


def read_secret_file(path: str | Path) -> str:
    """The secret in `path`, one trailing newline stripped; SecretFileProblem if the file is missing,
    not a regular file, open to group or others, unreadable, empty or not UTF-8 text."""
    p = Path(path).expanduser()
    try:
        # O_NONBLOCK: a FIFO put in a secret's place must not hang the opener.
        with open(p, "rb", opener=lambda name, flags: os.open(name, flags | os.O_NONBLOCK)) as f:
            info = os.fstat(f.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise SecretFileProblem(f"secret file {p} is not a regular file")
            mode = stat.S_IMODE(info.st_mode)
            if mode & 0o077:
                raise SecretFileProblem(
                    f"secret file {p} is open to group or others (mode {mode:04o}); "
                    f"run: chmod 600 {p}"
                )
            raw = f.read(MAX_SECRET_BYTES + 1)
            if len(raw) > MAX_SECRET_BYTES:
                raise SecretFileProblem(f"secret file {p} is above {MAX_SECRET_BYTES} bytes: not a secret file")
    except FileNotFoundError:
        raise SecretFileProblem(f"secret file {p} does not exist") from None
    except IsADirectoryError:
        raise SecretFileProblem(f"secret file {p} is not a regular file") from None
    except OSError as exc:
        raise SecretFileProblem(f"cannot read secret file {p}: {exc.strerror}") from None
    text = _decoded(raw)
    if text is None:  # outside the except block: the decode error (holding the bytes) is not chained
        raise SecretFileProblem(f"secret file {p} is not UTF-8 text")
    if text.endswith("\r\n"):
        text = text[:-2]
    elif text.endswith("\n"):
        text = text[:-1]
    if not text:
        raise SecretFileProblem(f"secret file {p} is empty")
    return text


def _decoded(raw: bytes) -> str | None:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def split_digest(text: str, where: str) -> tuple[str, str]:
    """(user, password) of a ZooKeeper digest identity `USER:PASSWORD`; ValueError naming `where`."""
    user, sep, password = text.partition(":")
    if not sep or not user or not password or any(c in text for c in "\r\n"):
        raise SecretFileProblem(f"{where} must hold one line USER:PASSWORD (a user and a password, both non-empty)")
    return user, password
