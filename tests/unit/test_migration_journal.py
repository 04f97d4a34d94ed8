"""The migration journal and metrics maths (no servers: the runner is tested in integration)."""

from __future__ import annotations

import pytest

from sparkscale.actuators.migration import get_strategy, new_shape, phase_metrics
from sparkscale.model.journal import Journal

BUILT_IN = ("dsm", "dcr", "ccr")


def journal(strategy: str = "ccr", **phases: float) -> Journal:
    j = Journal(id="mig-1", app="a", query="q", strategy=strategy, from_partitions=4, to_partitions=8,
                requested_at=100.0, by="t", epoch=3)
    j.phases.update(phases)
    return j


def test_every_strategy_starts_requested_and_ends_done_and_only_dsm_skips_the_pause():
    for strategy in BUILT_IN:
        phases = get_strategy(strategy).phases
        assert phases[0] == "requested" and phases[-1] == "done"
        assert ("paused" in phases) == (strategy != "dsm")
    dcr, ccr = get_strategy("dcr").phases, get_strategy("ccr").phases
    assert dcr.index("drained") < dcr.index("stopped")
    assert dcr.index("restored") < dcr.index("resumed")  # restore, then resume
    assert ccr.index("resumed") < ccr.index("restored")  # resume at once, replay first
    assert ccr.index("stopped") < ccr.index("captured") < ccr.index("repartitioned")


def test_remaining_phases_and_json_round_trip():
    j = journal(requested=100.0, paused=101.0, stopped=103.0)
    assert j.remaining == ("captured", "repartitioned", "restarted", "resumed", "restored", "done")
    j.marks["input_at_request"] = 42
    back = Journal.from_json(j.to_json())
    assert back == j


def test_phase_durations_and_metrics():
    j = journal("ccr", requested=100.0, paused=100.5, stopped=102.0, captured=102.25, repartitioned=105.0,
                restarted=108.0, resumed=108.5, restored=110.0, done=110.5)
    j.marks["first_output_at"] = 109.5
    j.marks["captured_records"] = 120
    j.marks["captured_in_flight_records"] = 0
    j.marks["stop"] = {"stopped": True, "waited_s": 1.0}  # 1 s of the 1.5 s stop waited for the boundary
    d = j.phase_durations()
    assert d == {"requested": 0.0, "paused": 0.5, "stopped": 1.5, "captured": 0.25, "repartitioned": 2.75,
                 "restarted": 3.0, "resumed": 0.5, "restored": 1.5, "done": 0.5}
    m = phase_metrics(j)
    assert m["restore_s"] == 9.5  # request -> first output after the change
    assert m["boundary_wait_s"] == 1.0
    assert m["drain_s"] is None
    # The paper's capture duration: request -> captured, less the stop itself (0.5 s, a rebalance part).
    assert m["capture_s"] == pytest.approx(2.25 - 0.5)
    assert m["capture_positions_s"] == 0.25  # the DataStore write alone
    assert m["rebalance_s"] == pytest.approx(0.5 + 2.75 + 3.0)  # stop less its wait + repartition + restart
    assert m["total_s"] == 10.5 and m["captured_records"] == 120 and m["captured_in_flight_records"] == 0
    assert "not_measured" not in m


def test_the_boundary_wait_is_booked_alike_for_dcr_and_ccr_and_never_in_the_rebalance():
    """The same 2 s wait for the running batch: DCR's drain phase, inside CCR's stop."""
    dcr = journal("dcr", requested=100.0, paused=100.5, drained=102.5, stopped=103.0, repartitioned=105.0,
                  restarted=108.0, restored=109.0, resumed=109.5, done=111.0)
    dcr.marks["stop"] = {"stopped": True, "waited_s": 0.0}
    ccr = journal("ccr", requested=100.0, paused=100.5, stopped=103.0, captured=103.25, repartitioned=105.25,
                  restarted=108.25, resumed=108.75, restored=110.0, done=110.5)
    ccr.marks["stop"] = {"stopped": True, "waited_s": 2.0}
    md, mc = phase_metrics(dcr), phase_metrics(ccr)
    assert md["boundary_wait_s"] == mc["boundary_wait_s"] == 2.0
    assert md["rebalance_s"] == mc["rebalance_s"] == pytest.approx(0.5 + 2.0 + 3.0)
    assert md["drain_s"] == 2.5 and md["capture_s"] is None  # pause 0.5 + wait 2.0
    assert mc["capture_s"] == 2.75 and mc["drain_s"] is None  # pause 0.5 + wait 2.0 + capture 0.25
    # DCR's `restored` (state loaded, sources paused) is no first output: no restore figure yet.
    assert md["restore_s"] is None and "restore_s" in md["not_measured"]
    dcr.marks["first_output_at"] = 110.75
    assert phase_metrics(dcr)["restore_s"] == 10.75


