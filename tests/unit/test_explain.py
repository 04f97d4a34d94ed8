"""`sparkscale explain DECISION_ID`: the rendering of one logged decision, and the command over an
action log in fakeredis (the streams ActionLog writes and reads)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import sparkscale.redisconn
from sparkscale.cli import main
from sparkscale.config import ActionLogConfig
from sparkscale.daemon.action_log import ActionLog, DecisionRecord, LoggedDecision, OutcomeRecord
from sparkscale.daemon.explain import explain_dict, explain_text, parse_decision_id, query_figures
from sparkscale.model.action_result import ActionResult
from sparkscale.model.plan import Action, ExpectedOutcome, Observation, Plan
from sparkscale.model.snapshot import Snapshot
from sparkscale.model.snapshot_merge import merge_snapshots
from sparkscale.policies.outcomes import Expectation
from tests.unit.fake_redis import fake_redis

T = 1_795_348_805.0  # 2026-11-22T12:00:05Z
SCALE = Action.scale_executors(2, 4, "scale up: 4 cores needed at utilisation 0.7, 4 executor(s) of 1 core(s)")
EXPLANATION = (
    "DS2 over 3 operators in topological order; target utilisation 0.7, catch-up 60 s",
    "[0] source (source): true processing rate 2000 rec/s ...",
    "guard step cap: scale_executors 2 -> 6 capped at 4 (at most x2 per step)",
)


def query_snapshot(query: str, arrival: float, backlog: float | None, partitions: int = 4) -> Snapshot:
    return Snapshot.from_dict({
        "version": 1, "app": "clicks", "query": query, "taken_at": T, "window_s": 30.0,
        "trigger_interval_s": 1.0, "batch_duration_s": 0.8,
        "executors": [{"id": "1", "host": "h", "cores": 1}, {"id": "2", "host": "h", "cores": 1}],
        "operators": [
            {"id": "source", "source": True, "parallelism": 1, "arrival_rate": arrival,
             **({"backlog": backlog} if backlog is not None else {"backlog_known": False}),
             "instances": [{"records_in": 100, "records_out": 100, "useful_time_s": 1}]},
            {"id": "agg", "parallelism": partitions,
             "instances": [{"records_in": 100, "records_out": 10, "useful_time_s": 1, "executor": "1"}]},
        ],
        "edges": [["source", "agg"]],
    })


def app_snapshot() -> Snapshot:
    return merge_snapshots([query_snapshot("windows", 2000.0, 12.0), query_snapshot("updates", 500.5, None, 8)])


def record(mode: str = "acted", actions: tuple[Action, ...] = (SCALE,), expected: bool = True,
           at: float = T) -> DecisionRecord:
    observation = Observation(
        query="windows+updates", figures={"cores_needed": 4, "batch_ratio": 0.8, "backlog": 12.0},
        diagnosis="under_provisioned",
        expected=ExpectedOutcome("under_provisioned", "scale_executors", "processed_rate", 1500.0, 3000.0),
        recommended_executors=4)
    plan = Plan("ds2", "clicks", {"windows/source": 1, "windows/agg": 4}, actions, EXPLANATION, observation)
    return DecisionRecord(
        "clicks", at, f"clicks/windows+updates@{int(at * 1000)}", "head-1:4242", 7, "ds2", "under_provisioned", plan,
        mode,  # type: ignore[arg-type]
        Expectation("under_provisioned", "scale_executors", "processed_rate", 1500.0, 3000.0, 12.0)
        if expected else None)


def judged() -> LoggedDecision:
    result = ActionResult(SCALE, "done", "4 executors registered", "cmd-0000000012", 0.4, 11.2, 4)
    outcome = OutcomeRecord("1795348805123-0", "clicks", T + 90, False, "processed_rate", 1500.0, 3000.0, 1600.0,
                            "processed rate rose by 100 of the 1500 expected", T + 1890)
    return LoggedDecision("1795348805123-0", record(), (result,), outcome, T + 12)


def test_explain_shows_decision_actions_explanation_figures_expectation_outcome_results_and_snapshot():
    text = explain_text(judged(), app_snapshot())
    for expected in (
        "decision 1795348805123-0",
        "app         clicks", "decided at  2026-11-22T12:00:05Z", "policy      ds2",
        "diagnosis   under_provisioned", "mode        acted", "leader      head-1:4242 (epoch 7)",
        "  scale_executors 2 -> 4\n    why: scale up: 4 cores needed at utilisation 0.7, 4 executor(s) of 1 core(s)",
        "target parallelism: windows/source=1, windows/agg=4",
        *(f"  {line}" for line in EXPLANATION),  # every line, guards' included
        "recommended executors  4", "cores_needed  4", "batch_ratio   0.8",
        "policy's expectation: scale_executors for under_provisioned: processed_rate 1500 -> 3000",
        "expected outcome: processed_rate 1500 -> 3000",
        "for scale_executors on diagnosis under_provisioned, backlog before 12",
        "outcome: NOT met (judged at 2026-11-22T12:01:35Z)", "observed  1600",
        "detail    processed rate rose by 100 of the 1500 expected",
        "blocked until 2026-11-22T12:31:35Z",
        "results (logged at 2026-11-22T12:00:17Z):", "  scale_executors 2 -> 4: done",
        "command             cmd-0000000012", "acknowledged after  0.4 s", "confirmed after     11.2 s",
        "executors after     4", "detail              4 executors registered",
        "taken at          2026-11-22T12:00:05Z", "executors         2 (2 cores)", "last batch        0.8 s",
    ):
        assert expected in text, expected
    rows = {line.split()[0]: line.split() for line in text.splitlines()[-2:]}
    assert rows["windows"][1:4] == ["2000", "12", "2"] and "agg=4" in rows["windows"][-1]
    assert rows["updates"][1:4] == ["500.5", "unknown", "2"] and "agg=8" in rows["updates"][-1]  # backlog unknown


def test_explain_of_a_decision_that_changed_nothing_or_is_not_done_yet():
    quiet = explain_text(LoggedDecision("1-0", record("no_change", actions=(), expected=False)))
    assert "none (nothing should change)" in quiet
    assert "expected outcome: none" in quiet and "results: nothing executed (no_change)" in quiet
    assert "snapshot: not kept" in quiet
    running = explain_text(LoggedDecision("2-0", record()))
    assert "outcome: not judged (no action was done)" in running
    assert "results: none logged (in progress, or the daemon stopped while acting)" in running
    done = LoggedDecision("3-0", record(), (ActionResult(SCALE, "done", "ok"),), None, T + 5)
    assert "outcome: not judged yet" in explain_text(done)
    assert "snapshot: kept, but unreadable: x" in explain_text(done, "kept, but unreadable: x")


def test_json_is_the_whole_record_with_the_snapshot():
    data = json.loads(json.dumps(explain_dict(judged(), app_snapshot())))
    assert data["id"] == "1795348805123-0" and data["plan"]["explanation"] == list(EXPLANATION)
    assert data["observation"]["recommended_executors"] == 4 and data["outcome"]["observed"] == 1600.0
    assert data["results"][0]["confirm_s"] == 11.2 and data["snapshot"]["query"] == "windows+updates"


def test_query_figures_of_a_single_query_snapshot():
    figures = query_figures(query_snapshot("counts", 100.0, 3.0))
    assert figures == {"counts": {"arrival_rate": 100.0, "backlog": 3.0, "operators": 2,
                                  "parallelism": "source=1, agg=4"}}


@pytest.mark.parametrize("text", ["1795348805123-0", " [1795348805123-0] "])
def test_decision_ids_as_logged_are_accepted(text):
    assert parse_decision_id(text) == "1795348805123-0"


def test_anything_else_is_not_a_decision_id():
    with pytest.raises(ValueError, match="not a decision id"):
        parse_decision_id("d-000123")


@pytest.fixture
def logged(monkeypatch):
    """An action log holding two decisions of `clicks`: the judged one (with results, outcome and its
    snapshot) and a later no_change, plus another app's decision between them. Their ids, and the
    results entry's."""
    fake = fake_redis()
    monkeypatch.setattr(sparkscale.redisconn, "connect", lambda cfg, decode_responses=True: fake)
    log = ActionLog(fake, "sparkscale:", ActionLogConfig())
    decision_id = log.append_decision(record(), app_snapshot())
    log.append_decision(DecisionRecord("other", T, "", "head-1:4242", 3, "ds2", None,
                                       Plan("ds2", "other"), "no_change"))
    results_id = log.append_results(decision_id, "clicks", [ActionResult(SCALE, "done", "4 executors registered",
                                                                         "cmd-12", 0.4, 11.2, 4)])
    log.append_outcome(OutcomeRecord(decision_id, "clicks", T + 90, True, "processed_rate", 1500.0, 3000.0,
                                     2900.0, "processed rate rose as expected"))
    quiet_id = log.append_decision(record("no_change", actions=(), expected=False, at=T + 5))
    return decision_id, quiet_id, results_id


