"""Why the agent refuses a command, and the argument checks every command handler shares.

A refusal is an answer, not a failure: the loop acks it `ok: false` with the message as detail
(the loop, the executor and the query handlers all raise it, so it lives apart from each).
"""

from __future__ import annotations

from typing import Any


class CommandRefused(Exception):
    """A command the agent will not or cannot carry out; the message becomes the ack's detail."""


def int_arg(args: dict[str, Any], key: str) -> int:
    value = args.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise CommandRefused(f"'{key}' must be an integer (got {value!r})")
    return value


def bool_arg(args: dict[str, Any], key: str, default: bool) -> bool:
    value = args.get(key, default)
    if not isinstance(value, bool):
        raise CommandRefused(f"'{key}' must be true or false (got {value!r})")
    return value


def float_arg(args: dict[str, Any], key: str, default: float) -> float:
    value = args.get(key, default)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
        raise CommandRefused(f"'{key}' must be a positive number (got {value!r})")
    return float(value)
