"""What may be restarted (issue: exactly once on jobs nobody here wrote): a query is migrated only
when every source replays from its checkpointed offsets, after its first commit, and a checkpoint
whose first batch never committed is made startable again. Pure logic: no Spark."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from structlog.testing import capture_logs

from sparkscale.actuators.migration import MigrationError, MigrationRunner
from sparkscale.agent.checkpoint import last_committed_batch, repair_first_batch
from sparkscale.agent.progress import session_checkpoint
from sparkscale.config import Config
from sparkscale.protocol.queries import QueryInfo, Replay, queries_key, source_replay
from tests.unit.fake_redis import fake_redis
from tests.unit.fakezk import FakeZk, hold_lock

SOCKET = "TextSocketV2[host: localhost, port: 9999]"
FILE = "FileStreamSource[file:/data/in]"


def query(**over: object) -> QueryInfo:
    base = {"name": "q", "id": "id-q", "run_id": "r", "status": "active", "checkpoint": "file:/ck/q",
            "restartable": True, "committed": True, "sources": ("file",), "source_descriptions": (FILE,),
            "state_store_provider": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"}
    return QueryInfo(**{**base, **over})  # type: ignore[arg-type]


@pytest.mark.parametrize(("kind", "description", "replay"), [
    ("file", FILE, Replay.OFFSETS),
    ("kafka", "KafkaV2[Subscribe[clicks]]", Replay.OFFSETS),
    ("redis_streams", "RedisStreams[app:in]", Replay.OFFSETS),
    ("rate", "RateStreamV2[rowsPerSecond=10, rampUpTimeSeconds=0, numPartitions=default", Replay.OFFSETS),
    ("other", "DeltaSource[file:/lake/t]", Replay.OFFSETS),
    ("socket", SOCKET, Replay.NONE),
    ("other", "MemoryStream[value#1]", Replay.NONE),
    ("other", "SomeoneElsesSource[x]", Replay.NONE),
])
def test_each_source_kind_is_classified_by_whether_a_restart_replays_it(kind, description, replay):
    assert source_replay(kind, description)[0] is replay


def test_a_socket_query_is_not_migratable_and_the_refusal_names_the_source():
    info = query(sources=("socket",), source_descriptions=(SOCKET,))
    why = info.why_not_migratable()
    assert not info.migratable
    assert SOCKET in why and "new connection" in why and "executor scaling still applies" in why
    assert "allow_lossy_restart" in why
    # The operator's explicit override, and only it, lets it through.
    assert info.why_not_migratable(allow_lossy_restart=True) is None


def test_one_unreplayable_source_of_a_join_is_enough_to_refuse():
    info = query(sources=("file", "socket"), source_descriptions=(FILE, SOCKET))
    assert [s for s, _ in info.not_replayable()] == [SOCKET]
    assert not info.migratable


def test_no_migration_before_the_first_commit_nor_without_sources_seen():
    assert "no committed batch yet" in query(committed=False).why_not_migratable()
    assert query().migratable
    # The fields round-trip through the agent's JSON, and an older record without them parses.
    assert QueryInfo.from_json(query().to_json()) == query()
    old = QueryInfo.from_json('{"name": "q", "id": "i", "run_id": "r", "status": "active"}')
    assert old.source_descriptions == () and not old.committed


def test_an_unnamed_query_on_the_session_checkpoint_survives_query_restarts_but_not_app_restarts():
    info = query(name="id-q", session_checkpoint=True)
    assert info.migratable  # the agent pins its checkpoint when it restarts it in the driver
    why = info.why_not_app_restartable()
    assert why is not None and "queryName" in why and "spark.sql.streaming.checkpointLocation" in why
    assert query().why_not_app_restartable() is None


def test_the_session_checkpoint_of_an_unnamed_query_is_recognised():
    uuid = "0f8fad5b-d9cb-469f-a165-70867728950e"
    assert session_checkpoint("/ck", f"file:/ck/{uuid}")
    assert session_checkpoint("file:///ck/", f"file:/ck/{uuid}")
    assert not session_checkpoint("/ck", "file:/ck/counts")  # a named query: <root>/<name>, stable
    assert not session_checkpoint("/ck", f"file:/elsewhere/{uuid}")
    assert not session_checkpoint(None, f"file:/ck/{uuid}")


# -- the checkpoint Spark refuses, and its repair ----------------------------------------------------


def first_batch_interrupted(root):
    (root / "offsets").mkdir(parents=True)
    (root / "offsets" / "0").write_text('v1\n{"batchWatermarkMs":0}\n{"logOffset":0}')
    (root / "state" / "0" / "0").mkdir(parents=True)
    (root / "state" / "0" / "0" / "1.changelog").write_text("written by a finished task of batch 0")
    (root / "commits").mkdir()
    return root


def test_a_checkpoint_whose_first_batch_never_committed_gets_its_state_set_aside(tmp_path):
    root = first_batch_interrupted(tmp_path / "ck")
    assert last_committed_batch(root) is None
    what = repair_first_batch(root)
    assert what is not None and "batch 0" in what
    assert not (root / "state").exists()
    assert (root / "offsets" / "0").exists()  # the same input, under the same id, runs again
    aside = [p.name for p in root.iterdir() if p.name.startswith("state.batch0-")]
    assert len(aside) == 1 and (root / aside[0] / "0" / "0" / "1.changelog").exists()  # set aside, not deleted
    assert repair_first_batch(root) is None  # nothing left to repair


def test_a_checkpoint_with_a_commit_is_never_touched(tmp_path):
    root = first_batch_interrupted(tmp_path / "ck")
    (root / "commits" / "0").write_text('v1\n{"nextBatchWatermarkMs":0}')
    assert last_committed_batch(root) == 0
    assert repair_first_batch(root) is None and (root / "state").is_dir()


def test_the_agent_refuses_to_stop_a_query_before_its_first_commit(tmp_path):
    from sparkscale.agent.args import CommandRefused
    from sparkscale.agent.queries import QueryControl

    root = first_batch_interrupted(tmp_path / "ck")
    with pytest.raises(CommandRefused, match="no committed batch yet"):
        QueryControl._refuse_before_first_commit("q", root)
    (root / "commits" / "0").write_text("v1\n{}")
    QueryControl._refuse_before_first_commit("q", root)  # committed: no refusal


# -- the runner refuses before anything stops --------------------------------------------------------


def runner_over(*infos: QueryInfo, lossy: bool = False) -> tuple[MigrationRunner, list[str]]:
    zk = FakeZk(session=0x1001)
    hold_lock(zk, "/sparkscale", "a", epoch=3)
    app = SimpleNamespace(name="a", allow_lossy_restart=lossy, executor_cores=1, executor_memory_mb=1024)
    published = {queries_key("sparkscale:", "a"): {i.name: i.to_json() for i in infos}}  # what the refusal reads
    runner = MigrationRunner(Config.model_validate({}), app, zk, fake_redis(hashes=published), epoch=3,
                             is_leader=lambda: True)
    sent: list[str] = []
    runner._command = lambda kind, args, timeout_s=None: sent.append(kind)  # type: ignore[method-assign]
    runner.current_partitions = lambda q: 4  # type: ignore[method-assign]
    runner._input_position = lambda: None  # type: ignore[method-assign]
    runner.query_progress = lambda q: {}  # type: ignore[method-assign]
    return runner, sent


def test_a_migration_of_a_socket_query_is_refused_before_anything_is_sent():
    runner, sent = runner_over(query(sources=("socket",), source_descriptions=(SOCKET,)))
    with pytest.raises(MigrationError, match=r"TextSocketV2.*new connection"):
        runner.start("q", 8, "ccr", "t")
    assert sent == [] and runner.store.read() is None  # nothing paused, stopped or journaled


def test_a_new_executor_shape_is_refused_when_any_query_would_restart_without_its_state():
    from sparkscale.model.executor_shape import ExecutorShape

    runner, sent = runner_over(query(), query(name="id-u", session_checkpoint=True))
    runner.restart_app = lambda: None
    with pytest.raises(MigrationError, match=r"query id-u .*queryName"):
        runner.start("q", 8, "dsm", "t", shape=ExecutorShape(2, 2048))
    assert sent == []


def test_the_lossy_override_is_logged_on_every_use():
    runner, _sent = runner_over(query(sources=("socket",), source_descriptions=(SOCKET,)), lossy=True)
    runner.run = lambda journal: journal  # type: ignore[method-assign]
    with capture_logs() as logs:
        runner.start("q", 8, "dsm", "t")
    assert next(e for e in logs if e["event"] == "migration.lossy_restart_allowed")["sources"] == [SOCKET]


# -- a restarted query that sees no input is restored, not degraded ----------------------------------


def test_a_restarted_query_idle_for_long_enough_is_restored_with_the_restore_not_measured():
    from sparkscale.actuators.migration.base import IDLE_RESTORED_S, idle_after_restart
    from sparkscale.model.journal import Journal

    journal = Journal(id="m", app="a", query="q", strategy="dsm", from_partitions=4, to_partitions=6,
                      requested_at=100.0, by="t", epoch=1)
    idle = {"message": "Waiting for data to arrive", "isTriggerActive": False, "isDataAvailable": False}
    busy = {"message": "Processing new data", "isTriggerActive": True, "isDataAvailable": True}
    assert not idle_after_restart({"message": "Initializing sources", "isTriggerActive": False,
                                   "isDataAvailable": False}, journal, now_s=200.0)
    assert not idle_after_restart(idle, journal, now_s=200.0)  # idle from now on
    assert not idle_after_restart(busy, journal, now_s=201.0)  # input came: the idle time starts over
    polling = {"message": "Getting offsets from FileStreamSource[file:/in]", "isTriggerActive": True,
               "isDataAvailable": False}
    assert not idle_after_restart(polling, journal, now_s=201.5)  # not idle by Spark's word yet
    assert not idle_after_restart(idle, journal, now_s=202.0)
    assert not idle_after_restart(polling, journal, now_s=203.0)  # looking for input, finding none: still idle
    assert not idle_after_restart(idle, journal, now_s=202.0 + IDLE_RESTORED_S - 0.5)
    assert idle_after_restart(idle, journal, now_s=202.0 + IDLE_RESTORED_S)
    assert journal.marks["first_output"].startswith("not measured")
    assert not idle_after_restart(None, journal, now_s=300.0)  # not running is never restored


# -- an interrupted batch is finished under its own id before a repartition --------------------------


class FakeRun:
    def __init__(self, checkpoint, ends: bool = True):
        self.checkpoint, self.ends, self.stopped = checkpoint, ends, False
        self._jsq = self

    def awaitTermination(self, ms: int) -> bool:  # noqa: N802 - the Java method's name
        if self.ends:  # Spark's one-batch run commits the planned batch and ends
            (self.checkpoint / "commits" / "3").write_text("v1\n{}")
        return self.ends

    def exception(self) -> SimpleNamespace:  # a Scala Option, as py4j hands it over
        return SimpleNamespace(isDefined=lambda: False)

    def stop(self) -> None:
        self.stopped = True


class FakeStarted:
    def __init__(self, run: FakeRun):
        self.run, self.calls = run, []

    def restart(self, one_batch: bool = False) -> FakeRun:
        self.calls.append(one_batch)
        return self.run


def stopped_inside_batch_3(root):
    for d in ("offsets", "commits"):
        (root / d).mkdir(parents=True)
    for b in range(4):
        (root / "offsets" / str(b)).write_text('v1\n{"conf":{"spark.sql.shuffle.partitions":"4"}}\n{}')
    for b in range(3):
        (root / "commits" / str(b)).write_text("v1\n{}")
    return root


def control(started: dict):
    from sparkscale.agent.queries import QueryControl

    ctl = QueryControl.__new__(QueryControl)
    ctl.hooks = SimpleNamespace(started=started)
    return ctl


def test_a_batch_a_stop_interrupted_is_finished_with_one_batch_before_the_repartition(tmp_path):
    root = stopped_inside_batch_3(tmp_path / "ck")
    started = FakeStarted(FakeRun(root))
    assert control({"q": started}).finish_interrupted("q", root, 8, 30.0) == [3]
    assert started.calls == [True] and (root / "commits" / "3").exists()
    # Nothing interrupted, or a count it already has (the batch just runs again on restart): no run.
    assert control({"q": started}).finish_interrupted("q", root, 8, 30.0) == [] and started.calls == [True]


def test_an_interrupted_batch_that_cannot_be_finished_refuses_the_repartition(tmp_path):
    from sparkscale.agent.args import CommandRefused

    root = stopped_inside_batch_3(tmp_path / "ck")
    with pytest.raises(CommandRefused, match="did not see it started"):
        control({}).finish_interrupted("q", root, 8, 30.0)
    hung = FakeRun(root, ends=False)
    with pytest.raises(CommandRefused, match="did not finish within 30 s"):
        control({"q": FakeStarted(hung)}).finish_interrupted("q", root, 8, 30.0)
    assert hung.stopped


def test_a_new_shape_with_the_override_logs_every_query_it_restarts_without_replay():
    from sparkscale.model.executor_shape import ExecutorShape

    socket = query(name="lines", sources=("socket",), source_descriptions=(SOCKET,))
    runner, _sent = runner_over(query(), socket, lossy=True)
    runner.restart_app = lambda: None
    runner.run = lambda journal: journal  # type: ignore[method-assign]
    with capture_logs() as logs:
        runner.start("q", 8, "dsm", "t", shape=ExecutorShape(2, 2048))
    assert [e["query"] for e in logs if e["event"] == "migration.lossy_restart_allowed"] == ["lines"]
