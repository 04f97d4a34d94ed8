"""The operator's view on a terminal (logconsole.py): one short line per `cycle` event and per
action event, warnings, errors, start and stop as short lines; with `console_events: all` every
other event as structlog renders it."""

from __future__ import annotations

import io
import json
import re

import pytest
import structlog

from sparkscale.config import LoggingConfig
from sparkscale.control.events import ActionCrashed, ActionDone, ActionStarted, OutcomeJudged
from sparkscale.daemon.feeds import LogFeed
from sparkscale.logconsole import (
    CYCLE_LINE_WIDTH,
    BriefRenderer,
    CycleLineRenderer,
    action_line,
    cycle_line,
    short_line,
)
from sparkscale.logsetup import configure_logging
from sparkscale.model.action_result import ActionResult
from sparkscale.model.plan import Action
from sparkscale.policies.outcomes import CAPACITY, Expectation

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
    configure_logging(LoggingConfig(stderr_format="console", console_events="all", file=str(log_file)),
                      stderr=stream)
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


# -- logging.console_events brief: one line per action event, short warnings ---------------------

DECISION = "1795348805123-0"
EXPECTED = {"diagnosis": "under_provisioning", "action_type": "scale_executors", "metric": "capacity_rps",
            "before": 1800.4, "after": 3600.7, "backlog_before": 12.0}


def started(**changes):
    """An `action.started` event as daemon/feeds.py logs it."""
    base = {"event": "action.started", "timestamp": STAMP, "level": "info", "logger": "sparkscale.daemon.service",
            "app": "clicks", "decision_id": DECISION, "actions": "scale_executors 2 -> 4",
            "reasons": [SCALE_REASON], "expected": EXPECTED}
    base.update(changes)
    return base


def done(*results, **changes):
    base = {"event": "action.done", "timestamp": STAMP, "level": "info", "app": "clicks", "decision_id": DECISION,
            "duration_s": 12.3456, "results": list(results)}
    base.update(changes)
    return base


def test_an_action_that_starts_says_what_why_what_it_should_bring_and_its_id():
    line = action_line(started())
    assert line == ("12:00:05 clicks  acting  scale_executors 2 -> 4  scale up: 4 cores…"
                    "  expect capacity 3,601 rec/s  [1795348805123-0]")
    assert len(line) <= CYCLE_LINE_WIDTH
    several = action_line(started(actions="scale_executors 2 -> 4; set_parallelism counts/agg 4 -> 8",
                                  reasons=["more", "partition-bound"], expected=None))
    assert several == ("12:00:05 clicks  acting  scale_executors 2 -> 4; set_parallelism counts/agg 4 -> 8"
                       "  more (+1 more)  [1795348805123-0]")


@pytest.mark.parametrize(("expected", "effect"), [
    ({"metric": "processed_rate", "before": 1000.0, "after": 1999.6}, "expect processed 2,000 rec/s"),
    ({"metric": "batch_ratio", "before": 1.2, "after": 0.6}, "expect batch ratio 0.6"),
    ({"metric": "keeps_up", "before": 2000.0, "after": 2000.0}, "expect it keeps up"),
    ({"metric": "lag_s", "before": 30.0, "after": 2.5}, "expect lag_s 2.5"),
    ({"metric": "processed_rate", "after": None}, "expect processed_rate"),
])
def test_each_expected_figure_is_said_in_a_few_words(expected, effect):
    assert action_line(started(reasons=["r"], expected=expected)).endswith(f"  r  {effect}  [{DECISION}]")


def test_an_action_that_ended_says_how_and_in_how_long():
    ok = {"action": "scale_executors 2 -> 4", "status": "done", "detail": "4 active executors", "confirm_s": 11.2}
    assert action_line(done(ok)) == (
        "12:00:05 clicks  done  scale_executors 2 -> 4: 4 active executors  in 12.35 s  [1795348805123-0]")
    failed = {"action": "scale_executors 2 -> 4", "status": "failed", "detail": "agent refused"}
    skipped = {"action": "set_parallelism counts/agg 4 -> 8", "status": "skipped", "detail": ""}
    assert action_line(done(failed, skipped, duration_s=2)) == (
        "12:00:05 clicks  failed  scale_executors 2 -> 4 failed: agent refused; set_paralleli…"
        "  in 2 s  [1795348805123-0]")
    crashed = {"event": "action.error", "timestamp": STAMP, "level": "error", "app": "clicks",
               "decision_id": DECISION, "error": "RuntimeError('actuator bug')", "exception": "Traceback ..."}
    assert action_line(crashed) == "12:00:05 clicks  action error  RuntimeError('actuator bug')  [1795348805123-0]"
    resumed = {"event": "migration.resumed", "timestamp": STAMP, "app": "clicks", "decision_id": DECISION,
               "status": "done", "detail": "counts at 8 partitions"}
    assert action_line(resumed) == "12:00:05 clicks  migration resumed done  counts at 8 partitions  [1795348805123-0]"


