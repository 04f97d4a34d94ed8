"""Every persisted or sent record survives its own JSON: a random valid instance, written as JSON
text and read back, is the same record (so no field is left unwritten or read differently, as
`DecisionHistory.cores_claimed_elsewhere` once was). And `sparkscale plan --history` replays a
decision the cluster-capacity guard shaped."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given, settings

from sparkscale.cli import main
from sparkscale.daemon.action_log import BLOCKLIST_ENTRY_JSON, LOGGED_JSON, DecisionRecord, OutcomeRecord
from sparkscale.daemon.manual import ManualRequest, ManualResult
from sparkscale.daemon.status import AppStatus
from sparkscale.model.journal import Journal, JournalError
from sparkscale.model.plan import Action, Observation, Plan
from sparkscale.model.snapshot import Snapshot
from sparkscale.policies.history import DecisionHistory, HistoryError
from sparkscale.protocol.commands import Ack, Command
from sparkscale.protocol.queries import QueryInfo, SourceReport
from tests.unit import model_strategies as gen

ROUND_TRIP = settings(max_examples=60, deadline=None, database=None, derandomize=True)
FIXTURE = Path(__file__).parent / "fixtures" / "design_snapshot.json"


def through_text(data: Any) -> Any:
    """What a reader gets of what a writer wrote: the data as JSON text, parsed."""
    return json.loads(json.dumps(data))


@ROUND_TRIP
@given(gen.snapshots())
def test_a_snapshot_round_trips(snapshot: Snapshot) -> None:
    assert Snapshot.from_json(snapshot.to_json()) == snapshot
    assert Snapshot.from_dict(through_text(snapshot.to_dict())) == snapshot


@ROUND_TRIP
@given(gen.plans, gen.actions())
def test_a_plan_and_its_actions_round_trip(plan: Plan, action: Action) -> None:
    assert Plan.from_dict(through_text(plan.to_dict()), plan.observation) == plan
    assert Action.from_dict(through_text(action.to_dict())) == action
    assert Observation.from_dict(through_text(plan.observation.to_dict())) == plan.observation


@ROUND_TRIP
@given(gen.histories())
def test_a_decision_history_round_trips_with_every_field(history: DecisionHistory) -> None:
    back = DecisionHistory.from_dict(through_text(history.to_dict()))
    assert back == history
    assert back.cores_claimed_elsewhere == history.cores_claimed_elsewhere
    assert [d.observation for d in back] == [d.observation for d in history]  # beside each plan, not in it


@ROUND_TRIP
@given(gen.journals)
def test_a_journal_round_trips_with_its_marks(journal: Journal) -> None:
    back = Journal.from_json(journal.to_json())
    assert back == journal
    assert back.marks == journal.marks


@ROUND_TRIP
@given(gen.commands, gen.acks)
def test_commands_and_acks_round_trip(command: Command, ack: Ack) -> None:
    assert Command.from_znode("cmd-0000000007", command.to_json()) == replace(command, name="cmd-0000000007")
    assert Ack.from_json(ack.to_json()) == ack


@ROUND_TRIP
@given(gen.query_infos, gen.source_reports)
def test_query_and_source_reports_round_trip(info: QueryInfo, report: SourceReport) -> None:
    assert QueryInfo.from_json(info.to_json()) == info
    assert SourceReport.from_dict(through_text(report.to_dict())) == report


@ROUND_TRIP
@given(gen.decision_records, gen.outcomes, gen.logged)
def test_action_log_records_round_trip(record: DecisionRecord, outcome: OutcomeRecord, logged: Any) -> None:
    back = DecisionRecord.from_dict(through_text(record.to_dict()))
    assert back == record and back.plan.observation == record.plan.observation
    assert OutcomeRecord.from_dict(through_text(outcome.to_dict())) == outcome
    assert LOGGED_JSON.loads(json.dumps(logged.to_dict())) == logged
    assert next(iter(logged.to_dict())) == "id"


@ROUND_TRIP
@given(gen.blocklist_entries, gen.blocked)
def test_blocklist_entries_round_trip(entry: Any, blocked: Any) -> None:
    assert BLOCKLIST_ENTRY_JSON.loads(json.dumps(entry.to_dict())) == entry
    history = DecisionHistory(blocklist=replace(DecisionHistory().blocklist, entries=(blocked,)))
    assert DecisionHistory.from_dict(through_text(history.to_dict())).blocklist == history.blocklist


@ROUND_TRIP
@given(gen.statuses, gen.requests(), gen.manual_results)
def test_status_and_manual_requests_round_trip(status: AppStatus, request: ManualRequest,
                                               result: ManualResult) -> None:
    assert AppStatus.from_dict(through_text(status.to_dict())) == status
    assert ManualRequest.from_znode("req-1", request.to_json()) == replace(request, name="req-1")
    assert ManualResult.from_json(result.to_json()) == result


# -- errors name the record and the field --------------------------------------------------------------


@pytest.mark.parametrize(("read", "data", "message"), [
    (DecisionHistory.from_dict, {"cores_claimed_elsewhere": -1},
     "cores_claimed_elsewhere: expected an integer >= 0"),
    (DecisionHistory.from_dict, {"decisions": [{"decided_at": 1.0, "plan": {"policy": "p", "app": "a",
                                                             "actions": [{"type": "warn"}]}}]},
     "decisions[0].plan.actions[0]: a warn action needs reason"),
    (lambda d: Journal.from_json(json.dumps(d).encode()), {"id": "m", "app": "a", "query": "q", "strategy": "dcr",
                                                           "from_partitions": 1, "to_partitions": 2,
                                                           "requested_at": 1.0, "by": "me", "epoch": 1,
                                                           "marks": {"recovery": {"goal": "sideways"}}},
     "marks.recovery.goal: expected 'recover' or 'abort'"),
    (lambda d: Journal.from_json(json.dumps(d).encode()), [], "journal: expected an object"),
])
def test_parse_errors_name_the_field(read: Any, data: Any, message: str) -> None:
    with pytest.raises((HistoryError, JournalError)) as err:
        read(data)
    assert str(err.value).startswith(message), str(err.value)


# -- replaying a decision the capacity guard shaped ------------------------------------------------------


def plan_actions(tmp_path: Path, history: dict[str, Any]) -> list[dict[str, Any]]:
    """`sparkscale plan --json` of a snapshot whose cluster has room for 2 more executors of the
    app's shape (one worker, 2 free cores), DS2 asking for 3 (min_executors) where 1 runs."""
    snapshot = json.loads(FIXTURE.read_text())
    snapshot["extensions"] = {"cluster": {"app_id": "app-1", "unreachable": [], "executor_memory_mb": 1024, "workers": [
        {"id": "w0", "host": "h0", "cores_free": 2, "memory_free_mb": 8192, "executors": []}]}}
    (tmp_path / "s.json").write_text(json.dumps(snapshot))
    (tmp_path / "c.yaml").write_text("apps:\n  - {name: wordcount, min_executors: 3, initial_executors: 3}\n")
    (tmp_path / "h.json").write_text(json.dumps(history))
    result = CliRunner(env={"SPARKSCALE_CONFIG": None}).invoke(main, [
        "plan", str(tmp_path / "s.json"), "--config", str(tmp_path / "c.yaml"), "--history", str(tmp_path / "h.json"),
        "--json"])
    assert result.exit_code == 0, result.output
    actions: list[dict[str, Any]] = json.loads(result.output)["actions"]
    return actions


def test_plan_history_replays_the_cores_other_apps_claimed(tmp_path: Path) -> None:
    claimed = replace(DecisionHistory(), cores_claimed_elsewhere=1).to_dict()
    assert claimed["cores_claimed_elsewhere"] == 1
    capped = plan_actions(tmp_path, claimed)
    assert [(a["type"], a.get("from"), a.get("to")) for a in capped] == [("scale_executors", 1, 2),
                                                                          ("warn", None, None)]
    assert capped[1]["reason"].startswith("cluster short of resources: wordcount needs 3 executors, gets 2")
    assert "1 asked for by other apps" in capped[1]["reason"]
    # The same history without the claim (as written before it was kept): the scale-up fits, uncut.
    uncapped = plan_actions(tmp_path, {k: v for k, v in claimed.items() if k != "cores_claimed_elsewhere"})
    assert [(a["type"], a["from"], a["to"]) for a in uncapped] == [("scale_executors", 1, 3)]

