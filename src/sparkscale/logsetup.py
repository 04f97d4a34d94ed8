"""structlog, configured once: JSON lines to a file and/or stderr, console rendering on a terminal.

Library code only calls `structlog.get_logger()` and logs key-value events; where they go and how
they look is decided here, by the process's entry point.

On the console the daemon's `cycle` event is one short line (`cycle_line`): app, queries, policy,
mode, executors now -> target, the one-line reason and the decision id for `sparkscale explain`.
JSON output (file, journald) keeps every figure of every event.
"""

from __future__ import annotations

import logging
import re
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TextIO

import structlog
from structlog.typing import Processor

from sparkscale.config import LoggingConfig

# Processors that every event passes through, whatever renders it: timestamp, level, and the
# event name with its key-value context.
_SHARED: list[Processor] = [
    structlog.contextvars.merge_contextvars,
    structlog.stdlib.add_log_level,
    structlog.stdlib.add_logger_name,
    structlog.processors.TimeStamper(fmt="iso", utc=True),
    structlog.processors.StackInfoRenderer(),
]


def configure_logging(cfg: LoggingConfig, stderr: TextIO | None = None) -> None:
    """Route all structlog (and stdlib) logging as `cfg` says. Safe to call again (e.g. on reload)."""
    stream = stderr if stderr is not None else sys.stderr
    handlers: list[logging.Handler] = []
    if cfg.stderr:
        console = cfg.stderr_format == "console" or (cfg.stderr_format == "auto" and stream.isatty())
        handler: logging.Handler = logging.StreamHandler(stream)
        handler.setFormatter(_formatter(console=console))
        handlers.append(handler)
    if cfg.file:
        path = Path(cfg.file).expanduser()
        path.parent.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(path, encoding="utf-8")
        handler.setFormatter(_formatter(console=False))
        handlers.append(handler)
    if not handlers:
        handlers.append(logging.NullHandler())

    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
        old.close()
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(cfg.level.upper())
    # Third-party chatter (kazoo's connection state machine, py4j) stays at warning and above.
    for noisy in ("kazoo", "py4j", "apscheduler", "urllib3"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))

    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *_SHARED,
            structlog.processors.format_exc_info,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )


def _formatter(console: bool) -> structlog.stdlib.ProcessorFormatter:
    renderer = (
        CycleLineRenderer(structlog.dev.ConsoleRenderer(colors=True))
        if console
        else structlog.processors.JSONRenderer(sort_keys=False)
    )
    return structlog.stdlib.ProcessorFormatter(
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        # Records from stdlib loggers (kazoo, apscheduler) get the same fields as ours.
        foreign_pre_chain=[*_SHARED, structlog.processors.format_exc_info],
    )


# -- the operator's one line per cycle ---------------------------------------------------------

CYCLE_LINE_WIDTH = 120
_SCALE = re.compile(r"^scale_executors\s+(\d+)\s*->\s*(\d+)")
_CLOCK = re.compile(r"T(\d{2}:\d{2}:\d{2})")
# Explanation lines that say why a planned change was held back (guards, blocklist, Spark mapping).
_HELD = ("guard ", "blocklist:", "spark mapping:")


class CycleLineRenderer:
    """Console renderer: a `cycle` event as `cycle_line`, every other event (or a `cycle` event that
    cannot be read) through `fallback`. Never raises for a `cycle` event's content."""

    def __init__(self, fallback: Callable[[Any, str, Any], Any]) -> None:
        self.fallback = fallback

    def __call__(self, logger: Any, method_name: str, event_dict: Any) -> Any:
        if isinstance(event_dict, Mapping) and event_dict.get("event") == "cycle":
            try:
                return cycle_line(event_dict)
            except Exception:  # a log line must never break the daemon's cycle
                pass
        return self.fallback(logger, method_name, event_dict)