def test_a_long_action_line_keeps_its_effect_and_id_and_odd_keys_never_raise():
    line = action_line(started(reasons=["scale up: " + "because " * 40]))
    assert line.endswith(f"…  expect capacity 3,601 rec/s  [{DECISION}]") and len(line) <= CYCLE_LINE_WIDTH
    assert action_line({"event": "action.started"}) == "?  acting  ?"
    assert action_line({"event": "action.done", "results": [None, "x"], "duration_s": "long"}) == "?  done"
    assert action_line(started(reasons="why", expected=[1], decision_id=None, timestamp=None)) == (
        "clicks  acting  scale_executors 2 -> 4")


def test_a_warning_is_its_name_and_key_fields_on_one_clipped_line():
    warning = {"event": "cycle.unreachable", "timestamp": STAMP, "level": "warning", "logger": "x",
               "app": "clicks", "error": "Connection refused\nby host", "failures": 3, "retry_in_s": 10.0,
               "detail": None, "action": "none"}
    assert short_line(warning) == ("12:00:05 clicks  warning  cycle.unreachable  error=Connection refused by host"
                                   "  failures=3  retry_in_s=10  action=none")
    start = {"event": "daemon.start", "timestamp": STAMP, "level": "info", "identity": "host-1",
             "apps": ["clicks", "wc"], "interval_s": 10.0, "metrics": None, "figures": {"a": 1}}
    assert short_line(start) == ("12:00:05  daemon.start  identity=host-1  apps=clicks,wc  interval_s=10"
                                 '  figures={"a":1}')
    huge = short_line({**warning, "error": "x" * 500, "queries": list(range(400))})
    assert len(huge) == CYCLE_LINE_WIDTH and huge.endswith("…") and "x" * 59 + "…" in huge
    traced = {"event": "boom 3", "level": "error", "exception": "Traceback (most recent call last):\n"
              "  File \"x.py\", line 1\nRuntimeError: boom\n"}
    assert short_line(traced) == "error  boom 3  exception=RuntimeError: boom"


def test_the_brief_renderer_escapes_what_a_terminal_would_act_on_and_falls_back_on_odd_events():
    seen = []
    renderer = BriefRenderer(lambda logger, name, ev: seen.append(ev) or "fallback")
    assert renderer(None, "error", {"event": "x", "level": "error", "error": "red\x1b[31m"}) == (
        "error  x  error=red\\x1b[31m")
    assert renderer(None, "info", started()).startswith("12:00:05 clicks  acting  ")
    assert renderer(None, "info", event()).startswith("12:00:05 clicks  ds2  acted")

    class Broken(dict):
        def get(self, key, default=None):
            if key == "event":
                return "action.started"
            raise RuntimeError("boom")

    assert renderer(None, "info", Broken()) == "fallback"
    assert renderer(None, "info", "not a mapping") == "fallback"
    assert len(seen) == 2


# -- the configured console handler, on a stream of the daemon's events ----------------------------

UP = Action.scale_executors(2, 4, SCALE_REASON)
HOSTS = {f"worker-{i}.example": {"cores": 8, "cpu_fraction": 0.5, "executors": [str(i)]} for i in range(60)}


