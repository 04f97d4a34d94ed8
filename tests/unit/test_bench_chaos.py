"""`sparkscale bench chaos`'s pure parts: the pre-fault throughput and the recovery time (E-Storm's
90 % rule), the fault registry, the daemon's log condensed, the load that outlives a Redis restart,
results.md and the plots, and the command's argument checks. Nothing here starts a server."""

from __future__ import annotations

import json
import threading
from dataclasses import asdict
from types import SimpleNamespace

import pytest
import redis
from click.testing import CliRunner

from sparkscale.cli import main
from sparkscale.config import load_config
from sparkscale_lab.bench import chaos
from sparkscale_lab.bench.chaos import CHAOS_YAML, ChaosSpec, SteadyLoad, app_name, app_yaml, passed, watch
from sparkscale_lab.bench.chaos_faults import FAULT_NAMES, FAULTS, FaultContext, FaultError, get_fault
from sparkscale_lab.bench.chaos_report import (
    acted_without_lead,
    chaos_table,
    daemon_actions,
    event_time,
    highlights,
    pre_fault_rate,
    recovery_time_s,
    reference_rate,
)
from sparkscale_lab.bench.timeline import Sample, rates

FAULT_AT = 60.0


def series(stall_s: float, catch_up_rate: float = 160.0, catch_up_s: float = 20.0, end_s: int = 140) -> list[Sample]:
    """100 records/s finished until the fault at 60 s, nothing for `stall_s`, then a catch-up, then 100/s
    again; 100/s arriving throughout; one sample a second."""
    out, processed = [], 0.0
    for t in range(end_s + 1):
        out.append(Sample(float(t), 100 * t, int(processed), 500.0, 2, 2, 4))
        if t < FAULT_AT or t >= FAULT_AT + stall_s + catch_up_s:
            processed += 100
        elif t >= FAULT_AT + stall_s:
            processed += catch_up_rate
    return out


def test_pre_fault_rate_is_the_average_over_the_span_before_the_fault():
    samples = series(stall_s=15)
    assert pre_fault_rate(samples, FAULT_AT, 30.0) == pytest.approx(100.0)
    assert pre_fault_rate(samples, FAULT_AT, 30.0, arrived=True) == pytest.approx(100.0)
    assert pre_fault_rate(samples[:1], FAULT_AT, 30.0) is None  # one sample: no rate


def test_recovery_is_the_first_point_from_which_the_rate_stays_at_90_percent():
    """Stalled 15 s, then catching up at 160/s: the 10 s rate at t is 16 x (t - 75), 96 at t = 81 (>= 90),
    rising; t = 61 still holds 9 s of pre-fault batches (90/s) but the next points fall: not a recovery."""
    points = rates(series(stall_s=15), 10.0)
    assert recovery_time_s(points, FAULT_AT, 100.0, sustain_s=10.0) == 21.0
    assert recovery_time_s(points, FAULT_AT, 100.0, sustain_s=10.0, fraction=0.5) == 19.0  # 16 x 4 = 64 >= 50


def test_no_recovery_without_a_pre_fault_rate_before_the_sustain_is_observed_or_after_a_stall_to_the_end():
    points = rates(series(stall_s=15), 10.0)
    assert recovery_time_s(points, FAULT_AT, None, 10.0) is None
    assert recovery_time_s(points, FAULT_AT, 0.0, 10.0) is None
    early = [p for p in points if p.t_s <= 85]  # back at >= 90 from 81, but only 4 s of it seen yet
    assert recovery_time_s(early, FAULT_AT, 100.0, sustain_s=10.0) is None
    stalled = rates(series(stall_s=200), 10.0)
    assert recovery_time_s(stalled, FAULT_AT, 100.0, sustain_s=10.0) is None