def test_dsm_waits_for_no_boundary_and_a_resumed_stop_without_its_wait_says_so():
    dsm = journal("dsm", requested=100.0, stopped=100.5, repartitioned=103.0, restarted=106.0, restored=108.0,
                  done=108.5)
    dsm.marks["stop"] = {"stopped": True, "batch_was_running": True, "stop_s": 0.3}
    m = phase_metrics(dsm)
    assert m["boundary_wait_s"] == 0.0 and m["drain_s"] is None and m["capture_s"] is None
    assert m["rebalance_s"] == pytest.approx(0.5 + 2.5 + 3.0)
    ccr = journal("ccr", requested=100.0, paused=100.5, stopped=103.0)
    ccr.marks["stop"] = {"stopped": False, "already_stopped": True}  # re-sent by a successor
    m = phase_metrics(ccr)
    assert m["boundary_wait_s"] is None and "boundary_wait_s" in m["not_measured"]
    assert m["rebalance_s"] == 2.5  # the whole stop, its wait unknown


def test_a_dcr_whose_sources_cannot_pause_reports_no_drain():
    dcr = journal("dcr", requested=100.0, paused=100.5, drained=100.6, stopped=104.6)
    dcr.marks["drain"] = "sources cannot be paused: the stop waits for an idle trigger"
    dcr.marks["stop"] = {"stopped": True, "waited_s": 3.5}
    m = phase_metrics(dcr)
    assert m["drain_s"] is None and "sources cannot be paused" in m["not_measured"]
    assert m["boundary_wait_s"] == pytest.approx(0.1 + 3.5)
    dcr.marks["stop"] = {"stopped": True, "waited_s": 10.0, "inside_batch": True}
    assert "landed inside a batch" in phase_metrics(dcr)["not_measured"]


def test_a_journal_with_a_new_executor_shape_round_trips_and_an_old_one_has_none():
    from sparkscale.model.executor_shape import ExecutorShape

    j = journal("ccr")
    assert new_shape(j) is None
    j.shape = {"executor_cores": 2, "executor_memory_mb": 768}
    back = Journal.from_json(j.to_json())
    assert new_shape(back) == ExecutorShape(2, 768)
    assert new_shape(back).describe() == "2 core(s), 768 MiB"


def test_a_manual_migration_request_carries_its_shape_and_refuses_a_malformed_one():
    import json

    from sparkscale.daemon.manual import ManualRequest

    body = {"type": "migrate", "to": None, "by": "me", "requested_at": 1.0, "expires_at": 2.0, "query": "q",
            "shape": {"executor_cores": 2, "executor_memory_mb": 1024}}
    request = ManualRequest.from_znode("req-1", json.dumps(body).encode())
    assert request.to is None and request.executor_shape.executor_memory_mb == 1024
    with pytest.raises(ValueError, match=r"^shape: expected the keys executor_cores, executor_memory_mb"):
        ManualRequest.from_znode("req-2", json.dumps({**body, "shape": {"cores": 2}}).encode())


# -- fenced writes --------------------------------------------------------------------------------


def fenced_store(epoch: int = 3):
    from sparkscale.actuators.migration import JournalStore
    from tests.unit.fakezk import FakeZk, hold_lock

    zk = FakeZk(session=0x1001)
    hold_lock(zk, "/ss", "a", epoch)
    return zk, JournalStore(zk, "/ss", "a", epoch=epoch)


