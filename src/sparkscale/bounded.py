"""Bounded input: what a user hands in (a config, a snapshot or history file, a `--set` value) is
read within limits, so that a bad one is refused by name instead of hanging or raising a traceback.

- Files are read only if they are regular files and under a size cap: a FIFO would block the
  reader for ever, /dev/zero would fill memory (issue 32).
- Integers have a digit limit: Python refuses `int()` of more than 4,300 digits with a ValueError
  from deep inside the JSON or YAML parser, and a huge integer cannot even be printed in an error
  message. Parsers turn a longer one into a `HugeInteger` marker, and `find_huge` names where it is.
- User text in a message is escaped (`printable`): a control character (`\\x1b[31m`, `\\r`) would
  otherwise reach the operator's terminal raw.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

MIB = 1 << 20
CONFIG_MAX_BYTES = 16 * MIB  # a config file (YAML)
DATA_MAX_BYTES = 64 * MIB  # a snapshot or decision-history file (JSON)
MAX_INTEGER_DIGITS = 1000  # far beyond any figure (a float holds at most 309 digits), far below Python's 4,300

_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


class InputFileError(ValueError):
    """A user-given file that is not read: `problem` says why, without the path (the caller's error
    names the file its own way)."""

    def __init__(self, problem: str) -> None:
        self.problem = problem
        super().__init__(problem)


def size_text(size_bytes: int) -> str:
    """`16 MiB` for a cap in whole MiB, else the bytes."""
    return f"{size_bytes // MIB} MiB" if size_bytes % MIB == 0 else f"{size_bytes} bytes"


def read_user_file(path: str | Path, max_bytes: int, what: str = "file") -> bytes:
    """The bytes of `path` if it is a regular file of at most `max_bytes` (`what` names the cap in the
    message: "the 16 MiB cap for a config file"); InputFileError otherwise."""
    cap = f"the {size_text(max_bytes)} cap for a {what}"
    try:
        # O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except IsADirectoryError:
        raise InputFileError("is a directory, not a file") from None
    except OSError as exc:
        raise InputFileError(f"cannot read file: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise InputFileError("is a directory, not a file")
        if not stat.S_ISREG(info.st_mode):
            kind = next((name for test, name in _KINDS if test(info.st_mode)), "no regular file")
            raise InputFileError(f"is {kind}, not a regular file")
        if info.st_size > max_bytes:
            raise InputFileError(f"is {info.st_size} bytes, above {cap}")
        data = _read_at_most(fd, max_bytes + 1)  # a file that grows after fstat is caught here
        if len(data) > max_bytes:
            raise InputFileError(f"is above {cap}")
        return data
    except InputFileError:
        raise
    except OSError as exc:
        raise InputFileError(f"cannot read file: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def _read_at_most(fd: int, limit_bytes: int) -> bytes:
    chunks: list[bytes] = []
    left = limit_bytes
    while left > 0:
        chunk = os.read(fd, min(left, MIB))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


# -- integers --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HugeInteger:
    """An integer literal of more than MAX_INTEGER_DIGITS digits, left unconverted: a parser hands
    this back instead, and the reader refuses it naming where it is (`find_huge`)."""

    digits: int

    def problem(self) -> str:
        return f"an integer of {self.digits} digits (at most {MAX_INTEGER_DIGITS})"


def digit_count(text: str) -> int:
    """Decimal digits of an integer literal (sign, `_` and a base prefix are not counted)."""
    return sum(1 for c in text if c.isdigit())


def bounded_int(text: str) -> int | HugeInteger:
    """A decimal integer literal (JSON's `parse_int`): the int, or a HugeInteger if too long."""
    digits = digit_count(text)
    return HugeInteger(digits) if digits > MAX_INTEGER_DIGITS else int(text)


class BoundedInts:
    """A `parse_int` hook (`bounded_int`) that remembers whether it met a too long integer, so that
    only then is the document searched for it (`find_huge`)."""

    def __init__(self) -> None:
        self.met_huge = False

    def __call__(self, text: str) -> int | HugeInteger:
        value = bounded_int(text)
        if isinstance(value, HugeInteger):
            self.met_huge = True
        return value


def find_huge(document: object) -> tuple[tuple[str | int, ...], HugeInteger] | None:
    """Where the first HugeInteger in a parsed document is (the keys and list indexes leading to it,
    a mapping's own path if it is a key), and the marker; None if there is none. Iterative (the
    document may nest deeply), and each list or mapping is visited once: YAML aliases share them,
    so a "billion laughs" document or a recursive one is walked in the time of its distinct nodes."""
    for path, node in _walk(document):
        if isinstance(node, HugeInteger):
            return path, node
    return None


def _walk(document: object) -> Iterator[tuple[tuple[str | int, ...], object]]:
    stack: list[tuple[tuple[str | int, ...], object]] = [((), document)]
    seen: set[int] = set()
    while stack:
        path, node = stack.pop()
        if isinstance(node, (dict, list)):
            if id(node) in seen:
                continue
            seen.add(id(node))
        yield path, node
        if isinstance(node, dict):
            children: list[tuple[tuple[str | int, ...], object]] = []
            for key, value in node.items():
                if isinstance(key, HugeInteger):
                    yield path, key
                children.append(((*path, key if isinstance(key, int) else str(key)), value))
            stack.extend(reversed(children))
        elif isinstance(node, list):
            stack.extend(reversed([((*path, i), item) for i, item in enumerate(node)]))


# -- text ------------------------------------------------------------------------------------------


def printable(text: str) -> str:
    """`text` with every character a terminal would act on (control, format, line and paragraph
    separators) escaped as repr() does (`\\x1b`, `\\r`, `\\u202e`); other text as it is."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def clip(text: str, width: int) -> str:
    """`text` cut to at most `width` characters, an ellipsis marking the cut (a terminal line, a table cell)."""
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"