def test_the_reference_is_the_pre_fault_rate_but_never_above_the_offered_rate():
    # The quick chaos run's redis_restart: 644 records/s finished before the fault while 500/s
    # arrived (a start-up backlog draining); afterwards it kept up at 500/s and was judged
    # "not recovered" against 90 % of 644.
    assert reference_rate(644.1, 500.1) == 500.1
    assert reference_rate(480.0, 500.0) == 480.0  # behind before the fault: its own rate
    assert reference_rate(480.0, None) == 480.0 and reference_rate(None, 500.0) is None
    points = [SimpleNamespace(t_s=40.0 + i, output_rate=500.0) for i in range(1, 40)]
    assert recovery_time_s(points, 40.0, 644.1, sustain_s=10.0) is None
    assert recovery_time_s(points, 40.0, reference_rate(644.1, 500.1), sustain_s=10.0) == 1.0


def test_a_fault_the_throughput_does_not_feel_recovers_at_the_first_point_after_it():
    points = rates(series(stall_s=0, catch_up_rate=100.0), 10.0)
    assert recovery_time_s(points, FAULT_AT, 100.0, sustain_s=20.0) == 1.0


def test_watch_returns_the_recovery_once_the_daemon_story_has_ended_else_at_the_timeout():
    recorder = SimpleNamespace(samples=series(stall_s=15))
    t0 = 1_000.0
    spec = ChaosSpec(sustain_s=10.0, sample_s=0.01, recovery_timeout_s=1.0)  # the deadline is long past
    assert watch(recorder, t0, t0 + FAULT_AT, 100.0, spec, None) == (21.0, True)
    assert watch(recorder, t0, t0 + FAULT_AT, 100.0, spec, lambda: False) == (21.0, False)


def test_the_registry_holds_the_seven_faults_in_order():
    assert FAULT_NAMES == ("executor_kill", "worker_kill", "driver_kill", "daemon_kill", "redis_restart",
                           "zookeeper_restart", "zookeeper_expiry")
    assert all(callable(f.inject) and f.what and f.name == name for name, f in FAULTS.items())
    kill = get_fault("daemon_kill")
    assert kill.holds_migration and kill.standby and kill.settled is not None
    assert get_fault("zookeeper_expiry").settled is not None and not get_fault("driver_kill").standby
    with pytest.raises(KeyError, match="unknown fault 'disk_full'"):
        get_fault("disk_full")


@pytest.mark.parametrize(("fault", "why"), [("driver_kill", "has no running driver"), ("redis_restart", "redis is not"),
                                       ("zookeeper_restart", "zookeeper is not running")])
def test_a_fault_with_nothing_to_damage_is_refused_not_guessed(tmp_path, fault, why):
    """No environment and no driver recorded under the run dir: nothing is killed or stopped."""
    cfg = load_config(None, [f"cluster.run_dir={tmp_path}"])
    ctx = FaultContext(cfg, "chaos-x", daemons=[])
    with pytest.raises(FaultError, match=why):
        get_fault(fault).inject(ctx)
    assert ctx.notes == []


