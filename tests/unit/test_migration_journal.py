"""The migration journal and metrics maths (no servers: the runner is tested in integration)."""

from __future__ import annotations

import pytest

from sparkscale.actuators.migration import Journal, get_strategy, phase_metrics
from sparkscale.monitors.migration_metrics import _Sample, _stable_since

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
    d = j.phase_durations()
    assert d == {"requested": 0.0, "paused": 0.5, "stopped": 1.5, "captured": 0.25, "repartitioned": 2.75,
                 "restarted": 3.0, "resumed": 0.5, "restored": 1.5, "done": 0.5}
    m = phase_metrics(j)
    assert m["restore_s"] == 9.5  # request -> first output after the change
    assert m["capture_s"] == 0.25 and m["drain_s"] is None
    assert m["rebalance_s"] == pytest.approx(1.5 + 2.75 + 3.0)  # stop + repartition + restart
    assert m["total_s"] == 10.5 and m["captured_records"] == 120


def samples(rates_in_out: list[tuple[float, float]], start: float = 0.0) -> list[_Sample]:
    """One sample a second with the given input and output rates."""
    out, arrived, processed = [], 0.0, 0.0
    for k, (rin, rout) in enumerate(rates_in_out):
        arrived += rin
        processed += rout
        out.append(_Sample(start + k, int(processed), int(arrived)))
    return out


def test_stable_since_finds_the_run_where_output_follows_input():
    # 20 s catching up (output twice the input), then 70 s of output = input.
    s = samples([(100, 200)] * 20 + [(100, 100)] * 70)
    start = _stable_since(s, tolerance=0.2, window_s=60)
    assert start is not None and 10 <= start <= 25  # within one 10 s rate window of the change at 20 s
    # Only 30 s of agreement so far: not yet stable.
    assert _stable_since(samples([(100, 200)] * 20 + [(100, 100)] * 30), 0.2, 60) is None
    # Output 50 % below input the whole time: never stable.
    assert _stable_since(samples([(100, 50)] * 90), 0.2, 60) is None


def test_a_journal_with_a_new_executor_shape_round_trips_and_an_old_one_has_none():
    from sparkscale.pipeline.submit import ExecutorShape

    j = journal("ccr")
    assert j.new_shape is None
    j.shape = {"executor_cores": 2, "executor_memory_mb": 768}
    back = Journal.from_json(j.to_json())
    assert back.new_shape == ExecutorShape(2, 768)
    assert back.new_shape.describe() == "2 core(s), 768 MiB"


def test_a_manual_migration_request_carries_its_shape_and_refuses_a_malformed_one():
    import json

    from sparkscale.daemon.manual import ManualRequest

    body = {"type": "migrate", "to": None, "by": "me", "requested_at": 1.0, "expires_at": 2.0, "query": "q",
            "shape": {"executor_cores": 2, "executor_memory_mb": 1024}}
    request = ManualRequest.from_znode("req-1", json.dumps(body).encode())
    assert request.to is None and request.executor_shape.executor_memory_mb == 1024
    with pytest.raises(TypeError):
        ManualRequest.from_znode("req-2", json.dumps({**body, "shape": {"cores": 2}}).encode())
