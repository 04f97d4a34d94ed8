"""Logging: JSON lines with timestamp, level, event and context; console rendering on request."""

from __future__ import annotations

import io
import json

import structlog

from sparkscale.config import LoggingConfig
from sparkscale.logsetup import configure_logging


def test_json_lines_to_file_and_stderr_carry_timestamp_level_event_and_context(tmp_path):
    stream = io.StringIO()  # not a terminal: auto renders JSON
    log_file = tmp_path / "logs" / "sparkscale.jsonl"
    configure_logging(LoggingConfig(file=str(log_file)), stderr=stream)
    structlog.get_logger("t").info("scale.executors", app="wordcount", from_=2, to=5, reason="backlog")
    structlog.get_logger("t").debug("hidden")  # below the default level
    for text in (stream.getvalue(), log_file.read_text()):
        [line] = text.strip().splitlines()
        event = json.loads(line)
        assert event["event"] == "scale.executors"
        assert event["level"] == "info"
        assert event["timestamp"].endswith("Z")
        assert (event["app"], event["from_"], event["to"], event["reason"]) == ("wordcount", 2, 5, "backlog")


def test_console_format_is_human_readable_and_level_is_honoured():
    stream = io.StringIO()
    configure_logging(LoggingConfig(stderr_format="console", console_events="all", level="warning"), stderr=stream)
    structlog.get_logger("t").info("not.shown")
    structlog.get_logger("t").warning("cycle.spark_unreachable", app="wc")
    text = stream.getvalue()
    assert "not.shown" not in text
    assert "cycle.spark_unreachable" in text and "app" in text and "wc" in text
    assert not text.lstrip().startswith("{")


def test_stdlib_loggers_are_rendered_the_same_way():
    import logging

    stream = io.StringIO()
    configure_logging(LoggingConfig(stderr_format="json"), stderr=stream)
    logging.getLogger("some.library").error("boom %s", 3)
    event = json.loads(stream.getvalue().strip())
    assert event["event"] == "boom 3" and event["level"] == "error" and "timestamp" in event


def test_stderr_off_writes_nothing_there(tmp_path):
    stream = io.StringIO()
    configure_logging(LoggingConfig(stderr=False, file=str(tmp_path / "x.jsonl")), stderr=stream)
    structlog.get_logger("t").info("only.file")
    assert stream.getvalue() == ""
    assert "only.file" in (tmp_path / "x.jsonl").read_text()


def test_console_events_brief_leaves_json_stderr_whole_and_shows_a_library_s_warnings_only():
    import logging

    stream = io.StringIO()
    configure_logging(LoggingConfig(stderr_format="json", console_events="brief"), stderr=stream)
    structlog.get_logger("t").info("monitor.snapshot", app="wc", arrival_rate=10.0)
    structlog.get_logger("t").info("outcome", app="wc", met=True)
    assert [json.loads(line)["event"] for line in stream.getvalue().splitlines()] == ["monitor.snapshot", "outcome"]

    console = io.StringIO()
    configure_logging(LoggingConfig(stderr_format="console", level="debug"), stderr=console)
    logging.getLogger("some.library").info("chatter %s", 1)
    logging.getLogger("some.library").warning("disk %s", "full")
    structlog.get_logger("t").debug("host.sampled", cpu=0.5)
    [line] = console.getvalue().splitlines()
    assert line.endswith(" warning  disk full") and len(line) == len("12:00:05  warning  disk full")
