"""Where the control loop's events go (daemon/feeds.py, through control/sink.py's one sink): the log
keeps the event names and keys operators and the integration tests read, the metrics count what
they counted, outcomes reach the action log, and each cycle publishes the app's status."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families
from structlog.testing import capture_logs

from sparkscale.control.decision import Decision
from sparkscale.control.events import (
    ActionCrashed,
    ActionDone,
    ActionStarted,
    CycleEnded,
    Decided,
    Event,
    LeaderElected,
    ManualActionDone,
    MigrationResumed,
    OutcomeJudged,
)
from sparkscale.control.sink import FanOut
from sparkscale.control.state import Recent
from sparkscale.daemon import status as app_status
from sparkscale.daemon.action_log import OutcomeRecord
from sparkscale.daemon.feeds import LogFeed, MetricsFeed, OutcomeFeed, StatusFeed
from sparkscale.daemon.metrics import DaemonMetrics
from sparkscale.model.action_result import ActionResult
from sparkscale.model.plan import Action, Observation, Plan
from sparkscale.model.snapshot import Snapshot
from sparkscale.policies.capacity import SHORT_FIGURE, SHORT_WARNING
from sparkscale.policies.ineffective import SCALABILITY_FIGURE
from sparkscale.policies.outcomes import CAPACITY, Expectation
from tests.unit.fake_redis import fake_redis

UP = Action.scale_executors(2, 4, "scale up: 4 cores needed")
PLAN = Plan("ds2", "clicks", actions=(UP,), explanation=("DS2 over 3 operators",))
SNAPSHOT = Snapshot.from_dict({
    "version": 1, "app": "clicks", "query": "counts", "taken_at": 1795348805.0, "window_s": 30.0,
    "executors": [{"id": "1", "host": "127.0.0.1", "cores": 1}, {"id": "2", "host": "127.0.0.1", "cores": 1}],
    "operators": [{"id": "src", "parallelism": 2, "source": True, "arrival_rate": 2000.0, "backlog": 12,
                   "instances": [{"records_in": 2000.0, "records_out": 2000.0, "useful_time_s": 1.0,
                                  "executor": "1"}]}],
    "edges": [],
})
QUERY = app_status.query_view(SNAPSHOT, 4)
# The keys of the `cycle` event as the daemon has always logged them (tests/unit/test_cycle_line.py,
# tests/integration/test_daemon.py and the lab's reports read them).
CYCLE_KEYS = {"event", "log_level", "app", "role", "epoch", "snapshot_id", "policy", "diagnosis", "executors",
              "mode", "decision_id", "target_executors", "queries", "actions", "reasons", "explanation",
              "observation", "duration_s", "collect_s", "cpu_s", "collect_parts_s", "decide_parts_s"}


def decision(plan: Plan = PLAN, mode: str = "acted", role: str = "leader") -> Decision:
    return Decision("clicks", role, 7, (SNAPSHOT,), SNAPSHOT, {"counts": 4}, plan, None, mode)  # type: ignore[arg-type]


def decided(plan: Plan = PLAN, mode: str = "acted", role: str = "leader") -> Decided:
    return Decided(decision(plan, mode, role), "1795348805123-0" if role == "leader" else None, 0.712345, 0.5, 0.1)


EXPECTED = Expectation("under_provisioned", "scale_executors", CAPACITY, 10.0, 20.0, 0.0)


def outcome(met: bool) -> OutcomeJudged:
    return OutcomeJudged("clicks", "1-0", UP, EXPECTED, 123.0, met, False, 19.0 if met else 11.0, "capacity 19 of 20",
                         None if met else 723.0)


def logged(*events: Event) -> list[dict[str, Any]]:
    with capture_logs() as captured:
        for event in events:
            LogFeed().emit(event)
    return captured


# -- the log ----------------------------------------------------------------------------------------


def test_a_decision_is_the_cycle_line_with_every_figure():
    [line] = logged(decided())
    assert set(line) == CYCLE_KEYS
    assert (line["event"], line["app"], line["role"], line["epoch"], line["mode"], line["decision_id"]) == \
        ("cycle", "clicks", "leader", 7, "acted", "1795348805123-0")
    assert (line["snapshot_id"], line["executors"]) == ("clicks/counts@1795348805000", 2)
    assert line["target_executors"] == 4 and line["actions"] == ["scale_executors 2 -> 4"]
    assert line["reasons"] == ["scale up: 4 cores needed"] and line["explanation"] == ["DS2 over 3 operators"]
    assert line["queries"] == [QUERY.to_dict()] and line["policy"] == "ds2"
    assert (line["duration_s"], line["collect_s"], line["cpu_s"]) == (0.7123, 0.5, 0.1)
    assert line["collect_parts_s"] == {}  # none measured
    parts = {"shape": 0.001, "leadership": 0.0, "driver": 0.3, "redis": 0.002, "stages": 0.15, "cluster": 0.0}
    timed = logged(Decided(decision(), "1-0", 0.7, 0.5, 0.1, collect_parts_s=parts))[0]
    assert timed["collect_parts_s"] == parts
    standby = logged(decided(Plan("ds2", "clicks"), mode="no_change", role="standby"))[0]
    assert (standby["target_executors"], standby["actions"], standby["decision_id"]) == (None, [], None)


def test_a_plan_cut_short_by_the_cluster_warns_before_its_cycle_line():
    short = Plan("ds2", "clicks", actions=(UP, Action.warn(f"{SHORT_WARNING} clicks needs 6 executors, gets 4")),
                 observation=Observation(figures={SHORT_FIGURE: 2}))
    warning, line = logged(decided(short))
    assert (warning["event"], warning["short_executors"], line["event"]) == ("cluster.short", 2, "cycle")
    assert warning["warning"].startswith(SHORT_WARNING)


def test_a_cycle_that_did_not_decide_says_why():
    absent, no_queries = logged(
        CycleEnded("clicks", "absent", 9.0, 0.1, "standby", None, "app 'clicks' is not running"),
        CycleEnded("clicks", "no_queries", 9.0, 0.1, "leader", 7, "no query yet"))
    assert absent == {"event": "cycle.app_absent", "log_level": "warning", "app": "clicks", "role": "standby",
                      "reason": "app 'clicks' is not running", "action": "none"}
    assert (no_queries["event"], no_queries["reason"]) == ("cycle.no_queries", "no query yet")
    [unreachable] = logged(CycleEnded("clicks", "unreachable", 9.0, 0.1, "leader", error=OSError("refused"),
                                      failures=2, retry_in_s=15.0))
    assert unreachable == {"event": "cycle.unreachable", "log_level": "warning", "app": "clicks", "error": "refused",
                           "failures": 2, "retry_in_s": 15.0, "action": "none"}
    bug = ZeroDivisionError("division by zero")
    error, then = logged(CycleEnded("clicks", "error", 9.0, 0.1, error=bug, failures=1, retry_in_s=5.0))
    assert (error["event"], error["log_level"], error["exc_info"], error["error"]) == \
        ("cycle.error", "error", bug, repr(bug))
    assert (then["event"], then["retry_in_s"]) == ("cycle.unreachable", 5.0)
    assert logged(CycleEnded("clicks", "ok", 9.0, 0.1, "leader", 7, decision=decision())) == []


def test_actions_outcomes_and_takeovers_keep_their_events():
    result = ActionResult(UP, "done", "4 executors", confirm_s=11.2, executors_after=4)
    bug = RuntimeError("actuator bug")
    started, done, crashed, resumed, judged, elected = logged(
        ActionStarted("clicks", "1-0", "scale_executors 2 -> 4", (UP.reason,), EXPECTED),
        ActionDone("clicks", "1-0", 12.34567, (result,)),
        ActionCrashed("clicks", "1-0", bug),
        MigrationResumed("clicks", "2-0", result),
        outcome(False),
        LeaderElected("clicks", "alpha", 7, 3, 1, 99.0))
    assert started == {"event": "action.started", "log_level": "info", "app": "clicks", "decision_id": "1-0",
                       "actions": "scale_executors 2 -> 4", "reasons": [UP.reason], "expected": EXPECTED.to_dict()}
    assert logged(ActionStarted("clicks", "1-0", "replace_executor 3"))[0]["expected"] is None
    assert done["event"] == "action.done" and done["duration_s"] == 12.346
    assert done["results"] == [{"action": "scale_executors 2 -> 4", "status": "done", "detail": "4 executors",
                                "confirm_s": 11.2}]
    assert (crashed["event"], crashed["log_level"], crashed["exc_info"]) == ("action.error", "error", bug)
    assert (resumed["event"], resumed["status"], resumed["detail"]) == ("migration.resumed", "done", "4 executors")
    assert judged == {"event": "outcome", "log_level": "info", "app": "clicks", "decision_id": "1-0",
                      "action": "scale_executors 2 -> 4", "met": False, "ineffective": False,
                      "detail": "capacity 19 of 20", "blocked_until": 723.0}
    assert (elected["event"], elected["identity"], elected["epoch"], elected["decisions_loaded"],
            elected["pending_outcomes"], elected["last_action_at"]) == ("leader.elected", "alpha", 7, 3, 1, 99.0)
    assert logged(ManualActionDone("clicks", result)) == []  # the actuators log a manual request's action


# -- the metrics ------------------------------------------------------------------------------------


def samples(metrics: DaemonMetrics) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(metrics.render().decode()) for s in family.samples}


def value(metrics: DaemonMetrics, name: str, **labels: str) -> float | None:
    return samples(metrics).get((name, frozenset(labels.items())))


def test_the_metrics_count_decisions_actions_and_outcomes():
    metrics = DaemonMetrics()
    feed = MetricsFeed(metrics)
    for event in (decided(), decided(mode="dry_run"), decided(mode="dry_run", role="standby"),
                  decided(Plan("ds2", "clicks"), mode="no_change"),
                  ActionDone("clicks", "1-0", 1.0, (ActionResult(UP, "done", ""), ActionResult(UP, "failed", ""))),
                  ManualActionDone("clicks", ActionResult(UP, "done", "")), outcome(True), outcome(False)):
        feed.emit(event)
    assert value(metrics, "sparkscale_decisions_total", app="clicks", policy="ds2", changes="true") == 3
    assert value(metrics, "sparkscale_decisions_total", app="clicks", policy="ds2", changes="false") == 1
    # What a dry run would have done counts once, on the leader.
    assert value(metrics, "sparkscale_actions_total", app="clicks", type="scale_executors", outcome="dry_run") == 1
    assert value(metrics, "sparkscale_actions_total", app="clicks", type="scale_executors", outcome="done") == 2
    assert value(metrics, "sparkscale_actions_total", app="clicks", type="scale_executors", outcome="failed") == 1
    assert value(metrics, "sparkscale_actions_total", app="clicks", type="scale_executors", outcome="met") == 1
    assert value(metrics, "sparkscale_actions_total", app="clicks", type="scale_executors", outcome="not_met") == 1
    assert value(metrics, "sparkscale_cluster_short_executors", app="clicks") == 0
    # No judged scale-up read yet: no observed scalability; then the one a decision carries.
    assert value(metrics, "sparkscale_observed_scalability", app="clicks") is None
    feed.emit(decided(Plan("ds2", "clicks", observation=Observation(figures={SCALABILITY_FIGURE: 0.25}))))
    assert value(metrics, "sparkscale_observed_scalability", app="clicks") == 0.25
    metrics.close()


def test_a_cycles_summary_sets_the_gauges_it_saw_and_leaves_the_others():
    metrics = DaemonMetrics()
    feed = MetricsFeed(metrics)
    feed.emit(CycleEnded("clicks", "ok", 9.0, 0.2, "leader", 7, executors=3, parallelism={"counts/agg": 4}, blocked=1,
                         needing_attention=0))
    feed.emit(CycleEnded("clicks", "unreachable", 9.0, 0.1, error=OSError("refused"), failures=1, retry_in_s=5.0))
    assert value(metrics, "sparkscale_leader", app="clicks") == 1
    assert value(metrics, "sparkscale_executors", app="clicks") == 3
    assert value(metrics, "sparkscale_parallelism", app="clicks", operator="counts/agg") == 4
    assert value(metrics, "sparkscale_blocked_actions", app="clicks") == 1
    assert value(metrics, "sparkscale_migrations_needing_attention", app="clicks") == 0
    assert value(metrics, "sparkscale_cycles_total", app="clicks", result="ok") == 1
    assert value(metrics, "sparkscale_cycles_total", app="clicks", result="unreachable") == 1
    assert value(metrics, "sparkscale_cycle_duration_seconds_count", app="clicks") == 2
    feed.emit(CycleEnded("clicks", "no_queries", 9.0, 0.1, "standby", needing_attention=1))
    assert value(metrics, "sparkscale_leader", app="clicks") == 0
    assert value(metrics, "sparkscale_migrations_needing_attention", app="clicks") == 1
    assert value(metrics, "sparkscale_executors", app="clicks") == 3
    metrics.close()


# -- the action log, and the one sink ---------------------------------------------------------------


@dataclass
class Outcomes:
    records: list[OutcomeRecord] = field(default_factory=list)
    refuse: bool = False

    def append_outcome(self, record: OutcomeRecord) -> str:
        if self.refuse:
            raise ConnectionError("Redis is down")
        self.records.append(record)
        return f"{len(self.records)}-0"


def test_an_outcome_reaches_the_action_log_before_the_metrics_and_the_log():
    log, metrics = Outcomes(), DaemonMetrics()
    sink = FanOut((OutcomeFeed(log), MetricsFeed(metrics), LogFeed()))
    with capture_logs() as captured:
        sink.emit(outcome(False))
        sink.emit(decided())  # not the feed's: decisions are written before acting (control/stores.py)
    assert log.records == [OutcomeRecord("1-0", "clicks", 123.0, False, CAPACITY, 10.0, 20.0, 11.0,
                                         "capacity 19 of 20", 723.0)]
    assert [c["event"] for c in captured] == ["outcome", "cycle"]
    # Refused: neither counted nor logged, and the caller's cycle fails as it did writing it itself.
    log.refuse = True
    with capture_logs() as captured, pytest.raises(ConnectionError):
        sink.emit(outcome(True))
    assert captured == []
    assert value(metrics, "sparkscale_actions_total", app="clicks", type="scale_executors", outcome="met") is None
    metrics.close()


# -- the status ------------------------------------------------------------------------------------


def test_a_cycle_that_reached_the_app_publishes_what_this_daemon_saw_of_it():
    client = fake_redis()
    feed = StatusFeed(client, "p:", "alpha")
    recent = Recent("acted: scale_executors 2 -> 4", 1795348805.0, "scale_executors 2 -> 4", 1795348790.0)
    feed.emit(CycleEnded("clicks", "ok", 1795348806.0, 0.7, "leader", 7, executors=2, parallelism={"src": 2},
                         decision=decision(), warnings=("placement edrp: short",), recent=recent))
    [view] = app_status.read(client, "p:", "clicks")
    assert view == app_status.AppStatus(
        daemon="alpha", role="leader", epoch=7, cycle_at=1795348806.0, result="ok", executors=2,
        parallelism={"src": 2}, last_decision=recent.decision, last_decision_at=recent.decision_at,
        last_action=recent.action, last_action_at=recent.action_at, queries=(QUERY,),
        warnings=("placement edrp: short",))
    feed.emit(CycleEnded("clicks", "absent", 1795348810.0, 0.1, "standby", detail="not running"))
    [view] = app_status.read(client, "p:", "clicks")
    assert (view.result, view.role, view.epoch, view.detail, view.executors, view.queries) == \
        ("absent", "standby", None, "not running", None, ())
    # A cycle that did not reach the app leaves the last view; Redis refusing it is only logged.
    feed.emit(CycleEnded("clicks", "unreachable", 1795348820.0, 0.1, error=OSError("refused")))
    assert app_status.read(client, "p:", "clicks")[0].cycle_at == 1795348810.0

    def refused(*_args: object, **_kwargs: object) -> None:
        raise redis.ConnectionError("Redis is down")

    client.hset = refused  # type: ignore[method-assign]
    with capture_logs() as captured:
        feed.emit(CycleEnded("clicks", "ok", 1795348830.0, 0.1, "leader", 7))
    assert [(c["event"], c["error"]) for c in captured] == [("status.publish_failed", "Redis is down")]
