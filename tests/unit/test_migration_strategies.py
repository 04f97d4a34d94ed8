"""Migration strategies: the registry, a strategy added from outside, and the built-ins' choices
(no servers: the runner's steps against the agent are tested in integration)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from sparkscale import registry as registry_module
from sparkscale.actuators.migration import (
    MigrationError,
    MigrationRunner,
    MigrationStrategy,
    get_strategy,
    phase_metrics,
    phases_of,
    register_strategy,
    registered_strategies,
)
from sparkscale.config import Config
from sparkscale.model.journal import Journal
from sparkscale.monitors.batch_points import BatchPoint
from sparkscale.registry import STRATEGIES
from tests.unit.fakezk import FakeZk, hold_lock

BUILT_IN = ("dsm", "dcr", "ccr")


@pytest.fixture
def registry(monkeypatch):
    """A copy of the registry for one test: what it registers is gone afterwards."""
    registered_strategies()  # plug-ins (if any) load into the real registry, not into the copy
    monkeypatch.setattr(STRATEGIES, "items", dict(STRATEGIES.items))


def journal(strategy: str, **phases: float) -> Journal:
    j = Journal(id="mig-1", app="a", query="q", strategy=strategy, from_partitions=4, to_partitions=8,
                requested_at=100.0, by="t", epoch=3)
    j.phases.update(phases)
    return j


def test_the_built_in_strategies_are_registered_in_order():
    assert registered_strategies()[:3] == BUILT_IN
    for name in BUILT_IN:
        strategy = get_strategy(name)
        assert isinstance(strategy, MigrationStrategy) and strategy.name == name
        assert phases_of(name) == strategy.phases


def test_an_unknown_strategy_is_an_error_naming_the_known_ones():
    with pytest.raises(MigrationError) as caught:
        get_strategy("teleport-now")
    assert isinstance(caught.value, LookupError)
    message = str(caught.value)
    assert "'teleport-now'" in message
    assert all(name in message for name in BUILT_IN)
    assert str(caught.value) == "unknown strategy 'teleport-now' (expected one of dsm, dcr, ccr)"


def test_a_strategy_registered_here_is_found_and_its_phases_are_the_journals_plan(registry):
    @register_strategy
    class PauseStop(MigrationStrategy):
        name = "pause-stop"
        phases = ("requested", "paused", "stopped", "repartitioned", "restarted", "resumed", "restored", "done")

    found = get_strategy("pause-stop")
    assert type(found) is PauseStop
    assert registered_strategies() == (*BUILT_IN, "pause-stop")
    j = journal("pause-stop", requested=100.0, paused=100.5, stopped=102.0)
    assert j.phase_plan == PauseStop.phases
    assert j.remaining == ("repartitioned", "restarted", "resumed", "restored", "done")
    j.phases.update(repartitioned=104.0, restarted=107.0, resumed=107.5, restored=109.0, done=109.5)
    assert list(j.phase_durations()) == list(PauseStop.phases)  # in the strategy's order
    assert j.phase_durations() == {"requested": 0.0, "paused": 0.5, "stopped": 1.5, "repartitioned": 2.0,
                                   "restarted": 3.0, "resumed": 0.5, "restored": 1.5, "done": 0.5}
    assert phase_metrics(j)["rebalance_s"] == pytest.approx(1.5 + 2.0 + 3.0)
    # Its choices are the defaults: a stop at a batch boundary, the exactly-once sink enforced.
    assert found.stop_command("q", 30.0) == ("stop_query", {"query": "q", "hold": True, "timeout_s": 30.0})
    assert found.enforce_exactly_once_sink() is True


def test_a_runner_walks_a_registered_strategys_phases_in_order(registry):
    @register_strategy
    class PauseStop(MigrationStrategy):
        name = "pause-stop"
        phases = ("requested", "paused", "stopped", "repartitioned", "restarted", "resumed", "restored", "done")

    zk = FakeZk()
    hold_lock(zk, Config().zookeeper.root, "a", epoch=3)  # the runner leads at 3: its journal writes check it
    seen: list[tuple[str, float]] = []
    runner = MigrationRunner(Config(), SimpleNamespace(name="a"), zk, redis_client=None, epoch=3,
                             is_leader=lambda: True, on_phase=lambda j, phase, d: seen.append((phase, d)))
    ran: list[str] = []
    for step in ("_pause", "_drain", "_stop", "_capture", "_repartition", "_restart", "_resume", "_restored",
                 "_await_first_output"):
        setattr(runner, step, lambda j, step=step: ran.append(step))
    j = journal("pause-stop", requested=100.0)
    done = runner.run(j)
    written = [(path, Journal.from_json(data).next) for path, data in zk.writes if path.endswith("/migration")]
    # The `done` step waits for the restarted run's first output (the end of the restore metric).
    assert ran == ["_pause", "_stop", "_repartition", "_restart", "_resume", "_restored", "_await_first_output"]
    assert [phase for phase, _ in seen] == list(PauseStop.phases[1:])
    assert done.status == "done" and list(done.phases) == list(PauseStop.phases)
    # The journal says which phase runs before its step runs.
    nexts = [n for _, n in written]
    assert [n for k, n in enumerate(nexts) if k == 0 or nexts[k - 1] != n] == list(PauseStop.phases[1:])


def test_registering_another_class_under_a_taken_name_is_an_error(registry):
    with pytest.raises(ValueError, match="'ccr' is already registered"):
        @register_strategy
        class Impostor(MigrationStrategy):
            name = "ccr"
            phases = ("requested", "stopped", "done")
    assert type(get_strategy("ccr")).__name__ == "CaptureCheckpointResume"
    # The same class again (a re-import) is no error.
    assert register_strategy(type(get_strategy("dsm"))) is type(get_strategy("dsm"))


@pytest.mark.parametrize("phases", [("paused", "done"), ("requested", "stopped"), ("requested", "teleported", "done"),
                                    ("requested", "stopped", "stopped", "done"), ["requested", "done"]])
def test_a_phase_table_the_runner_cannot_walk_is_refused(registry, phases):
    with pytest.raises((ValueError, TypeError)):
        register_strategy(type("Odd", (MigrationStrategy,), {"name": "odd", "phases": phases}))
    assert "odd" not in registered_strategies()


def test_dsm_aborts_and_does_not_enforce_the_exactly_once_sink():
    dsm = get_strategy("dsm")
    assert dsm.stop_command("q", 180.0) == ("abort_query", {"query": "q", "hold": True})
    assert dsm.enforce_exactly_once_sink() is False


@pytest.mark.parametrize("name", ["dcr", "ccr"])
def test_dcr_and_ccr_stop_at_a_batch_boundary_and_enforce_the_exactly_once_sink(name):
    strategy = get_strategy(name)
    assert strategy.stop_command("q", 180.0) == ("stop_query", {"query": "q", "hold": True, "timeout_s": 180.0})
    assert strategy.enforce_exactly_once_sink() is True


def batch(run_id: str, rows: int, at: float) -> BatchPoint:
    return BatchPoint(committed_at_s=at, started_at_s=at - 0.5, run_id=run_id, rows=rows, processed_position=None,
                      arrived_position=None, backlog_records=None)


class Probe:
    """What the runner would answer: the query's status in the driver and its published batches."""

    def __init__(self, status: dict[str, Any] | None, batches: list[BatchPoint] | None = None):
        self.status, self.batches, self.calls = status, batches or [], []

    def query_status(self, query: str) -> dict[str, Any] | None:
        self.calls.append("status")
        return self.status

    def batches_since(self, query: str, since_s: float) -> list[BatchPoint]:
        self.calls.append("batches")
        return [b for b in self.batches if b.committed_at_s >= since_s]


