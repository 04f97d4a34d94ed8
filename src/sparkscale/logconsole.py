"""What the log looks like on a terminal (logging.stderr_format console, or auto on a tty).

`logging.console_events: brief` (issue 33: the decisions could not be read between multi-kilobyte
`monitor.snapshot` lines) shows one line per `cycle` event (`cycle_line`), one per action event
(`action_line`: what, why in a few words, the expected effect, the decision id for `sparkscale
explain`), warnings and errors and the daemon's start and stop (`short_line`), and nothing else
(`BriefFilter`); `all` shows every event as structlog's ConsoleRenderer does, `cycle` as its line.
JSON output (the file, journald) keeps every event with every field (logsetup.py).
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeGuard

from pydantic import JsonValue

from sparkscale.bounded import clip, printable
from sparkscale.policies.ds2_model import num
from sparkscale.policies.outcomes import CAPACITY, KEEPS_UP

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


def cycle_line(event: Mapping[str, JsonValue], width: int = CYCLE_LINE_WIDTH) -> str:
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
        app += "/" + clip("+".join(names), 40)
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


def _target(event: Mapping[str, JsonValue], actions: list[str]) -> str:
    target = event.get("target_executors")
    if isinstance(target, int) and not isinstance(target, bool):
        return str(target)
    for action in actions:
        match = _SCALE.match(action)
        if match:
            return match.group(2)
    return "="


def _executors(value: object) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "?"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _clock(stamp: object) -> str:
    if isinstance(stamp, str):
        match = _CLOCK.search(stamp)
        return match.group(1) if match else stamp
    if isinstance(stamp, (int, float)) and not isinstance(stamp, bool):
        return time.strftime("%H:%M:%S", time.gmtime(stamp))
    return ""


def _seq(value: object) -> list[object]:
    return list(value) if isinstance(value, (list, tuple)) else []


def _text(value: object) -> str:
    """One line: newlines and runs of blanks become one space."""
    return " ".join(str(value).split()) if value is not None else ""


def _clip_words(text: str, width: int) -> str:
    """`clip`, cutting at a word boundary when one is near the end."""
    if len(text) <= width:
        return text
    cut = text[: max(width - 1, 0)]
    space = cut.rfind(" ")
    if space >= width * 2 // 3:
        cut = cut[:space]
    return cut.rstrip(" ,;:") + "…"


# -- logging.console_events brief ---------------------------------------------------------------

# The loop's action events (daemon/feeds.py's LogFeed) and the daemon's start and stop
# (daemon/service.py): the info events a brief console shows besides `cycle`.
ACTION_EVENTS = frozenset({"action.started", "action.done", "action.error", "migration.resumed"})
START_STOP_EVENTS = frozenset({"daemon.start", "daemon.stopping", "daemon.stop"})
BRIEF_EVENTS = frozenset({"cycle", *ACTION_EVENTS, *START_STOP_EVENTS})
# Keys every event has, or that a short line shows elsewhere or not at all (the traceback).
_NOT_SHOWN = frozenset({"event", "timestamp", "level", "logger", "app", "exc_info", "exception", "stack"})
_VALUE_WIDTH = 60  # one field of a short line
_MIN_REASON_WIDTH = 24  # an action line's reason gets at least this (the line may then pass its width)


class BriefFilter(logging.Filter):
    """Lets through to a terminal only what a brief console shows: `BRIEF_EVENTS` and every
    warning or error (of our loggers or a library's)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING:
            return True
        # structlog's records carry the event's dict (ProcessorFormatter.wrap_for_formatter).
        return isinstance(record.msg, Mapping) and record.msg.get("event") in BRIEF_EVENTS


class BriefRenderer:
    """Console renderer for a brief console: `cycle` as `cycle_line`, action events as
    `action_line`, anything else (warnings, errors, start and stop) as `short_line`; an event
    its line cannot read goes through `fallback`. Never raises for an event's content."""

    def __init__(self, fallback: Callable[[Any, str, Any], Any], width: int = CYCLE_LINE_WIDTH) -> None:
        self.fallback = fallback
        self.width = width

    def __call__(self, logger: Any, method_name: str, event_dict: Any) -> Any:
        if isinstance(event_dict, Mapping):
            try:
                name = event_dict.get("event")
                if name == "cycle":
                    return printable(cycle_line(event_dict, self.width))
                if name in ACTION_EVENTS:
                    return printable(action_line(event_dict, self.width))
                return printable(short_line(event_dict, self.width))
            except Exception:  # a log line must never break the daemon's cycle
                pass
        return self.fallback(logger, method_name, event_dict)


def action_line(event: Mapping[str, JsonValue], width: int = CYCLE_LINE_WIDTH) -> str:
    """One of the loop's action events on one line of at most about `width` characters:

    `12:00:05 wc  acting  scale_executors 2 -> 4  scale up: 4 cores…  expect capacity 3,600 rec/s  [1795348805123-0]`
    `12:00:16 wc  done  scale_executors 2 -> 4: 4 active executors  in 11.2 s  [1795348805123-0]`

    time, app, what happened (acting, done, failed, action error, migration resumed), the actions
    or results, the first change's reason (`(+n more)` for the others; cut to the room left, at
    least 24 characters, like `cycle_line`'s), the figure the action is expected to bring or how
    long it took, and the decision id for `sparkscale explain`."""
    name = _text(event.get("event"))
    head = " ".join(x for x in (_clock(event.get("timestamp")), _text(event.get("app")) or "?") if x)
    tail = f"  [{_text(event['decision_id'])}]" if event.get("decision_id") else ""
    why, after = "", ""
    if name == "action.started":
        label, what = "acting", _text(event.get("actions")) or "?"
        reasons = [_text(r) for r in _seq(event.get("reasons")) if _text(r)]
        if reasons:
            why = reasons[0] + (f" (+{len(reasons) - 1} more)" if len(reasons) > 1 else "")
        after = _effect(event.get("expected"))
    elif name == "action.done":
        label, what = _results(event.get("results"))
        duration_s = event.get("duration_s")
        after = f"in {num(duration_s)} s" if _is_number(duration_s) else ""
    elif name == "migration.resumed":
        label = f"migration resumed {_text(event.get('status')) or '?'}"
        what = _text(event.get("detail"))
    else:
        label, what = "action error", _text(event.get("error"))
    line = "  ".join(x for x in (head, label, clip(what, width // 2)) if x)
    rest = f"  {after}" if after else ""
    room = width - len(line) - len(rest) - len(tail) - 2
    if why:
        line += "  " + _clip_words(why, max(room, _MIN_REASON_WIDTH))
    return line + rest + tail


def short_line(event: Mapping[str, JsonValue], width: int = CYCLE_LINE_WIDTH) -> str:
    """A warning, an error or the daemon's start or stop on one line of at most `width` characters:

    `12:00:07 clicks  warning  cycle.unreachable  error=Connection refused  failures=3  retry_in_s=10`

    time, app, level (above info), event name, then its other fields as key=value in the order
    they were logged (empty ones left out, each cut to 60 characters), and for an error logged with
    its traceback and no `error` field, the traceback's last line. The JSON log has the rest."""
    level = _text(event.get("level"))
    head = " ".join(x for x in (_clock(event.get("timestamp")), _text(event.get("app"))) if x)
    fields = [head, level if level not in ("", "debug", "info") else "", _text(event.get("event")) or "?"]
    for key, value in event.items():
        shown = "" if key in _NOT_SHOWN else _value(value)
        if shown:
            fields.append(f"{key}={clip(shown, _VALUE_WIDTH)}")
    trace = str(event.get("exception") or "").strip().splitlines()
    if trace and "error" not in event:
        fields.append(f"exception={clip(_text(trace[-1]), _VALUE_WIDTH)}")
    return clip("  ".join(f for f in fields if f), width)


def _results(value: object) -> tuple[str, str]:
    """What an `action.done` event's results say: the label (done, failed, ...) and the results."""
    results = [r for r in _seq(value) if isinstance(r, Mapping)]
    statuses = [_text(r.get("status")) or "?" for r in results]
    mixed = len(set(statuses)) > 1
    label = "failed" if "failed" in statuses else ("/".join(dict.fromkeys(statuses)) or "done")
    shown = []
    for result, status in zip(results, statuses, strict=True):
        item = (_text(result.get("action")) or "?") + (f" {status}" if mixed else "")
        detail = _text(result.get("detail"))
        shown.append(f"{item}: {detail}" if detail else item)
    return label, "; ".join(shown)


def _effect(expected: object) -> str:
    """What an `action.started` event's `expected` (policies/outcomes.py's Expectation) says the
    figure it judges will be after the action, in a few words."""
    if not isinstance(expected, Mapping):
        return ""
    metric = _text(expected.get("metric"))
    if metric == KEEPS_UP:
        return "expect it keeps up"
    after = expected.get("after")
    if not _is_number(after):
        return f"expect {metric}" if metric else ""
    figure = num(after if abs(after) < 100 else round(after))  # a rate of records/s in whole records
    if metric == CAPACITY:
        return f"expect capacity {figure} rec/s"
    if metric == "processed_rate":
        return f"expect processed {figure} rec/s"
    if metric == "batch_ratio":
        return f"expect batch ratio {figure}"
    return f"expect {metric} {figure}"


def _value(value: object) -> str:
    """A short line's field: lists comma-separated, mappings as compact JSON, None and "" empty."""
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return ",".join(_value(v) for v in value)
    if isinstance(value, Mapping):
        return _text(json.dumps(value, default=str, separators=(",", ":")))
    return _text(value)


def _is_number(value: object) -> TypeGuard[float]:
    """An int or a float, not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)
