"""structlog, configured once: JSON lines to a file and/or stderr, console rendering on a terminal.

Library code only calls `structlog.get_logger()` and logs key-value events; where they go is
decided here, by the process's entry point. JSON output (file, journald) keeps every figure of
every event; what a terminal shows of them (`logging.console_events`) is logconsole.py's.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import TextIO

import structlog
from structlog.typing import Processor

from sparkscale.config import LoggingConfig
from sparkscale.logconsole import BriefFilter, BriefRenderer, CycleLineRenderer

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
        brief = console and cfg.console_events == "brief"
        handler: logging.Handler = logging.StreamHandler(stream)
        handler.setFormatter(_formatter(console=console, brief=brief))
        if brief:
            handler.addFilter(BriefFilter())
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


def _formatter(console: bool, brief: bool = False) -> structlog.stdlib.ProcessorFormatter:
    """JSON lines; or, on a console, `brief` lines or every event (`cycle` as its line)."""
    renderer: Processor = structlog.processors.JSONRenderer(sort_keys=False)
    if console:
        every_event = structlog.dev.ConsoleRenderer(colors=True)
        renderer = BriefRenderer(every_event) if brief else CycleLineRenderer(every_event)
    return structlog.stdlib.ProcessorFormatter(
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        # Records from stdlib loggers (kazoo, apscheduler) get the same fields as ours.
        foreign_pre_chain=[*_SHARED, structlog.processors.format_exc_info],
    )