def test_dcr_is_restored_when_the_new_run_left_initialisation_with_the_sources_paused():
    dcr = get_strategy("dcr")
    j = journal("dcr")
    j.marks["run_id"] = "new"
    waiting = Probe({"message": "Waiting for data to arrive"}, [batch("old", 0, 101.0)])
    assert dcr.restored(waiting, j) and waiting.calls == ["status"]  # no batch with input needed
    assert not dcr.restored(Probe({"message": "Initializing sources"}), j)
    assert not dcr.restored(Probe(None), j)
    assert "first_output_at" not in j.marks  # the restore metric does not end here (the runner's done step)


@pytest.mark.parametrize("name", ["dsm", "ccr"])
def test_dsm_and_ccr_are_restored_at_the_new_runs_first_batch_with_input(name):
    strategy = get_strategy(name)
    j = journal(name)
    j.marks["run_id"] = "new"
    waiting = Probe({"message": "Waiting for data to arrive"}, [batch("old", 7, 101.0)])
    # No batch of the new run yet: the status is read too, for a query that runs and finds no input
    # (restored once idle for IDLE_RESTORED_S: test_restart_safety.py), which is not long enough here.
    assert not strategy.restored(waiting, j) and waiting.calls == ["batches", "status"]
    assert not strategy.restored(Probe({}, [batch("new", 0, 120.0)]), j)
    # The first batch with input, not the latest one the poll happens to see.
    later = Probe({}, [batch("old", 7, 101.0), batch("new", 0, 120.0), batch("new", 7, 123.5),
                       batch("new", 9, 124.5)])
    assert strategy.restored(later, j)
    assert j.marks["first_output_at"] == 123.5
    # A whole-application restart (no run id from a start answer): another run than the stopped one,
    # after the stop.
    k = journal(name, stopped=110.0)
    k.marks.update(app_restarted_at=120.0, run_id_at_request="old")
    assert not strategy.restored(Probe({}, [batch("old", 7, 111.0), batch("x", 7, 109.0)]), k)
    assert strategy.restored(Probe({}, [batch("old", 7, 111.0), batch("x", 7, 119.0)]), k)
    assert k.marks["first_output_at"] == 119.0  # published before the restart command returned
    # Resumed without a run id (the agent's answer was lost): restored once the query runs.
    lost = journal(name)
    assert strategy.restored(Probe({"message": "Waiting for data to arrive"}), lost)
    assert not strategy.restored(Probe(None), lost)


