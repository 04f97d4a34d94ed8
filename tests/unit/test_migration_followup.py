"""Migrations that end when they are done: the actuator looks at the query's progress once and leaves
catch-up, recovery and stabilisation pending in the journal; the leading daemon records them when
complete or once `measure_timeout_s` has passed since the migration was done; `migrate --list` and
`explain` show them, measured at read time while still pending (fake ZooKeeper, fake Redis)."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner
from structlog.testing import capture_logs

import sparkscale.redisconn
import sparkscale.zkconn
from sparkscale.actuators.base import ActuationContext
from sparkscale.config import ActionLogConfig, Config
from sparkscale.daemon import followup
from sparkscale.daemon.action_log import ActionLog, DecisionRecord
from sparkscale.model.action_result import ActionResult
from sparkscale.model.journal import Journal
from sparkscale.model.plan import Action, Plan
from sparkscale.monitors.migration_followup import MEASURED, PENDING
from sparkscale.protocol.keys import progress_history_key
from tests.unit.fake_redis import RecordingRedis, fake_redis, seed
from tests.unit.fakezk import FakeZk, hold_lock
from tests.unit.test_migration_metrics import history_entry, published
from tests.unit.test_migration_recovery import JOURNAL, ROOT, make, stored

REQUEST, DONE = 100.3, 112.0
TIMEOUT_S = Config().migration.measure_timeout_s
PREFIX = Config().redis.key_prefix


def history(last_t: int, apps: tuple[str, ...] = ("a",)) -> RecordingRedis:
    """test_migration_metrics' CCR run: the old run until t=100, the new one from t=110 to `last_t`
    (catch-up at 115.5, recovery at 119.5; its output rate is stable for 60 s only by t=190), as
    the progress history of query q of each of `apps`; the client counts its reads (round trips)."""
    processed, entries = 9000, [history_entry(t, "old", 90 if t else 0, 90 * t) for t in range(0, 101)]
    for t in range(110, last_t + 1):
        rows = min(200, 100 * t - processed)
        processed += rows
        entries.append(history_entry(t, "new", rows, processed))
    client = RecordingRedis()
    seed(client.direct, streams={progress_history_key(PREFIX, app, "q"): published(entries) for app in apps})
    return client


def done_journal(follow_up: dict[str, Any] | None = None, id: str = "mig-1", app: str = "a",
                 done: float = DONE) -> Journal:
    j = Journal(id=id, app=app, query="q", strategy="ccr", from_partitions=4, to_partitions=8, requested_at=REQUEST,
                by="t", epoch=3, status="done", next="done",
                phases={"requested": REQUEST, "stopped": 101.0, "restarted": 109.8, "resumed": 109.9, "done": done})
    j.marks.update(input_at_request=10030, input_at_resume=10990, run_id="new", run_id_at_request="old",
                   replayed_records=0, metrics={"rebalance_s": 1.5, "restore_s": None})
    if follow_up is not None:
        j.marks["follow_up"] = follow_up
    return j


def leading_zk(journal: Journal) -> FakeZk:
    zk = FakeZk(session=0x1001)
    hold_lock(zk, ROOT, "a", epoch=3)
    zk.create(JOURNAL, journal.to_json(), makepath=True)
    return zk


# -- the actuator -------------------------------------------------------------------------------------


def test_the_actuator_returns_once_done_with_one_look_and_the_rest_pending(monkeypatch):
    from sparkscale.actuators import parallelism

    runner, _agent, zk, _leading, journal = make("ccr")
    journal.requested_at = REQUEST
    journal.marks.update(input_at_request=10030, run_id_at_request="old")
    runner.start = lambda *args: runner.run(journal)
    monkeypatch.setattr(parallelism, "MigrationRunner", lambda *args: runner)
    client = history(121)  # 12 batches of the new run: its rate never holds for the 60 s window
    ctx = ActuationContext(runner.cfg, runner.app, zk, client, 3, lambda: True, "t")

    def blocking(*args: Any) -> None:
        raise AssertionError("the actuator waited for the follow-up (measure_after)")

    monkeypatch.setattr(parallelism, "measure_after", blocking, raising=False)

    result = parallelism.MigrationActuator().execute(Action.set_parallelism("q", 4, 8, "test"), ctx)

    assert result.status == "done" and client.round_trips == 1  # one look, no polling up to measure_timeout_s
    figures = result.figures
    assert (figures["follow_up"], figures["migration"]) == (PENDING, "mig-1")
    assert figures["restore_s"] == pytest.approx(110.5 - REQUEST)  # known already
    assert figures["catch_up_s"] == pytest.approx(115.5 - REQUEST)
    assert figures["stabilization_s"] is None and "not reached" not in figures.get("not_measured", "")
    assert stored(zk).marks["follow_up"] == {"status": PENDING}  # for the leading daemon to record


def test_an_actuator_whose_one_look_finds_everything_records_it_at_once(monkeypatch):
    from sparkscale.actuators import parallelism

    runner, _agent, zk, _leading, journal = make("ccr")
    journal.requested_at = REQUEST
    journal.marks.update(input_at_request=10030, run_id_at_request="old")
    runner.start = lambda *args: runner.run(journal)
    runner._input_position = lambda: 10990  # arrived until the restart and the resume
    monkeypatch.setattr(parallelism, "MigrationRunner", lambda *args: runner)
    ctx = ActuationContext(runner.cfg, runner.app, zk, history(190), 3, lambda: True, "t")
    result = parallelism.MigrationActuator().execute(Action.set_parallelism("q", 4, 8, "test"), ctx)
    assert result.figures["follow_up"] == MEASURED
    assert result.figures["stabilization_s"] == pytest.approx(126.5 - REQUEST)
    assert stored(zk).marks["follow_up"]["status"] == MEASURED
    assert stored(zk).marks["metrics"]["catch_up_s"] == pytest.approx(115.5 - REQUEST)


# -- the daemon's finisher ----------------------------------------------------------------------------


def test_the_daemon_records_the_follow_up_once_complete():
    journal = done_journal({"status": PENDING})
    zk, client = leading_zk(journal), history(190)
    cfg = Config()
    got = followup.finish(cfg, zk, client, 3, journal, now=DONE + 80)
    assert client.round_trips == 1
    mark = stored(zk).marks["follow_up"]
    assert got is not None and got.marks["follow_up"] == mark
    assert (mark["status"], mark["measured_at"]) == (MEASURED, DONE + 80)
    assert mark["catch_up_s"] == pytest.approx(115.5 - REQUEST)
    assert mark["recovery_s"] == pytest.approx(119.5 - REQUEST)
    assert mark["stabilization_s"] == pytest.approx(126.5 - REQUEST)
    metrics = stored(zk).marks["metrics"]
    assert metrics["rebalance_s"] == 1.5 and metrics["restore_s"] == pytest.approx(110.5 - REQUEST)
    assert metrics["stabilization_s"] == mark["stabilization_s"]
    assert followup.finish(cfg, zk, client, 3, stored(zk), now=DONE + 90) == stored(zk)  # recorded: no more
    assert client.round_trips == 1


def test_the_daemon_waits_for_measure_timeout_s_after_done_then_records_what_was_reached():
    journal = done_journal({"status": PENDING})
    zk, client = leading_zk(journal), history(121)
    cfg = Config()
    version = zk.get(JOURNAL)[1].version
    assert followup.finish(cfg, zk, client, 3, journal, now=DONE + TIMEOUT_S - 1) is journal
    assert zk.get(JOURNAL)[1].version == version and stored(zk).marks["follow_up"] == {"status": PENDING}
    followup.finish(cfg, zk, client, 3, journal, now=DONE + TIMEOUT_S)
    assert client.round_trips == 2  # one read a cycle
    mark = stored(zk).marks["follow_up"]
    assert mark["status"] == MEASURED and mark["catch_up_s"] == pytest.approx(115.5 - REQUEST)
    assert mark["stabilization_s"] is None
    assert f"stabilization_s: not reached within measure_timeout_s ({TIMEOUT_S:g} s)" in mark["not_measured"]


def test_a_deposed_leader_records_nothing():
    journal = done_journal({"status": PENDING})
    zk = leading_zk(journal)
    with capture_logs() as events:
        assert followup.finish(Config(), zk, history(190), 4, journal, now=DONE + 80) is journal  # lock is epoch 3
    assert stored(zk).marks["follow_up"] == {"status": PENDING}
    assert any(e["event"] == "migration.follow_up_not_recorded" for e in events)


# -- what the operator sees ---------------------------------------------------------------------------


class CliZk(FakeZk):
    def start(self, timeout: float = 0) -> None:
        pass

    def stop(self) -> None:
        pass


@pytest.fixture
def cli(tmp_path, monkeypatch):

    zk, client = CliZk(), history(121, apps=("a", "b"))
    monkeypatch.setattr(sparkscale.zkconn, "client", lambda cfg: zk)  # the client API's ZooKeeper
    monkeypatch.setattr(sparkscale.zkconn, "client", lambda cfg: zk)
    monkeypatch.setattr(sparkscale.redisconn, "connect", lambda cfg, decode_responses=True: client)
    path = tmp_path / "c.yaml"
    path.write_text("apps:\n  - {name: a, pipeline: wordcount}\n  - {name: b, pipeline: wordcount}\n")

    def invoke(*args: str):
        from sparkscale.cli import main

        return CliRunner(env={"SPARKSCALE_CONFIG": None}).invoke(main, [*args, "--config", str(path)])

    return zk, client, invoke


def test_migrate_list_shows_recorded_figures_and_measures_pending_ones_now(cli):
    zk, _client, invoke = cli
    measured = {"status": MEASURED, "measured_at": 1e9, "restore_s": 10.2, "catch_up_s": 15.2, "recovery_s": 19.2,
                "stabilization_s": 26.2, "stabilization_basis": "arrivals"}
    zk.create(JOURNAL, done_journal(measured, id="mig-7").to_json(), makepath=True)
    # Done just now (no daemon recorded its figures yet): measured now, provisional until measure_timeout_s.
    zk.create(f"{ROOT}/apps/b/migration", done_journal({"status": PENDING}, id="mig-8", app="b",
                                                       done=time.time()).to_json(), makepath=True)
    out = invoke("migrate", "--list")
    assert out.exit_code == 0, out.output
    assert "mig-7 measured" in out.output and "catch_up_s 15.2, recovery_s 19.2, stabilization_s 26.2" in out.output
    assert "mig-8 provisional, measured now" in out.output and f"catch_up_s {115.5 - REQUEST:g}" in out.output
    listed = {m["id"]: m["follow_up"] for m in json.loads(invoke("migrate", "--list", "--json").output)}
    assert listed["mig-7"] == measured
    assert listed["mig-8"]["status"] == "provisional" and listed["mig-8"]["stabilization_s"] is None
    # Done longer than measure_timeout_s ago and still not recorded: final, the missing figures said so.
    zk.set(f"{ROOT}/apps/b/migration", done_journal({"status": PENDING}, id="mig-8", app="b").to_json())
    out = invoke("migrate", "--list", "--app", "b")
    assert "mig-8 measured now from the progress history (final, not recorded yet)" in out.output
    assert "stabilization_s: not reached within measure_timeout_s" in out.output and "mig-7" not in out.output


def test_explain_shows_the_follow_up_a_logged_migration_left_pending(cli, monkeypatch):
    zk, _client, invoke = cli
    measured = {"status": MEASURED, "measured_at": 1e9, "catch_up_s": 15.2, "recovery_s": 19.2,
                "stabilization_s": 26.2, "stabilization_basis": "arrivals"}
    zk.create(JOURNAL, done_journal(measured).to_json(), makepath=True)
    fake = fake_redis()
    monkeypatch.setattr(sparkscale.redisconn, "connect", lambda cfg, decode_responses=True: fake)
    log = ActionLog(fake, "sparkscale:", ActionLogConfig())
    action = Action.set_parallelism("q", 4, 8, "manual")
    decision = log.append_decision(DecisionRecord("a", 1.7e9, "", "t", 3, "manual", "manual",
                                                  Plan("manual", "a", actions=(action,)), "manual"))
    log.append_results(decision, "a", [ActionResult(action, "done", "q: 4 -> 8", figures={
        "migration": "mig-1", "follow_up": PENDING, "catch_up_s": None})])
    out = invoke("explain", decision)
    assert out.exit_code == 0, out.output
    assert "follow-up (seconds from the request):" in out.output
    assert "mig-1 measured at 2001-09-09T01:46:40Z: catch_up_s 15.2, recovery_s 19.2" in out.output
    assert json.loads(invoke("explain", decision, "--json").output)["follow_ups"]["mig-1"] == measured


def test_the_cli_prints_what_is_known_and_where_the_rest_comes(capsys):
    from sparkscale.cli.migrate import Progress

    with pytest.raises(SystemExit) as ended:
        Progress(False).finish(True, "q: 4 -> 8 partitions (ccr)", {"restore_s": 10.2, "catch_up_s": None,
                                                                     "follow_up": PENDING, "migration": "mig-1"})
    out = capsys.readouterr().out
    assert ended.value.code == 0 and "restore_s          10.2" in out and "catch_up_s" not in out
    assert "come later: `sparkscale migrate --list`" in out


def test_follow_ups_of_a_migration_the_journal_no_longer_holds():
    got = followup.follow_ups(Config(), SimpleNamespace(), done_journal(id="mig-9"), ["mig-1"], 0.0)
    assert got == {"mig-1": "not known: the app's journal holds migration mig-9 now (it keeps the last one)"}