def test_each_fault_app_is_a_valid_config_with_the_chaos_settings(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("apps:" + app_yaml(app_name("zookeeper_expiry")) + CHAOS_YAML)
    cfg = load_config(path, [])
    app = cfg.app("chaos-zookeeper-expiry")
    assert (app.pipeline, app.min_executors, app.initial_executors, app.shuffle_partitions) == ("wordcount", 2, 2, 4)
    assert cfg.policy.name == "ds2" and cfg.zookeeper.session_timeout_s == 6.0
    quick = ChaosSpec.quick_spec(faults=("driver_kill",), rate=500)
    assert quick.shared_environment and quick.quick and quick.faults == ("driver_kill",) and quick.rate == 500
    assert not ChaosSpec().shared_environment


def stamp(second: float) -> str:
    return f"2030-01-01T00:00:{second:06.3f}Z"


T_FAULT = event_time({"timestamp": stamp(10)})


def test_event_time_reads_structlog_iso_stamps():
    assert event_time({"timestamp": stamp(11.5)}) == pytest.approx(T_FAULT + 1.5)
    assert event_time({"timestamp": "yesterday"}) is None and event_time({}) is None


def test_daemon_actions_condense_each_daemons_log_around_the_fault():
    leader = [
        {"event": "cycle", "mode": "no_change", "timestamp": stamp(1)},  # before the window
        {"event": "cycle", "mode": "no_change", "timestamp": stamp(6)},
        {"event": "migration.phase", "phase": "requested", "timestamp": stamp(7)},
        {"event": "migration.phase", "phase": "paused", "timestamp": stamp(7.5)},
        {"event": "migration.phase", "phase": "stopped", "timestamp": stamp(8)},
        {"event": "migration.fault_hold", "phase": "repartitioned", "timestamp": stamp(9)},
        {"event": "loadgen.second", "timestamp": stamp(9.5)},  # not the daemon's story
    ]
    standby = [
        {"event": "cycle", "mode": "standby", "timestamp": stamp(6.5)},
        {"event": "cycle", "mode": "standby", "timestamp": stamp(11)},
        {"event": "cycle", "mode": "standby", "timestamp": stamp(16)},
        {"event": "leader.acquired", "epoch": 3, "timestamp": stamp(17)},
        {"event": "migration.resume", "id": "m1", "phase": "repartitioned", "previous_epoch": 2,
         "timestamp": stamp(17.2)},
        {"event": "migration.done", "timestamp": stamp(20)},
        {"event": "migration.resumed", "status": "done", "timestamp": stamp(20.1)},
        {"event": "cycle", "mode": "acted", "actions": ["scale_executors 2 -> 3"], "timestamp": stamp(25)},
        {"event": "cycle", "mode": "no_change", "timestamp": stamp(59)},  # after the window
    ]
    lines = daemon_actions({"d1": leader, "d2": standby}, T_FAULT - 5, T_FAULT + 40, T_FAULT)
    assert lines == [
        "-4 s d1: cycle no_change",
        "-4 s d2: cycle standby ×3",
        "-3 s d1: migration phases requested, paused, stopped",
        "-1 s d1: migration held after repartitioned (fault injection)",
        "+7 s d2: leader lock acquired (epoch 3)",
        "+7 s d2: resumes migration m1 at repartitioned (left by epoch 2)",
        "+10 s d2: migration done",
        "+10 s d2: resumed migration ended: done",
        "+15 s d2: cycle acted: scale_executors 2 -> 3",
    ]
    assert highlights(lines).startswith("-3 s d1: migration phases requested, paused, stopped; -1 s d1")
    assert highlights(["-4 s d1: cycle no_change ×3"]) == "cycles only (no_change / standby)"


def test_acted_without_lead_finds_actions_between_losing_and_retaking_the_lock():
    events = [
        {"event": "leader.acquired", "epoch": 1, "timestamp": stamp(1)},
        {"event": "cycle", "mode": "acted", "actions": ["scale_executors 2 -> 3"], "timestamp": stamp(2)},
        {"event": "leader.lost", "reason": "zookeeper session lost", "timestamp": stamp(3)},
        {"event": "cycle", "mode": "standby", "timestamp": stamp(4)},
        {"event": "action.started", "actions": "scale_executors 3 -> 2", "timestamp": stamp(5)},
        {"event": "leader.acquired", "epoch": 2, "timestamp": stamp(6)},
        {"event": "action.started", "actions": "scale_executors 3 -> 2", "timestamp": stamp(7)},
    ]
    assert acted_without_lead(events) == [f"{stamp(5)}: action started: scale_executors 3 -> 2"]
    assert acted_without_lead(events[:4] + events[5:]) == []
    assert acted_without_lead([{"event": "cycle", "mode": "acted", "actions": [], "timestamp": stamp(1)}])


def test_the_load_starts_again_after_a_redis_error(monkeypatch):
    calls: list[int] = []

    def fake_loadgen(cfg, app, profile, seed, stop):
        calls.append(seed)
        if len(calls) == 1:
            raise redis.ConnectionError("Connection refused")
        stop.wait()  # the second run lasts until the load is stopped

    monkeypatch.setattr(chaos, "run_loadgen", fake_loadgen)
    load = SteadyLoad(None, "chaos-redis-restart", 500, seed=11).start()  # type: ignore[arg-type]
    deadline = threading.Event()
    while len(calls) < 2 and not deadline.wait(0.05):
        pass
    load.stop()
    assert calls == [11, 12] and load.interruptions == 1


def run_result(fault: str, recovery_s: float | None, lost: int = 0) -> dict:
    samples = series(stall_s=15)
    return {"fault": fault, "app": app_name(fault), "what": get_fault(fault).what, "started_at": 0.0,
            "recovery_s": recovery_s, "recovered": recovery_s is not None, "lost": lost, "duplicated": 0,
            "unexpected": 0, "total_expected": 14000, "drained": True, "pre_fault_rps": 100.0, "input_rps": 100.0,
            "fault_at_s": FAULT_AT, "recovered_at_s": None if recovery_s is None else FAULT_AT + recovery_s,
            "daemon_actions": ["-4 s d1: cycle no_change ×2", "+2 s d1: cycle unreachable (redis): no action"],
            "notes": ["redis stopped and started again"], "actions": [],
            "samples": [s.to_dict() for s in samples]}


def chaos_results(runs: list[dict], failed: list[dict] | None = None) -> dict:
    return {"kind": "chaos", "command": "sparkscale bench chaos --quick",
            "spec": json.loads(json.dumps(asdict(ChaosSpec.quick_spec()))), "runs": runs, "failed_runs": failed or []}


def test_report_renders_the_table_each_fault_and_its_timeline(tmp_path):
    data = chaos_results([run_result("driver_kill", 21.0), run_result("redis_restart", None, lost=3)],
                         [{"fault": "worker_kill", "error": "FaultError('no worker runs an executor')"}])
    (tmp_path / "results.json").write_text(json.dumps(data))
    out = CliRunner().invoke(main, ["report", str(tmp_path)])
    assert out.exit_code == 0, out.output
    page = (tmp_path / "results.md").read_text()
    rows = {line.split("|")[1].strip(): line for line in page.splitlines() if line.startswith("| ")}
    assert rows["driver_kill"].startswith("| driver_kill | yes | 21 | 100 / 100 | 0 | 0 | +2 s d1: cycle unreachable")
    assert rows["redis_restart"].startswith("| redis_restart | **no** | - | 100 / 100 | 3 | 0 |")
    assert rows["worker_kill"].startswith("| worker_kill | **failed** |")
    assert "E-Storm" in page and "90%" in page and "Command: `sparkscale bench chaos --quick`" in page
    assert "## driver_kill" in page and "    -4 s d1: cycle no_change ×2" in page
    for fault in ("driver_kill", "redis_restart"):
        assert (tmp_path / f"timeline-{fault}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert chaos_table(data).count("\n") == 4  # header, rule, 2 runs, 1 failed


def test_passed_needs_every_fault_recovered_with_nothing_lost_or_duplicated():
    assert passed(chaos_results([run_result("driver_kill", 21.0)]))
    assert not passed(chaos_results([run_result("driver_kill", None)]))
    assert not passed(chaos_results([run_result("driver_kill", 21.0, lost=1)]))
    assert not passed(chaos_results([], [{"fault": "driver_kill", "error": "boom"}]))


def test_bench_chaos_refuses_unknown_faults_before_starting_anything(tmp_path):
    out = CliRunner().invoke(main, ["bench", "chaos", "--faults", "driver_kill,disk_full", "--out", str(tmp_path)])
    assert out.exit_code == 2 and "disk_full" in out.output
    assert not (tmp_path / "results.json").exists()
    out = CliRunner().invoke(main, ["bench", "chaos", "--help"])
    assert out.exit_code == 0 and "--quick" in out.output and "zookeeper_expiry" in out.output


def with_variant(run: dict, variant: str, **figures) -> dict:
    return {**run, "variant": variant, "app": app_name(run["fault"], variant), **figures}


def test_report_puts_each_faults_variants_side_by_side_with_their_breakdown(tmp_path):
    """Runs with variants and breakdowns, next to a run written before either existed (driver_kill)."""
    base = run_result("executor_kill", 21.0)
    runs = [with_variant(base, "default", detected_s=0.41, detected_by="Remote RPC client disassociated.",
                         replaced_s=6.2, reload_ms=1830.0, loaded_from_dfs=2, replay_ms=0.0, replayed_files=0,
                         reload_batches=[31], reload_batch_ms=5400.0, executors_before=2),
            with_variant(base, "changelog", detected_s=0.38, replaced_s=5.9, reload_ms=2410.0, loaded_from_dfs=2,
                         replay_ms=600.0, replayed_files=9, reload_batches=[30, 32], reload_batch_ms=6100.0),
            with_variant({**base, "recovery_s": 12.0}, "spare", detected_s=0.4, replaced_s=None, reload_ms=900.0,
                         loaded_from_dfs=1, reload_batches=[29], executors_before=3),
            run_result("driver_kill", 30.0)]
    data = chaos_results(runs, [{"fault": "worker_kill", "variant": "spare", "error": "FaultError('x')"}])
    (tmp_path / "results.json").write_text(json.dumps(data))
    out = CliRunner().invoke(main, ["report", str(tmp_path)])
    assert out.exit_code == 0, out.output
    page = (tmp_path / "results.md").read_text()
    rows = {line.split("|")[1].strip(): line for line in page.splitlines() if line.startswith("| ")}
    assert rows["executor_kill"].startswith("| executor_kill | yes | 21 | 100 / 100 |")
    assert rows["executor_kill (changelog)"].startswith("| executor_kill (changelog) | yes | 21 |")
    assert rows["executor_kill (spare)"].startswith("| executor_kill (spare) | yes | 12 |")
    assert rows["worker_kill (spare)"].startswith("| worker_kill (spare) | **failed** |")
    assert rows["driver_kill"].startswith("| driver_kill | yes | 30 |")
    side = page.split("### executor_kill\n\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert side[0] == "|  | default | changelog | spare |"
    cells = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]] for line in side[2:]}
    assert cells["detected (s after the fault)"] == ["0.41", "0.38", "0.4"]
    assert cells["replacement registered (s)"] == ["6.2", "5.9", "-"]
    assert cells["reload: load time summed over tasks (ms)"] == ["1830", "2410", "900"]
    assert cells["state loaded from the checkpoint (store instances)"] == ["2", "2", "1"]
    assert cells["of which changelog replay, summed (ms) / files"] == ["0 / 0", "600 / 9", "- / -"]
    assert cells["reload batches (ids) / longest, wall (ms)"] == ["31 / 5400", "30, 32 / 6100", "29 / -"]
    assert cells["recovery to 90 % (s)"] == ["21", "21", "12"]
    assert cells["executors before the fault"] == ["2", "-", "3"]
    old = page.split("### driver_kill\n\n", 1)[1].split("\n\n", 1)[0]
    assert "| detected (s after the fault) | - |" in old and "| recovery to 90 % (s) | 30 |" in old
    assert "task time summed, not wall time" in page and "removeTime" in page and "rocksdbNumLoadedFromDfs" in page
    assert "- `changelog`: `spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled=true`" in page
    assert "- `spare`: one executor more than the daemon's target" in page and "standby executor, not" in page
    assert "## executor_kill (changelog)" in page and "](timeline-executor_kill-changelog.png)" in page
    for name in ("executor_kill", "executor_kill-changelog", "executor_kill-spare", "driver_kill"):
        assert (tmp_path / f"timeline-{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_default_only_report_names_no_variants(tmp_path):
    data = chaos_results([run_result("driver_kill", 21.0)])
    (tmp_path / "results.json").write_text(json.dumps(data))
    assert CliRunner().invoke(main, ["report", str(tmp_path)]).exit_code == 0
    page = (tmp_path / "results.md").read_text()
    assert "ran once per variant" not in page and "## Recovery breakdown" in page and "| driver_kill | yes |" in page