def stored(zk) -> Journal:
    return Journal.from_json(zk.get("/ss/apps/a/migration")[0])


def test_a_leaders_journal_writes_are_compare_and_set_inside_a_transaction_with_its_lock():
    zk, store = fenced_store()
    assert store.read() is None
    j = journal("ccr", requested=100.0)
    store.write(j)  # created
    j.next = "paused"
    store.write(j)  # set at the version it created
    assert stored(zk).next == "paused" and store.version == zk.get("/ss/apps/a/migration")[1].version == 1


def test_a_deposed_leader_cannot_write_and_says_so():
    from structlog.testing import capture_logs

    from sparkscale.actuators.migration import JournalFenced

    zk, store = fenced_store()
    j = journal("ccr", requested=100.0)
    store.write(j)
    zk.expire(0x1001)  # its session ended: the lock znode is gone
    j.status, j.detail = "running", "stopped: deposed"
    with capture_logs() as events, pytest.raises(JournalFenced, match="lock znode of epoch 3 is gone"):
        store.write(j)
    assert stored(zk).detail == ""  # nothing written
    assert next(e for e in events if e["event"] == "migration.fenced")["reason"].startswith("the writer's lock")


def test_a_journal_changed_by_a_successor_is_not_overwritten():
    from sparkscale.actuators.migration import JournalFenced, JournalStore

    zk, store = fenced_store()
    store.write(journal("ccr", requested=100.0))
    successor = JournalStore(zk, "/ss", "a")  # reads and writes it meanwhile (compare-and-set alone)
    taken = successor.read()
    taken.epoch = 9
    successor.write(taken)
    with pytest.raises(JournalFenced, match="changed since version 0"):
        store.write(journal("ccr", requested=100.0))
    assert stored(zk).epoch == 9
    stale = JournalStore(zk, "/ss", "a")
    stale.version = -1  # it read no journal, then one appeared
    with pytest.raises(JournalFenced, match="created by another leader"):
        stale.write(taken)


def test_a_writer_that_never_held_the_lock_at_its_epoch_is_refused_before_writing():
    from sparkscale.actuators.migration import JournalFenced, JournalStore
    from tests.unit.fakezk import FakeZk, hold_lock

    zk = FakeZk(session=0x1001)
    hold_lock(zk, "/ss", "a", 5, session=0x2002)  # another daemon leads at 5
    for epoch, fragment in ((5, "written by session 0x1001"), (4, "epoch 4, live lock epoch 5")):
        with pytest.raises(JournalFenced, match=fragment):
            JournalStore(zk, "/ss", "a", epoch=epoch).write(journal("ccr", requested=100.0))
    assert zk.exists("/ss/apps/a/migration") is None


def test_transaction_refusal_reads_zookeepers_answers():
    from kazoo.exceptions import BadVersionError, NoNodeError, RolledBackError, RuntimeInconsistency

    from sparkscale.store.zk_journal import transaction_refusal

    assert transaction_refusal([True, object()], 2, 3) is None
    assert "epoch 3 is gone" in transaction_refusal([NoNodeError(), RuntimeInconsistency()], 2, 3)
    assert "changed since version 2" in transaction_refusal([RolledBackError(), BadVersionError()], 2, 3)


def test_the_runners_failure_path_writes_nothing_once_deposed():
    from types import SimpleNamespace

    from sparkscale.actuators.migration import JournalFenced, MigrationRunner
    from sparkscale.config import Config
    from tests.unit.fakezk import FakeZk, hold_lock

    zk = FakeZk(session=0x1001)
    hold_lock(zk, Config().zookeeper.root, "a", 3)
    leading = [True]
    runner = MigrationRunner(Config(), SimpleNamespace(name="a"), zk, redis_client=None, epoch=3,
                             is_leader=lambda: leading[0])
    j = journal("ccr", requested=100.0, paused=101.0)
    runner._write(j)
    zk.expire(0x1001)
    leading[0] = False
    with pytest.raises(JournalFenced):
        runner._fail(j, "stopped", "no ack")
    assert Journal.from_json(zk.get(runner.store.path)[0]).detail == ""  # the successor's, untouched
