"""A migration that fails half-way never strands its app (recovery.py): the runner's real steps and
recovery against a fake agent (its checkpoint's partitions, whether the query runs, the pause) and
the fake ZooKeeper (fenced journal writes); the operator's --resume / --abort, --list and the
leader's request serving."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner
from structlog.testing import capture_logs

import sparkscale.zkconn
from sparkscale.actuators.migration import (
    JournalFenced,
    MigrationError,
    MigrationRunner,
    UnknownMigration,
)
from sparkscale.config import Config
from sparkscale.model.journal import Journal
from sparkscale.protocol.commands import AckTimeout
from sparkscale_lab.bench.migration_faults import FAULT_FAIL_ENV, install
from tests.unit.fakezk import FakeZk, hold_lock

ROOT = Config().zookeeper.root
JOURNAL = f"{ROOT}/apps/a/migration"


class FakeAgent:
    """The in-driver agent's answers to a migration's commands for one query `q`, as `_command`
    returns them (a refusal: MigrationError). `fail(kind, partitions)` refuses that command (with
    those partitions, or any) `times` times (-1: always); `then` runs before the refusal."""

    def __init__(self, leading: list[bool], partitions: int = 4):
        self.leading = leading
        self.checkpoint = partitions
        self.running = True
        self.paused = False
        self.sent: list[tuple[str, Any]] = []
        self.failing: dict[tuple[str, int | None], list[Any]] = {}

    def fail(self, kind: str, partitions: int | None = None, times: int = -1, error: Exception | None = None,
             then: Any = None) -> None:
        self.failing[(kind, partitions)] = [times, error, then]

    def __call__(self, kind: str, args: dict[str, Any], timeout_s: float | None = None) -> Any:
        if not self.leading[0]:
            raise MigrationError(f"{kind} not sent: no longer the leader")
        self.sent.append((kind, args.get("partitions")))
        for key in ((kind, args.get("partitions")), (kind, None)):
            rule = self.failing.get(key)
            if rule is not None and rule[0] != 0:
                rule[0] -= 1
                if rule[2] is not None:
                    rule[2]()
                raise rule[1] or MigrationError(f"{kind} refused: injected")
        if kind == "pause_sources":
            self.paused = True
        elif kind == "resume_sources":
            self.paused = False
        elif kind in ("stop_query", "abort_query"):
            was, self.running = self.running, False
            self.paused = self.paused or kind == "stop_query"  # a pausable query is paused before its stop
            return {"query": "q", "stopped": was}
        elif kind == "repartition":
            if self.running:
                raise MigrationError("repartition refused: query 'q' is active")
            if self.checkpoint == args["partitions"]:
                return {"query": "q", "repartitioned": False, "already": self.checkpoint}
            self.checkpoint = args["partitions"]
            return {"query": "q", "repartitioned": True, "partitions": self.checkpoint}
        elif kind == "start_query":
            if self.running:
                return {"query": "q", "started": False, "already_running": True}
            self.running = True
            return {"query": "q", "started": True, "run_id": "new", "partitions": self.checkpoint}
        elif kind == "report":
            return {"queries": [{"name": "q", "status": {}}] if self.running else []}
        return {}


def make(strategy: str = "ccr") -> tuple[MigrationRunner, FakeAgent, FakeZk, list[bool], Journal]:
    """A runner leading app `a` at epoch 3 over the fake agent; a journal of 4 -> 8 just requested."""
    zk = FakeZk(session=0x1001)
    hold_lock(zk, ROOT, "a", epoch=3)
    leading = [True]
    cfg = Config.model_validate({"migration": {"phase_timeout_s": 0.05}})
    runner = MigrationRunner(cfg, SimpleNamespace(name="a"), zk, redis_client=None, epoch=3,
                             is_leader=lambda: leading[0])
    agent = FakeAgent(leading)
    runner._command = agent
    runner._input_position = lambda: None
    runner.pausable = lambda query: False  # no source status to read in Redis
    runner.current_partitions = lambda query: agent.checkpoint  # the agent records the count it repartitioned to
    for step in ("_capture", "_restored", "_await_first_output"):  # what reads Redis, or waits for batches
        setattr(runner, step, lambda journal: None)
    journal = Journal(id="mig-1", app="a", query="q", strategy=strategy, from_partitions=4, to_partitions=8,
                      requested_at=100.0, by="t", epoch=3, phases={"requested": 100.0})
    return runner, agent, zk, leading, journal


def stored(zk: FakeZk) -> Journal:
    return Journal.from_json(zk.get(JOURNAL)[0])


def steps(journal: Journal) -> list[tuple[str, str, bool]]:
    return [(a["way"], s["step"], s.get("ok")) for a in journal.marks["recovery"]["attempts"] for s in a["steps"]]


# -- a failure after the repartition ---------------------------------------------------------------


def test_a_failed_restart_after_the_repartition_finishes_forward_done_degraded():
    runner, agent, zk, _leading, journal = make("ccr")
    agent.fail("start_query", 8, times=1)
    with capture_logs() as events:
        done = runner.run(journal)
    assert done.status == "done_degraded" and stored(zk).status == "done_degraded"
    assert done.detail == "restarted: start_query refused: injected"  # the failure is kept
    assert steps(done) == [("forward", "start_query", True), ("forward", "resume_sources", True)]
    assert (agent.running, agent.checkpoint, agent.paused) == (True, 8, False)
    assert "done" not in done.phases and done.marks["metrics"]["total_s"] is None
    assert next(e for e in events if e["event"] == "migration.done_degraded")["phase"] == "restarted"


def test_the_test_hook_fails_a_phase_before_its_step_and_the_recovery_is_not_failed(monkeypatch):
    runner, agent, _zk, _leading, journal = make("dcr")
    monkeypatch.setenv(FAULT_FAIL_ENV, "restarted")
    install()
    done = runner.run(journal)
    assert done.status == "done_degraded" and FAULT_FAIL_ENV in done.detail
    # DCR paused and stopped; the restart step never ran: the recovery started and resumed.
    assert agent.sent == [("pause_sources", None), ("stop_query", None), ("repartition", 8), ("start_query", 8),
                          ("resume_sources", None)]
    assert (agent.running, agent.checkpoint, agent.paused) == (True, 8, False)


def test_a_repartition_whose_answer_was_lost_counts_as_done_and_finishes_forward():
    runner, agent, _zk, _leading, journal = make("ccr")
    agent.fail("repartition", 8, times=1, error=AckTimeout("no ack within 0.05 s"),
               then=lambda: setattr(agent, "checkpoint", 8))  # done by the agent, the answer lost
    done = runner.run(journal)
    assert done.status == "done_degraded" and done.marks["recovery"]["state_moved"] is True
    assert "repartitioned" not in done.phases and agent.checkpoint == 8 and agent.running and not agent.paused


def test_when_the_forward_restart_fails_it_rolls_back_to_the_old_count():
    runner, agent, zk, _leading, journal = make("ccr")
    agent.fail("start_query", 8)  # the new partitions never start
    with pytest.raises(MigrationError, match="rolled back to 4 partitions, sources resumed: restarted: "):
        runner.run(journal)
    final = stored(zk)
    assert final.status == "rolled_back"
    assert steps(final) == [("forward", "start_query", False), ("back", "stop_query", True),
                            ("back", "repartition", True), ("back", "start_query", True),
                            ("back", "resume_sources", True)]
    assert (agent.running, agent.checkpoint, agent.paused) == (True, 4, False)
    # The strategy's own offline repartition, on a stopped query.
    assert agent.sent[-3:] == [("repartition", 4), ("start_query", 4), ("resume_sources", None)]


def test_no_rollback_for_a_new_executor_shape():
    runner, agent, zk, _leading, journal = make("ccr")
    journal.shape = {"executor_cores": 2, "executor_memory_mb": 768}
    journal.phases.update(paused=101.0, stopped=102.0, captured=103.0, repartitioned=104.0)
    runner._restart_application = lambda j, shape: (_ for _ in ()).throw(MigrationError("spark-submit failed"))
    with pytest.raises(MigrationError, match="needs attention"):
        runner.run(journal)
    final = stored(zk)
    assert final.status == "needs_attention"
    assert "executor shape" in final.marks["recovery"]["skipped"]["back"]
    assert ("repartition", 4) not in agent.sent


def test_when_both_ways_fail_it_needs_attention_with_the_sources_resumed_and_the_journal_kept():
    runner, agent, zk, _leading, journal = make("ccr")
    agent.fail("start_query")  # neither count starts
    with capture_logs() as events, pytest.raises(MigrationError) as caught:
        runner.run(journal)
    final = stored(zk)  # kept, never deleted
    assert final.status == "needs_attention" and final.needs_attention and final.open
    assert final.marks["recovery"]["sources_resumed"] is True and agent.paused is False
    assert "sparkscale migrate --app a --resume mig-1" in str(caught.value)
    [event] = [e for e in events if e["event"] == "migration.needs_attention"]
    assert (event["app"], event["query"], event["id"], event["phase"], event["failed_phase"]) == (
        "a", "q", "mig-1", "repartitioned", "restarted")
    assert event["error"] == "restarted: start_query refused: injected"
    assert "forward: start_query" in event["recovery"] and "back: start_query" in event["recovery"]
    assert (event["resume"], event["abort"]) == ("sparkscale migrate --app a --resume mig-1",
                                                 "sparkscale migrate --app a --abort mig-1")
    assert event["log_level"] == "error"


def test_a_failure_before_the_repartition_rolls_back_as_before():
    runner, agent, zk, _leading, journal = make("ccr")
    agent.fail("repartition", 8)  # refused: the checkpoint keeps 4
    with pytest.raises(MigrationError, match="rolled back to 4"):
        runner.run(journal)
    final = stored(zk)
    assert final.status == "rolled_back" and final.marks["recovery"]["state_moved"] is False
    assert steps(final) == [("back", "start_query", True), ("back", "resume_sources", True)]
    assert (agent.running, agent.checkpoint, agent.paused) == (True, 4, False)


def test_a_failed_rollback_before_the_repartition_still_resumes_the_sources():
    runner, agent, zk, _leading, journal = make("dcr")
    agent.fail("repartition", 8)
    agent.fail("start_query", 4)
    with pytest.raises(MigrationError, match="needs attention"):
        runner.run(journal)
    assert stored(zk).status == "needs_attention" and agent.paused is False and agent.sent[-1][0] == "resume_sources"


# -- fenced ---------------------------------------------------------------------------------------


def test_a_runner_that_lost_its_lock_does_nothing_after_the_failure():
    runner, agent, zk, leading, journal = make("ccr")

    def deposed() -> None:
        leading[0] = False
        zk.expire(0x1001)  # the session ended: the lock znode is gone

    agent.fail("start_query", 8, then=deposed)
    with pytest.raises(JournalFenced):
        runner.run(journal)
    assert agent.sent[-1] == ("start_query", 8)  # nothing after the failed step: no recovery, no resume
    final = stored(zk)
    assert final.status == "running" and final.next == "restarted" and final.detail == ""  # its last write


def test_a_runner_deposed_during_the_recovery_stops_there():
    runner, agent, zk, leading, journal = make("ccr")
    agent.fail("start_query", 8)

    def deposed_at_the_forward_start() -> None:
        if agent.sent.count(("start_query", 8)) == 2:
            leading[0] = False
            zk.expire(0x1001)

    agent.failing[("start_query", 8)][2] = deposed_at_the_forward_start
    with pytest.raises(JournalFenced):
        runner.run(journal)
    assert ("repartition", 4) not in agent.sent and agent.sent[-1] == ("start_query", 8)
    assert stored(zk).status == "recovering"  # for the successor


def test_a_successor_goes_on_in_the_way_its_predecessor_was_trying():
    runner, agent, zk, _leading, journal = make("ccr")
    agent.fail("start_query", 8)
    agent.fail("repartition", 4, times=1, error=AckTimeout("no ack"), then=lambda: leading_lost(runner))
    with pytest.raises(MigrationError):
        runner.run(journal)
    assert stored(zk).status == "recovering"
    successor, agent2, _zk, _l, _j = make("ccr")
    successor.store = type(successor.store)(zk, ROOT, "a")  # the same ensemble, compare-and-set alone
    agent2.running, agent2.paused, agent2.checkpoint = False, True, agent.checkpoint
    with pytest.raises(MigrationError, match="rolled back to 4"):
        successor.resume()  # the daemon's takeover path
    assert ("start_query", 8) not in agent2.sent  # back, as its predecessor was going, not forward
    assert stored(zk).status == "rolled_back" and (agent2.running, agent2.checkpoint) == (True, 4)


def leading_lost(runner: MigrationRunner) -> None:
    runner.is_leader = lambda: False  # the election says so; its lock znode still exists


# -- the operator ---------------------------------------------------------------------------------


def needing_attention() -> tuple[MigrationRunner, FakeAgent, FakeZk, Journal]:
    runner, agent, zk, _leading, journal = make("ccr")
    agent.fail("start_query")
    with pytest.raises(MigrationError):
        runner.run(journal)
    agent.failing.clear()
    return runner, agent, zk, stored(zk)


def test_resume_of_a_migration_that_needs_attention_goes_on_to_done():
    runner, agent, zk, _journal = needing_attention()
    assert agent.checkpoint == 4  # the rollback's repartition ran before its start failed
    done = runner.resume("mig-1")
    assert done.status == "done" and stored(zk).status == "done"
    assert (agent.running, agent.checkpoint, agent.paused) == (True, 8, False)  # stopped and repartitioned again
    assert done.marks["recoveries"][0]["goal"] == "recover" and done.marks["resumed_by"][-1]["status"] == \
        "needs_attention"


def test_abort_of_a_migration_that_needs_attention_rolls_it_back():
    runner, agent, zk, _journal = needing_attention()
    aborted = runner.abort("mig-1")
    assert aborted.status == "aborted" and stored(zk).status == "aborted"
    assert steps(aborted)[0] == ("back", "stop_query", True)
    assert (agent.running, agent.checkpoint, agent.paused) == (True, 4, False)
    with pytest.raises(UnknownMigration, match="mig-1 of a is aborted: nothing to resume"):
        runner.resume("mig-1")


def test_abort_goes_forward_when_the_way_back_fails():
    runner, agent, _zk, _journal = needing_attention()
    agent.fail("repartition", 4)
    aborted = runner.abort("mig-1")
    assert aborted.status == "aborted" and aborted.marks["recovery"]["attempts"][-1]["way"] == "forward"
    # A repartition back was tried before: forward repartitions to the new count again.
    assert (agent.running, agent.checkpoint, agent.paused) == (True, 8, False)


def test_abort_of_a_migration_left_before_the_repartition_restarts_and_resumes():
    runner, agent, _zk, _leading, journal = make("ccr")
    journal.phases["paused"] = 101.0
    journal.next = "stopped"
    runner._write(journal)
    agent.paused, agent.running = True, False  # a dead leader had paused and stopped it
    aborted = runner.abort("mig-1")
    assert aborted.status == "aborted" and steps(aborted) == [("back", "start_query", True),
                                                               ("back", "resume_sources", True)]
    assert (agent.running, agent.checkpoint, agent.paused) == (True, 4, False)


def test_an_unknown_or_ended_migration_is_refused_naming_its_id():
    runner, _agent, _zk, _leading, journal = make("ccr")
    with pytest.raises(UnknownMigration, match="no migration mig-9 of a to resume: it has no journal"):
        runner.resume("mig-9")
    runner.run(journal)
    with pytest.raises(UnknownMigration, match=r"no migration mig-9 of a to abort: its journal holds mig-1 \(done\)"):
        runner.abort("mig-9")
    with pytest.raises(UnknownMigration, match="mig-1 of a is done: nothing to abort"):
        runner.abort("mig-1")
    assert runner.resume() is None  # the daemon's takeover: nothing active


def test_a_new_migration_waits_for_the_operator():
    from sparkscale.actuators.migration import MigrationBusy

    runner, _agent, _zk, _journal = needing_attention()
    with pytest.raises(MigrationBusy, match=r"needs attention.*--resume mig-1"):
        runner.start("q", 2, "ccr", "t")


# -- the leader's requests, the metric, the command line --------------------------------------------


def test_the_leader_serves_resume_and_abort_requests_without_a_live_query():
    from sparkscale.daemon import manual
    from sparkscale.store.zk_journal import ZkJournals
    from sparkscale.store.zk_requests import ZkRequests

    zk = FakeZk()
    zk.ensure_path(f"{ROOT}/apps/a")
    journal = Journal(id="mig-1", app="a", query="q", strategy="ccr", from_partitions=4, to_partitions=8,
                      requested_at=100.0, by="t", epoch=3, status="done")
    zk.create(JOURNAL, journal.to_json())
    requests = ZkRequests(zk, ROOT)
    scale = manual.submit_request(requests, "a", 3, "op", 60)
    resume = manual.submit_request(requests, "a", None, "op", 60, type="resume_migration", migration="mig-1")
    served = manual.serve_requests(requests, ZkJournals(zk, ROOT), "a", action_log=None, context=None, leader="d1",
                                   dry_run=False, snapshot=None)
    assert served == []
    answer = manual.ManualResult.from_json(zk.get(f"{ROOT}/apps/a/request_results/{resume}")[0])
    assert not answer.ok and json.loads(answer.detail) == {"detail": "migration mig-1 of a is done: nothing to resume",
                                                           "refused": True}
    assert [r.name for r in requests.pending("a")] == [scale]  # waits for a live query


def test_the_attention_metric_and_the_request_format():
    from sparkscale.daemon.manual import ManualRequest
    from sparkscale.daemon.metrics import DaemonMetrics

    metrics = DaemonMetrics()
    metrics.set_migrations_needing_attention("a", 1)
    assert 'sparkscale_migrations_needing_attention{app="a"} 1.0' in metrics.render().decode()
    metrics.forget_app("a")
    assert 'app="a"' not in metrics.render().decode()
    body = {"type": "abort_migration", "by": "me", "requested_at": 1.0, "expires_at": 2.0, "migration": "mig-1"}
    request = ManualRequest.from_znode("req-1", json.dumps(body).encode())
    assert (request.type, request.migration, request.to) == ("abort_migration", "mig-1", None)
    with pytest.raises(ValueError, match="names no migration"):
        ManualRequest.from_znode("req-2", json.dumps({**body, "migration": None}).encode())


class CliZk(FakeZk):
    def start(self, timeout: float = 0) -> None:
        pass

    def stop(self) -> None:
        pass


@pytest.fixture
def cli(tmp_path, monkeypatch):
    """`sparkscale migrate` against the fake ZooKeeper, apps `a` and `b` configured."""
    from sparkscale.cli import main

    zk = CliZk()
    monkeypatch.setattr(sparkscale.zkconn, "client", lambda cfg: zk)  # the client API's ZooKeeper
    path = tmp_path / "c.yaml"
    path.write_text("apps:\n  - {name: a, pipeline: wordcount}\n  - {name: b, pipeline: wordcount}\n")

    def invoke(*args: str):
        return CliRunner(env={"SPARKSCALE_CONFIG": None}).invoke(main, ["migrate", "--config", str(path), *args])

    return zk, invoke


def test_migrate_list_shows_what_is_not_done_and_how_to_go_on(cli):
    zk, invoke = cli
    journal = Journal(id="mig-7", app="a", query="q", strategy="ccr", from_partitions=4, to_partitions=8,
                      requested_at=100.0, by="t", epoch=3, status="needs_attention", next="restarted",
                      phases={"requested": 100.0, "repartitioned": 104.0}, detail="restarted: refused")
    zk.create(JOURNAL, journal.to_json(), makepath=True)
    zk.create(f"{ROOT}/apps/b/migration", Journal(id="mig-8", app="b", query="q", strategy="dsm", from_partitions=4,
                                                  to_partitions=2, requested_at=90.0, by="t", epoch=1,
                                                  status="done").to_json(), makepath=True)
    out = invoke("--list")
    assert out.exit_code == 0, out.output
    assert "mig-7" in out.output and "needs_attention" in out.output and "mig-8" not in out.output
    assert "sparkscale migrate --app a --resume mig-7 | sparkscale migrate --app a --abort mig-7" in out.output
    listed = json.loads(invoke("--list", "--json").output)
    assert [(m["id"], m["status"], m["phase_reached"]) for m in listed] == [("mig-7", "needs_attention",
                                                                              "repartitioned")]


def test_migrate_resume_or_abort_of_a_bad_id_or_with_other_arguments_is_exit_2(cli):
    zk, invoke = cli
    out = invoke("--resume", "mig-404")
    assert out.exit_code == 2 and "no journaled migration mig-404 to resume (journals: a: none; b: none)" in \
        out.output
    zk.create(JOURNAL, Journal(id="mig-1", app="a", query="q", strategy="ccr", from_partitions=4, to_partitions=8,
                               requested_at=100.0, by="t", epoch=3, status="rolled_back").to_json(), makepath=True)
    out = invoke("--abort", "mig-1")
    assert out.exit_code == 2 and "migration mig-1 of a is rolled_back: nothing to abort" in out.output
    out = invoke("--resume", "mig-1", "--partitions", "8")
    assert out.exit_code == 2 and "--resume, --partitions" in out.output
    assert invoke("--resume", "mig-1", "--abort", "mig-1").exit_code == 2
    out = invoke("--partitions", "8")
    assert out.exit_code == 2 and "give --app" in out.output


def test_the_actuator_reports_done_degraded_as_done_and_an_abort_with_its_count(monkeypatch):
    from sparkscale.actuators import parallelism
    from sparkscale.actuators.base import ActuationContext
    from sparkscale.model.plan import Action

    runner, agent, zk, _leading, journal = make("ccr")
    agent.fail("start_query", 8, times=1)
    runner.start = lambda *args: runner.run(journal)  # the runner's own walk, from the journal made above
    monkeypatch.setattr(parallelism, "MigrationRunner", lambda *args: runner)
    ctx = ActuationContext(runner.cfg, runner.app, zk, None, 3, lambda: True, "t", measure=False)
    action = Action.set_parallelism("q", 4, 8, "test")
    result = parallelism.MigrationActuator().execute(action, ctx)
    assert result.status == "done" and result.figures["status"] == "done_degraded"
    assert "done_degraded: restarted: start_query refused: injected" in result.detail

    runner, agent, zk, journal = needing_attention()
    monkeypatch.setattr(parallelism, "MigrationRunner", lambda *args: runner)
    ctx = ActuationContext(runner.cfg, runner.app, zk, None, 3, lambda: True, "t", abort=True, migration_id="mig-1")
    result = parallelism.MigrationActuator().execute(Action.set_parallelism("q", 4, 4, "abort"), ctx)
    assert (result.status, result.figures) == ("done", {"migration": "mig-1", "status": "aborted"})
    assert result.detail == "migration mig-1 aborted: q runs on 4 partitions (back), sources resumed"


def test_the_operators_resume_of_a_recovery_left_by_a_dead_runner_walks_on_to_done():
    runner, agent, zk, _leading, journal = make("ccr")
    agent.fail("start_query", 8, times=2, then=lambda: leading_lost(runner) if agent.sent.count(
        ("start_query", 8)) == 2 else None)
    with pytest.raises(MigrationError, match="no longer the leader"):
        runner.run(journal)  # the forward start failed too, then the runner lost its lead
    assert stored(zk).status == "recovering"
    operator, agent2, _zk, _l, _j = make("ccr")
    operator.store = type(operator.store)(zk, ROOT, "a")
    agent2.running, agent2.paused, agent2.checkpoint = False, True, 8
    done = operator.resume("mig-1")
    assert done.status == "done" and done.marks["recoveries"][0]["goal"] == "recover"
    assert (agent2.running, agent2.checkpoint, agent2.paused) == (True, 8, False)


def test_a_daemon_cycle_without_a_live_query_sets_the_metric_and_serves_the_operators_requests(monkeypatch):
    """A stranded migration's query is stopped: the agent lists no live query, yet the attention
    metric is set and `--resume` / `--abort` requests are answered (here: one naming another id)."""
    from sparkscale.control.state import AppState
    from sparkscale.daemon import manual, service
    from sparkscale.daemon import status as app_status
    from sparkscale.monitors.collector import NoQueriesYet
    from sparkscale.store.redis_shapes import RedisShapes
    from sparkscale.store.zk_requests import ZkRequests

    cfg = Config.model_validate({"apps": [{"name": "a", "pipeline": "wordcount"}]})
    zk = FakeZk()
    zk.connected = True
    daemon = service.Daemon(cfg, zk=zk)
    journal = Journal(id="mig-1", app="a", query="q", strategy="ccr", from_partitions=4, to_partitions=8,
                      requested_at=100.0, by="t", epoch=3, status="needs_attention")
    zk.create(f"{cfg.zookeeper.root}/apps/a/migration", journal.to_json(), makepath=True)
    name = manual.submit_request(ZkRequests(zk, cfg.zookeeper.root), "a", None, "op", 60, type="abort_migration",
                                 migration="mig-2")
    daemon.elections["a"] = SimpleNamespace(try_acquire=lambda: True, epoch=3, is_leader=True)
    daemon.autoscaler.states["a"] = AppState(elected_epoch=3)
    monkeypatch.setattr(RedisShapes, "stored_shape", lambda self, app: None)
    daemon.autoscaler.collector = lambda cfg, app, ride: (_ for _ in ()).throw(NoQueriesYet("a"))
    monkeypatch.setattr(app_status, "publish", lambda *args, **kwargs: None)
    assert daemon.autoscaler.cycle("a") == "no_queries"
    assert 'sparkscale_migrations_needing_attention{app="a"} 1.0' in daemon.metrics.render().decode()
    answer = manual.ManualResult.from_json(zk.get(f"{cfg.zookeeper.root}/apps/a/request_results/{name}")[0])
    assert not answer.ok and "no migration mig-2 of a to abort: its journal holds mig-1 (needs_attention)" in \
        answer.detail
    daemon.metrics.close()


def _run_logged(monkeypatch, **kwargs: Any) -> list[Any]:
    """run_migration with the query reporting 8 partitions already; the actions it dispatched."""
    from sparkscale.daemon import manual

    seen: list[Any] = []
    monkeypatch.setattr(manual, "query_partitions", lambda *a, **k: 8)
    monkeypatch.setattr(manual, "dispatch", lambda log, record, actions, ctx, **k: (seen.extend(actions) or "d1",
                                                                                     [SimpleNamespace(status="done")]))
    cfg = SimpleNamespace(redis=SimpleNamespace(key_prefix="p:"), migration=SimpleNamespace(strategy="ccr"))
    ctx = SimpleNamespace(redis=None, cfg=cfg, app=SimpleNamespace(name="a", shuffle_partitions=4), strategy="ccr",
                          shape=None, identity="me", epoch=3)
    manual.run_migration(None, ctx, "q", 8, "resume", **kwargs)
    return seen


def test_a_resumed_migration_is_logged_from_the_journals_count_not_the_one_the_query_reports(monkeypatch):
    # the chaos run's daemon_kill timeline read "8->8": the standby resumed after the repartition
    assert [(a.from_, a.to) for a in _run_logged(monkeypatch, from_partitions=4)] == [(4, 8)]
    assert [(a.from_, a.to) for a in _run_logged(monkeypatch)] == [(8, 8)]