def cycle_line(event: Mapping[str, Any], width: int = CYCLE_LINE_WIDTH) -> str:
    """The daemon's `cycle` event on one line of about `width` characters:

    `12:00:05 clicks/windows+updates  ds2  acted  executors 2 -> 4  scale up: 4 cores needed ...  [1795348805123-0]`

    time of day (of the event's UTC timestamp), app (with its query names when it has several),
    policy, mode (`failed` added when an action was not done), executors now -> target (`=` when no
    executor change is planned), the reason of the first change (else of the first warning; with no
    action, why a change was held back if one was), and the decision id for `sparkscale explain`.
    Missing or odd keys give `?` or are left out."""
    head = [_clock(event.get("timestamp"))]
    app = _text(event.get("app")) or "?"
    names = [_text(q.get("query")) if isinstance(q, Mapping) else _text(q) for q in _seq(event.get("queries"))]
    names = [n for n in names if n]
    if len(names) > 1:
        app += "/" + _clip("+".join(names), 40)
    head.append(app)
    fields = [" ".join(x for x in head if x)]
    if event.get("policy"):
        fields.append(_text(event["policy"]))
    mode = _text(event.get("mode")) or "?"
    statuses = [_text(r.get("status")) for r in _seq(event.get("results")) if isinstance(r, Mapping)]
    if any(s == "failed" for s in statuses):
        mode += " failed"
    fields.append(mode)
    actions = [_text(a) for a in _seq(event.get("actions"))]
    reasons = [_text(r) for r in _seq(event.get("reasons"))]
    fields.append(f"executors {_executors(event.get('executors'))} -> {_target(event, actions)}")

    tail = f"  [{_text(event['decision_id'])}]" if event.get("decision_id") else ""
    line = "  ".join(fields)
    reason, more = _reason(actions, reasons, [_text(x) for x in _seq(event.get("explanation"))],
                           _text(event.get("diagnosis")))
    suffix = f" (+{more} more)" if more else ""
    if reason:
        room = max(width - len(line) - len(tail) - len(suffix) - 2, 24)
        line += "  " + _clip_words(reason, room) + suffix
    return line + tail


def _reason(actions: list[str], reasons: list[str], explanation: list[str], diagnosis: str) -> tuple[str, int]:
    """The reason to show, and how many more actions of its kind (changes, else warnings) there are."""
    pairs = [(a, reasons[i] if i < len(reasons) else "") for i, a in enumerate(actions)]
    changes = [(a, r) for a, r in pairs if not a.startswith("warn")]
    chosen = changes or pairs
    if chosen:
        action, why = chosen[0]
        return (why if _SCALE.match(action) else (f"{action}: {why}" if why else action)), len(chosen) - 1
    held = [line for line in explanation if line.startswith(_HELD)]
    if held:
        return held[-1], 0
    return (f"diagnosis: {diagnosis}" if diagnosis else ""), 0


def _target(event: Mapping[str, Any], actions: list[str]) -> str:
    target = event.get("target_executors")
    if isinstance(target, int) and not isinstance(target, bool):
        return str(target)
    for action in actions:
        match = _SCALE.match(action)
        if match:
            return match.group(2)
    return "="


def _executors(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "?"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _clock(stamp: Any) -> str:
    if isinstance(stamp, str):
        match = _CLOCK.search(stamp)
        return match.group(1) if match else stamp
    if isinstance(stamp, (int, float)) and not isinstance(stamp, bool):
        return time.strftime("%H:%M:%S", time.gmtime(stamp))
    return ""


def _seq(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else []


def _text(value: Any) -> str:
    """One line: newlines and runs of blanks become one space."""
    return " ".join(str(value).split()) if value is not None else ""


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def _clip_words(text: str, width: int) -> str:
    """`_clip`, cutting at a word boundary when one is near the end."""
    if len(text) <= width:
        return text
    cut = text[: max(width - 1, 0)]
    space = cut.rfind(" ")
    if space >= width * 2 // 3:
        cut = cut[:space]
    return cut.rstrip(" ,;:") + "…"
