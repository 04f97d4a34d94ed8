"""The operator's view on a terminal: one short line per `cycle` event, everything else unchanged."""

from __future__ import annotations

import io
import json
import re

import structlog

from sparkscale.config import LoggingConfig
from sparkscale.logsetup import CYCLE_LINE_WIDTH, CycleLineRenderer, configure_logging, cycle_line

STAMP = "2026-11-22T12:00:05.123456Z"
SCALE_REASON = "scale up: 4 cores needed at utilisation 0.7"
DS2_REASON = "scale up: 4 cores needed at utilisation 0.7, 4 executor(s) of 1 core(s)"  # DS2's own wording


def event(**changes):
    """A `cycle` event as the daemon logs it (service.py), after the shared processors."""
    base = {
        "event": "cycle", "timestamp": STAMP, "level": "info", "logger": "sparkscale.daemon.service",
        "app": "clicks", "role": "leader", "epoch": 7, "snapshot_id": "clicks/counts@1795348805000",
        "policy": "ds2", "diagnosis": "under_provisioned", "executors": 2, "mode": "acted",
        "decision_id": "1795348805123-0",
        "queries": [{"query": "counts", "arrival_rate": 2000.0, "arrival_estimate": "position",
                     "backlog_records": 12.0, "backlog_estimate": "exact", "partitions": 4}],
        "actions": ["scale_executors 2 -> 4"], "reasons": [SCALE_REASON],
        "results": [{"action": "scale_executors 2 -> 4", "status": "done", "detail": "4 executors",
                     "confirm_s": 11.2}],
        "explanation": ["DS2 over 3 operators ...", "total: cores needed = 4 ..."],
        "observation": {"recommended_executors": 4}, "duration_s": 0.71,
    }
    base.update(changes)
    return base


def test_acted_is_one_line_with_app_policy_mode_executors_reason_and_id():
    line = cycle_line(event())
    assert line == f"12:00:05 clicks  ds2  acted  executors 2 -> 4  {SCALE_REASON}  [1795348805123-0]"
    assert "\n" not in line and len(line) <= CYCLE_LINE_WIDTH
    # A reason too long for the line is cut at a word, the decision id always kept.
    ds2 = cycle_line(event(reasons=[DS2_REASON]))
    assert ds2 == ("12:00:05 clicks  ds2  acted  executors 2 -> 4  scale up: 4 cores needed at utilisation 0.7, 4…"
                   "  [1795348805123-0]")
    assert len(ds2) <= CYCLE_LINE_WIDTH


def test_no_change_shows_equal_target_and_why_a_change_was_held():
    held = "guard cooldown (last action 5 s ago, cooldown 20 s): dropped scale_executors 2 -> 4"
    line = cycle_line(event(mode="no_change", actions=[], reasons=[], results=[], diagnosis=None,
                            explanation=["DS2 over 3 operators ...", held]))
    assert line.startswith("12:00:05 clicks  ds2  no_change  executors 2 -> =  guard cooldown")
    assert line.endswith("  [1795348805123-0]") and len(line) <= CYCLE_LINE_WIDTH
    quiet = cycle_line(event(mode="no_change", actions=[], reasons=[], results=[], diagnosis=None))
    assert quiet == "12:00:05 clicks  ds2  no_change  executors 2 -> =  [1795348805123-0]"


def test_dry_run_shows_the_target_it_would_have_set():
    line = cycle_line(event(mode="dry_run", results=[], target_executors=None))
    assert "  dry_run  executors 2 -> 4  scale up:" in line


def test_target_executors_key_wins_over_the_actions():
    assert "executors 2 -> 3  " in cycle_line(event(target_executors=3))


def test_several_queries_are_named_and_a_long_reason_is_clipped_but_the_id_kept():
    queries = [{"query": "windows"}, {"query": "updates"}]
    long_reason = "scale up: " + "because " * 40
    line = cycle_line(event(queries=queries, reasons=[long_reason + "\nsecond line"]))
    assert line.startswith("12:00:05 clicks/windows+updates  ds2  acted  executors 2 -> 4  scale up: because")
    assert "…  [1795348805123-0]" in line and "\n" not in line
    assert len(line) <= CYCLE_LINE_WIDTH


def test_a_warning_first_does_not_hide_the_change_and_other_actions_are_counted():
    line = cycle_line(event(
        actions=["warn counts/agg", "scale_executors 2 -> 4", "set_parallelism counts/agg 4 -> 8"],
        reasons=["too few partitions", SCALE_REASON, "partition-bound: 4 partitions < π = 8"]))
    assert f"executors 2 -> 4  {SCALE_REASON} (+1 more)" in line
    migration = cycle_line(event(actions=["set_parallelism counts/agg 4 -> 8"], reasons=["partition-bound"]))
    assert "executors 2 -> =  set_parallelism counts/agg 4 -> 8: partition-bound  [" in migration


def test_a_failed_action_is_marked():
    line = cycle_line(event(results=[{"action": "scale_executors 2 -> 4", "status": "failed"}]))
    assert "  acted failed  executors 2 -> 4" in line


def test_missing_and_odd_keys_never_raise():
    assert cycle_line({"event": "cycle"}) == "?  ?  executors ? -> ="
    odd = cycle_line({"event": "cycle", "app": "a", "queries": "x", "actions": None, "reasons": 5,
                      "results": [None, "done"], "executors": "two", "timestamp": 1795348805.0,
                      "explanation": None, "decision_id": None})
    assert re.fullmatch(r"\d\d:\d\d:\d\d a  \?  executors \? -> =", odd), odd
    assert cycle_line(event(actions=["scale_executors 2 -> 4"], reasons=[])).endswith(
        "executors 2 -> 4  [1795348805123-0]")


def test_the_renderer_falls_back_for_other_events_and_for_a_broken_cycle_event():
    seen = []
    renderer = CycleLineRenderer(lambda logger, name, ev: seen.append(ev) or "fallback")
    assert renderer(None, "info", {"event": "actuator.scale", "app": "a"}) == "fallback"
    assert renderer(None, "info", event()).startswith("12:00:05 clicks")

    class Broken(dict):
        def get(self, key, default=None):
            if key == "event":
                return "cycle"
            raise RuntimeError("boom")

    assert renderer(None, "info", Broken()) == "fallback"
    assert len(seen) == 2


def test_console_logging_renders_cycle_as_one_line_and_json_keeps_every_figure(tmp_path):
    stream = io.StringIO()
    log_file = tmp_path / "daemon.jsonl"
    configure_logging(LoggingConfig(stderr_format="console", file=str(log_file)), stderr=stream)
    fields = {k: v for k, v in event().items() if k not in ("event", "timestamp", "level", "logger")}
    structlog.get_logger("t").info("cycle", **fields)
    structlog.get_logger("t").info("actuator.scale", app="clicks", to=4)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2
    assert "clicks  ds2  acted  executors 2 -> 4  scale up:" in lines[0] and lines[0].endswith("[1795348805123-0]")
    assert "actuator.scale" in lines[1] and "to" in lines[1]
    logged = json.loads(log_file.read_text().splitlines()[0])
    assert logged["event"] == "cycle" and logged["queries"][0]["arrival_rate"] == 2000.0
    assert logged["explanation"] == fields["explanation"] and logged["results"][0]["confirm_s"] == 11.2
