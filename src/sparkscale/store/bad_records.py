"""Malformed records met when reading: skipped, each logged once (`store.bad_record`).

A value another process (or a person, or an older writer) left in Redis or ZooKeeper must not stop a
daemon cycle: the reader skips the record and returns the rest. Reads repeat every cycle, so the
same bad record is logged once per reader, not once a cycle.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict

import structlog

log = structlog.get_logger(__name__)

# What parsing a bad record raises (RecursionError: JSON nested too deeply for the parser).
PROBLEMS = (ValueError, TypeError, KeyError, AttributeError, RecursionError)
REMEMBERED = 10_000  # records remembered as logged; beyond, the oldest may be logged again
ESCAPED_MAX_CHARS = 200  # a stored value quoted in a log line: longer ones are cut


class BadRecords:
    """The (key, record id) pairs already logged as bad, the oldest forgotten past `REMEMBERED`."""

    def __init__(self) -> None:
        self._logged: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._lock = threading.Lock()

    def skip(self, key: str, record: str, problem: str | BaseException) -> None:
        """Log the record at `key` (a Redis key or znode path; `record`: its id there) as skipped."""
        with self._lock:
            if (key, record) in self._logged:
                return
            self._logged[(key, record)] = None
            while len(self._logged) > REMEMBERED:
                self._logged.popitem(last=False)
        log.warning("store.bad_record", key=escaped(key), record=escaped(record),
                    problem=escaped(describe(problem), 4 * ESCAPED_MAX_CHARS), action="skipped")


def describe(problem: str | BaseException) -> str:
    """A problem in a line: an exception's message, with its type when it has none of its own."""
    if isinstance(problem, str):
        return problem
    text = str(problem)
    return f"{type(problem).__name__}: {text}" if text and isinstance(problem, (KeyError, TypeError)) \
        else text or type(problem).__name__


def escaped(value: str | bytes, limit: int = ESCAPED_MAX_CHARS) -> str:
    """A stored value as one printable line: control and non-ASCII characters as Python escapes, cut
    at `limit` characters (a record another process wrote must not forge log lines or flood them)."""
    text = value.decode("utf-8", "backslashreplace") if isinstance(value, bytes) else value
    out = text.encode("ascii", "backslashreplace").decode("ascii")
    out = "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in out)
    return out if len(out) <= limit else out[:limit] + "..."


def _refuse_constant(name: str) -> object:
    raise ValueError(f"{name} is not a finite number")


def load_json(data: str | bytes) -> object:
    """A stored record's JSON, with NaN and Infinity refused (Python's json writes and reads them,
    JSON has no such numbers, and no stored figure may be one)."""
    return json.loads(data, parse_constant=_refuse_constant)