def log_the_daemon_s_events() -> list[str]:
    """What a daemon logs over one cycle that acts (real keys; the action events through
    daemon/feeds.py's LogFeed), in order; their names."""
    log = structlog.get_logger("sparkscale.daemon.service")
    feed = LogFeed()
    log.info("daemon.start", identity="host-1", apps=["clicks"], interval_s=10.0, policy="ds2", dry_run=False)
    log.info("zookeeper.state", state="CONNECTED")
    log.info("leader.acquired", app="clicks", identity="host-1", epoch=7)
    log.info("monitor.snapshot", app="clicks", query="counts", app_id="app-1", batches=12, operators=3,
             arrival_rate=2000.0, arrival_estimate="position", backlog=12, backlog_estimate="exact",
             executor_hosts=HOSTS, cpu_fraction=0.5)
    log.info("cycle", **{k: v for k, v in event().items() if k not in ("event", "timestamp", "level", "logger")})
    feed.emit(ActionStarted("clicks", DECISION, UP.summary(), (UP.reason,),
                            Expectation("under_provisioning", "scale_executors", CAPACITY, 1800.4, 3600.7, 12.0)))
    structlog.get_logger("sparkscale.actuators.base").info("actuator.start", app="clicks", action=UP.summary(),
                                                           epoch=7, reason=UP.reason)
    feed.emit(ActionDone("clicks", DECISION, 12.3456, (ActionResult(UP, "done", "4 active executors",
                                                                    confirm_s=11.2),)))
    feed.emit(OutcomeJudged("clicks", DECISION, UP, Expectation("under_provisioning", "scale_executors", CAPACITY,
                                                                1800.4, 3600.7), 99.0, True, False, 3500.0,
                            "capacity 3500 of 3600", None))
    log.info("downtime.measured", app="clicks", kind="scale_up", stall_s=0.4, longest_batch_s=1.2,
             median_batch_before_s=0.8, samples=3)
    log.warning("cycle.unreachable", app="clicks", error="Connection refused", failures=3, retry_in_s=10.0,
                action="none")
    try:
        raise RuntimeError("actuator bug")
    except RuntimeError as bug:
        feed.emit(ActionCrashed("clicks", DECISION, bug))
    log.info("daemon.stop", identity="host-1")
    return ["daemon.start", "zookeeper.state", "leader.acquired", "monitor.snapshot", "cycle", "action.started",
            "actuator.start", "action.done", "outcome", "downtime.measured", "cycle.unreachable", "action.error",
            "daemon.stop"]


def without_clock(text: str) -> list[str]:
    lines = text.splitlines()
    assert all(re.match(r"\d\d:\d\d:\d\d ", line) for line in lines), lines
    return [line[9:] for line in lines]


def test_a_brief_console_shows_cycles_actions_warnings_start_and_stop_and_the_json_file_everything(tmp_path):
    stream = io.StringIO()
    log_file = tmp_path / "daemon.jsonl"
    configure_logging(LoggingConfig(stderr_format="console", file=str(log_file)), stderr=stream)
    assert LoggingConfig().console_events == "brief"
    names = log_the_daemon_s_events()
    assert without_clock(stream.getvalue()) == [
        " daemon.start  identity=host-1  apps=clicks  interval_s=10  policy=ds2  dry_run=False",
        f"clicks  ds2  acted  executors 2 -> 4  {SCALE_REASON}  [{DECISION}]",
        f"clicks  acting  scale_executors 2 -> 4  scale up: 4 cores…  expect capacity 3,601 rec/s  [{DECISION}]",
        f"clicks  done  scale_executors 2 -> 4: 4 active executors  in 12.35 s  [{DECISION}]",
        "clicks  warning  cycle.unreachable  error=Connection refused  failures=3  retry_in_s=10  action=none",
        f"clicks  action error  RuntimeError('actuator bug')  [{DECISION}]",
        " daemon.stop  identity=host-1",
    ]
    logged = [json.loads(line) for line in log_file.read_text().splitlines()]
    assert [e["event"] for e in logged] == names
    by_name = {e["event"]: e for e in logged}
    assert by_name["monitor.snapshot"]["executor_hosts"] == HOSTS
    assert by_name["outcome"]["detail"] == "capacity 3500 of 3600"
    assert by_name["action.started"]["reasons"] == [SCALE_REASON]
    assert by_name["action.started"]["expected"]["after"] == 3600.7
    assert "RuntimeError: actuator bug" in by_name["action.error"]["exception"]


def test_console_events_all_shows_every_event_again():
    stream = io.StringIO()
    configure_logging(LoggingConfig(stderr_format="console", console_events="all"), stderr=stream)
    names = log_the_daemon_s_events()
    text = stream.getvalue()
    for name in names:
        assert name in text, name
    assert "worker-59.example" in text and "capacity 3500 of 3600" in text and "Traceback" in text