def explain(*args: str):
    return CliRunner(env={"SPARKSCALE_CONFIG": None}).invoke(main, ["explain", *args])


def test_the_command_explains_a_logged_decision_with_its_results_outcome_and_snapshot(logged):
    decision_id, quiet_id, _results_id = logged
    done = explain(decision_id)
    assert done.exit_code == 0, done.output
    assert f"decision {decision_id}" in done.output and "outcome: met" in done.output
    assert "confirmed after     11.2 s" in done.output and "windows" in done.output and "updates" in done.output
    quiet = explain(f"[{quiet_id}]")
    assert quiet.exit_code == 0 and "mode        no_change" in quiet.output and "snapshot: not kept" in quiet.output
    as_json = explain(decision_id, "--json")
    data = json.loads(as_json.output)
    assert data["id"] == decision_id and data["outcome"]["met"] is True and data["snapshot"]["app"] == "clicks"
    assert data["results"][0]["command"] == "cmd-12"


def test_an_unknown_or_malformed_id_is_a_clear_error_with_exit_2(logged):
    unknown = explain("1700000000000-0")
    assert unknown.exit_code == 2
    assert "no decision 1700000000000-0 in the action log" in unknown.output
    assert "Traceback" not in unknown.output
    _decision_id, _quiet_id, results_id = logged
    results_entry = explain(results_id)  # an entry of the log, but a result, not a decision
    assert results_entry.exit_code == 2 and "no decision" in results_entry.output
    malformed = explain("d-000123")
    assert malformed.exit_code == 2 and "not a decision id" in malformed.output