def test_plug_in_strategies_load_once_from_their_entry_point_group(registry, monkeypatch):
    class Plugged(MigrationStrategy):
        name = "plugged"
        phases = ("requested", "stopped", "repartitioned", "restarted", "restored", "done")

    def broken() -> type:
        raise ImportError("no module named mypkg")

    asked: list[str] = []

    def entry_points(group: str) -> list[SimpleNamespace]:
        asked.append(group)
        return [SimpleNamespace(name="broken", value="mypkg.broken", load=broken),
                SimpleNamespace(name="plugged", value="mypkg.plugged:Plugged", load=lambda: Plugged)]

    monkeypatch.setattr(STRATEGIES, "loaded", False)
    monkeypatch.setattr(registry_module.importlib.metadata, "entry_points", entry_points)
    assert type(get_strategy("plugged")) is Plugged  # a broken plug-in leaves the others usable
    assert registered_strategies() == (*BUILT_IN, "plugged")
    assert asked == ["sparkscale.migration_strategies"]  # once, on the first lookup


@pytest.mark.parametrize(("name", "enforced"), [("dsm", False), ("dcr", True), ("ccr", True)])
def test_the_runners_repartition_asks_the_strategy_about_the_exactly_once_sink(name, enforced):
    runner = MigrationRunner(Config(), SimpleNamespace(name="a"), zk=None, redis_client=None, epoch=3,
                             is_leader=lambda: True)
    sent: list[tuple[str, dict[str, Any]]] = []
    runner._command = lambda kind, args, timeout_s=None: sent.append((kind, args)) or "ok"
    runner._repartition(journal(name))
    assert sent == [("repartition", {"query": "q", "partitions": 8, "enforce_exactly_once_sink": enforced})]


def test_the_done_step_waits_for_the_first_output_and_never_fails_the_migration():
    """DCR's `restored` is no first output: the runner's last step finds it in the progress history."""
    cfg = Config.model_validate({"migration": {"phase_timeout_s": 0.05}})
    runner = MigrationRunner(cfg, SimpleNamespace(name="a"), zk=None, redis_client=None, epoch=3,
                             is_leader=lambda: True)
    j = journal("dcr", requested=100.0, stopped=102.0, restarted=106.0, restored=107.0, resumed=107.5)
    j.marks.update(run_id="new", run_id_at_request="old")
    seen: list[list[BatchPoint]] = [[batch("new", 0, 107.0)], [batch("new", 0, 107.0), batch("new", 40, 108.25)]]
    runner.batches_since = lambda query, since_s: seen.pop(0) if len(seen) > 1 else seen[0]
    runner.query_status = lambda query: {"message": "Processing new data", "isTriggerActive": True}
    runner._await_first_output(j)
    assert j.marks["first_output_at"] == 108.25
    assert phase_metrics(j)["restore_s"] == 8.25
    idle = journal("dcr", requested=100.0, stopped=102.0)
    idle.marks["run_id"] = "new"
    runner.batches_since = lambda query, since_s: []
    runner._await_first_output(idle)  # no input: the phase timeout passes, no error
    assert "first_output_at" not in idle.marks and "no batch with input" in idle.marks["first_output"]
    assert "no batch with input" in phase_metrics(idle)["not_measured"]


def test_ccrs_capture_records_positions_and_counts_what_it_covers(monkeypatch):
    import json

    from sparkscale.actuators.migration import runner as runner_module
    from sparkscale.protocol.streams import SourceStatus, StreamOffsets

    stored: dict[str, str] = {}
    client = SimpleNamespace(set=lambda key, value, ex=None: stored.update({key: value}))
    runner = MigrationRunner(Config(), SimpleNamespace(name="a", source_partitions=2), zk=None,
                             redis_client=client, epoch=3, is_leader=lambda: True)
    runner.pausable = lambda query: True
    runner._input_position = lambda: 1500  # arrived, app-wide
    processed = StreamOffsets(("5-0", "6-0"), (400, 500)).to_json()
    admitted = StreamOffsets(("7-0", "8-0"), (450, 500)).to_json()
    monkeypatch.setattr(runner_module, "read_source_status", lambda *a: SourceStatus(
        committed=None, committed_at=None, processed=processed, processed_at=1.0, latest=admitted, latest_at=1.0,
        backlog=600, backlog_by_partition=[], backlog_at=1.0, paused=True))
    j = journal("ccr")
    runner._capture(j)
    assert j.marks["captured_records"] == 1500 - 900  # arrived but not processed
    assert j.marks["captured_in_flight_records"] == 50  # of those, admitted to a batch
    (value,) = stored.values()
    assert json.loads(value)["what"] == "positions"
    runner._input_position = lambda: None  # a script app reading the Redis streams source
    runner._capture(j)
    assert j.marks["captured_records"] == 600  # the source's own backlog
