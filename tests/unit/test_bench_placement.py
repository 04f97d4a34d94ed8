"""`sparkscale bench placement`'s pure parts: the busy share from CPU-time deltas, the imbalance, the
stalls, the shuffle bytes of the stages completed in the window, EDRP's objective on measured
figures, the config a run writes, results.md and its plot, and the command's argument checks.
Nothing here starts a server."""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

from sparkscale.cli import main
from sparkscale.config import load_config
from sparkscale.policies.placement.edrp_model import EdrpSettings
from sparkscale_lab.bench import placement as bench
from sparkscale_lab.bench.measures import Segment, SloLimits, measure
from sparkscale_lab.bench.placement import PlacementSpec, apps_yaml, bench_yaml, summary, tree_cpu_s
from sparkscale_lab.bench.placement_measures import (
    AppFigures,
    DoneAction,
    WorkerSample,
    app_figures,
    busy_share,
    imbalance,
    load_balance,
    measured_objective,
    moves_and_actions,
    parse_stage_bytes,
    shuffle_bytes,
    stalls_s,
)
from sparkscale_lab.bench.placement_report import median_table, placement_table
from sparkscale_lab.bench.timeline import Sample

# -- busy share, imbalance ---------------------------------------------------------------------------


def test_busy_share_is_the_cpu_time_delta_over_wall_time_and_pinned_cpus():
    worker, executor = (100, 1.0), (200, 2.0)
    before = {worker: 10.0, executor: 50.0}
    after = {worker: 10.5, executor: 50.4}  # 0.9 CPU s in 1 s on one CPU
    assert busy_share(before, after, 1.0, 1) == pytest.approx(0.9)
    assert busy_share(before, after, 2.0, 1) == pytest.approx(0.45)
    assert busy_share(before, after, 1.0, 2) == pytest.approx(0.45)  # two pinned CPUs


def test_a_new_process_counts_from_zero_an_ended_one_is_lost_a_recycled_pid_is_new():
    before = {(100, 1.0): 10.0, (200, 2.0): 50.0}
    after = {(100, 1.0): 10.2, (300, 3.0): 0.3, (200, 9.0): 0.1}  # 200 ended, its pid taken by another
    assert busy_share(before, after, 1.0, 1) == pytest.approx(0.2 + 0.3 + 0.1)


def test_busy_share_needs_an_interval_and_a_cpu():
    assert busy_share({}, {(1, 1.0): 1.0}, 0.0, 1) is None
    assert busy_share({}, {(1, 1.0): 1.0}, 1.0, 0) is None


def test_imbalance_is_max_over_mean():
    assert imbalance([0.9, 0.3]) == pytest.approx(1.5)
    assert imbalance([0.5, 0.5]) == pytest.approx(1.0)
    assert imbalance([1.0, 0.0]) == pytest.approx(2.0)
    assert imbalance([0.0, 0.0]) is None and imbalance([]) is None


def ws(t: float, a: float | None, b: float | None, ea: int = 3, eb: int = 3) -> WorkerSample:
    return WorkerSample(t, {"127.0.0.2": a, "127.0.0.3": b}, {"127.0.0.2": ea, "127.0.0.3": eb})


def test_load_balance_is_the_ratio_of_the_window_means_beside_the_mean_of_ratios():
    # Alternating bursts: each second one worker is busy; on average both are equally loaded.
    samples = [ws(t, 0.8 if t % 2 else 0.0, 0.0 if t % 2 else 0.8) for t in range(1, 21)]
    samples += [ws(25.0, None, 0.5), ws(30.0, 1.0, 0.0)]  # unknown: left out; after the window: left out
    got = load_balance(samples, 0.0, 20.0)
    assert got.mean_busy_share == {"127.0.0.2": pytest.approx(0.4), "127.0.0.3": pytest.approx(0.4)}
    assert got.imbalance == pytest.approx(1.0)
    assert got.imbalance_per_sample == pytest.approx(2.0)
    crowded = load_balance([ws(t, 0.9, 0.3) for t in range(1, 11)], 0.0, 10.0)
    assert crowded.imbalance == pytest.approx(1.5) == crowded.imbalance_per_sample
    assert load_balance([], 0.0, 10.0).imbalance is None


def test_tree_cpu_s_reads_this_process_and_says_none_for_a_gone_one():
    mine = tree_cpu_s(os.getpid())
    assert mine is not None and any(pid == os.getpid() for pid, _ in mine) and all(v >= 0 for v in mine.values())
    assert tree_cpu_s(2**22 + 12345) is None  # above pid_max: no such process


# -- stalls -----------------------------------------------------------------------------------------


def app_series(end_s: int, stall: tuple[int, int] | None = None, every_s: int = 2, rate: int = 100,
               idle_from: int | None = None) -> list[Sample]:
    """`rate` records/s arriving; a batch finishing everything every `every_s` seconds, none during
    `stall` [start, end); nothing arriving from `idle_from` on."""
    out, processed = [], 0
    for t in range(end_s + 1):
        arrived = rate * (min(t, idle_from) if idle_from is not None else t)
        stalled = stall is not None and stall[0] <= t < stall[1]
        if t % every_s == 0 and not stalled:
            processed = arrived
        out.append(Sample(float(t), arrived, processed, 900.0, 2, 2, 4, latency_ms=1500.0))
    return out


def test_a_healthy_app_has_no_stall():
    assert stalls_s(app_series(60), 0, 60, min_stall_s=5) == []


def test_a_stall_runs_from_the_last_progress_to_the_next():
    got = stalls_s(app_series(60, stall=(21, 33)), 0, 60, min_stall_s=5)
    assert got == [pytest.approx(14.0)]  # last progress at 20 s, next at 34 s
    assert stalls_s(app_series(60, stall=(21, 33)), 0, 60, min_stall_s=15) == []


def test_idle_is_no_stall_and_a_stall_open_at_the_window_end_counts():
    assert stalls_s(app_series(60, every_s=3, idle_from=10), 0, 60, min_stall_s=5) == []
    assert stalls_s(app_series(60, stall=(41, 99)), 0, 60, min_stall_s=5) == [pytest.approx(20.0)]
    assert stalls_s(app_series(60, stall=(41, 99)), 0, 50, min_stall_s=5) == [pytest.approx(10.0)]


def test_app_figures_take_the_backlog_slo_and_cores_as_bench_measures_does():
    samples = app_series(120, stall=(61, 90))
    limits = SloLimits(batch_limit_ms=1000, backlog_s=10.0, backlog_floor_records=50)
    got = app_figures(samples, 20.0, 120.0, 100.0, limits, min_stall_s=5)
    shifted = [Sample(s.t_s - 20, s.arrived_records, s.processed_records, s.batch_duration_ms, s.executors,
                      s.cores, s.partitions) for s in samples if 20 <= s.t_s <= 120]
    assert got.slo_backlog_s == measure(shifted, [], [Segment(0, 100, 100)], limits).slo_backlog_s > 0
    assert got.mean_cores == pytest.approx(2.0)
    assert got.stalls_s == (pytest.approx(30.0),) and got.downtime_s == pytest.approx(30.0)
    assert got.mean_latency_s == pytest.approx(1.5)


# -- shuffle ----------------------------------------------------------------------------------------


def stage(stage_id: int, status: str, completed: str | None, remote: int, local: int, attempt: int = 0) -> dict:
    return {"status": status, "stageId": stage_id, "attemptId": attempt, "completionTime": completed,
            "shuffleRemoteBytesRead": remote, "shuffleLocalBytesRead": local, "shuffleReadBytes": remote + local,
            "name": "start at NativeMethodAccessorImpl.java:0"}


def test_the_stages_completed_in_the_window_are_summed_each_attempt_once():
    first = [stage(10, "COMPLETE", "2026-11-22T05:04:10.000GMT", 1000, 3000),
             stage(11, "COMPLETE", "2026-11-22T05:04:20.000GMT", 500, 500),
             stage(12, "ACTIVE", None, 9999, 9999),
             stage(13, "SKIPPED", None, 0, 0)]
    second = [stage(11, "COMPLETE", "2026-11-22T05:04:20.000GMT", 500, 500),  # listed again: counted once
              stage(11, "COMPLETE", "2026-11-22T05:04:30.000GMT", 200, 0, attempt=1),  # a retry: its own
              stage(14, "COMPLETE", "2026-11-22T05:05:30.000GMT", 7, 7)]  # after the window
    parsed = parse_stage_bytes("placement-1", first) + parse_stage_bytes("placement-1", second)
    assert {s.stage_id for s in parsed} == {10, 11, 14}
    start = parsed[0].completed_at_s
    assert shuffle_bytes(parsed, start, start + 30) == (1000 + 500 + 200, 3000 + 500)
    assert shuffle_bytes(parsed, start + 1, start + 30) == (700, 500)
    other = parse_stage_bytes("placement-2", [stage(10, "COMPLETE", "2026-11-22T05:04:10.000GMT", 1, 0)])
    assert shuffle_bytes(parsed + other, start, start) == (1001, 3000)  # stage ids are per app
    assert parse_stage_bytes("a", {"not": "a list"}) == []


# -- the objective, the actions ---------------------------------------------------------------------


def test_the_objective_is_edrp_f_on_measured_figures_with_its_terms():
    s = EdrpSettings()  # w_r 0.3, w_c 0.3, w_d 0.4, R_max 10 s (latency), T_D,max 60 s, 1 per core-hour
    got = measured_objective(s, response_s=1.5, mean_cores=6.0, longest_stall_s=12.0, cluster_cores=9)
    assert got.c_max == 9.0 and got.cost_per_h == 6.0
    assert got.response_term == pytest.approx(0.3 * 1.5 / 10)
    assert got.cost_term == pytest.approx(0.3 * 6 / 9, abs=1e-4)
    assert got.downtime_term == pytest.approx(0.4 * 12 / 60)
    assert got.objective == pytest.approx(0.045 + 0.2 + 0.08, abs=1e-4)
    capped = measured_objective(EdrpSettings(c_max=12.0), 1.5, 6.0, 12.0, cluster_cores=9)
    assert capped.c_max == 12.0 and capped.cost_term == pytest.approx(0.15)
    unknown = measured_objective(s, None, 6.0, 12.0, 9)
    assert unknown.objective is None and unknown.response_term is None


def test_more_downtime_or_latency_scores_worse_on_one_scale():
    s = EdrpSettings()
    calm = measured_objective(s, 1.5, 6.0, 0.0, 9).objective
    stalled = measured_objective(s, 1.5, 6.0, 30.0, 9).objective
    slow = measured_objective(s, 3.0, 6.0, 0.0, 9).objective
    assert calm < stalled and calm < slow


def test_moves_and_actions_are_counted_in_the_window():
    done = [DoneAction("a", 5.0, "scale_executors", "scale_executors 2 -> 3"),
            DoneAction("a", 30.0, "replace_executor", "replace_executor 1"),
            DoneAction("b", 31.0, "replace_executor", "replace_executor 4"),
            DoneAction("b", 700.0, "scale_executors", "scale_executors 3 -> 2")]
    assert moves_and_actions(done, 0.0, 660.0) == (2, 3)
    assert moves_and_actions(done, 20.0, 800.0) == (2, 3)


# -- the config a run writes ------------------------------------------------------------------------


def test_a_run_config_pins_two_workers_on_their_hosts_with_the_policy(tmp_path):
    spec = PlacementSpec(worker_cores=(6, 3), worker_cpus=((0,), (1,)))
    path = tmp_path / "bench.yaml"
    path.write_text("apps:" + apps_yaml(spec) + "logging:\n  level: warning\n" + bench_yaml(spec, "otd"))
    cfg = load_config(path, [f"cluster.run_dir={tmp_path}"])
    assert [a.name for a in cfg.apps] == ["placement-1", "placement-2", "placement-3"]
    assert {(a.pipeline, a.min_executors, a.initial_executors, a.max_executors, a.executor_cores)
            for a in cfg.apps} == {("wordcount", 1, 1, 2, 1)}
    assert cfg.cluster.worker_hosts == ["127.0.0.2", "127.0.0.3"]
    assert [cfg.cluster.cores_of(i) for i in (1, 2)] == [6, 3]
    assert [cfg.cluster.cpus_of(i) for i in (1, 2)] == [[0], [1]]
    assert (cfg.placement.name, cfg.policy.name) == ("otd", "ds2")
    assert cfg.placement.host_cpus == {"127.0.0.2": 1, "127.0.0.3": 1}  # each worker's load is over its one CPU


# -- results.md, the plot, the command --------------------------------------------------------------


def fake_run(placement: str, imbalance_value: float, remote: int, objective: float) -> dict:
    per_app = {"placement-1": AppFigures(12.0, (6.0,), 2.5, 1.4)}
    run = summary(placement, 1, 1000.0, (60.0, 660.0), per_app, imbalance_value, remote, 4 * remote, objective)
    run.update(worker_load_imbalance_per_sample=imbalance_value + 0.2,
               worker_busy_share={"127.0.0.2": 0.9, "127.0.0.3": 0.4}, longest_stall_s=6.0, moves=2, actions=5,
               lost=0, duplicated=0, notes=["a note"],
               objective_terms=measured_objective(EdrpSettings(), 1.4, 2.5, 6.0, 9).to_dict(),
               edrp_settings=EdrpSettings().model_dump(mode="json"),
               worker_samples=[ws(float(t), 0.9, 0.4, 4, 2).to_dict() for t in range(0, 700, 10)], samples={})
    return run


def test_results_md_sets_the_runs_side_by_side_with_the_method_and_the_plot(tmp_path):
    runs = [fake_run("spark-default", 1.38, 2_000_000, 3.1), fake_run("otd", 1.05, 3_000_000, 3.0),
            fake_run("edrp", 1.2, 1_000_000, 2.9)]
    results = {"kind": "placement", "command": "sparkscale bench placement", "spec": vars_of(PlacementSpec()),
               "runs": runs, "failed_runs": [{"placement": "otd", "repeat": 2, "error": "TimeoutError('x')"}]}
    (tmp_path / "results.json").write_text(json.dumps(results))
    out = CliRunner().invoke(main, ["report", str(tmp_path)])
    assert out.exit_code == 0, out.output
    md = (tmp_path / "results.md").read_text()
    assert "| figure | spark-default | otd | edrp |" in md
    assert "| worker load imbalance (max/mean of the mean busy shares) | 1.38 | 1.05 | 1.2 |" in md
    assert "| remote shuffle read (MB) | 2.0 | 3.0 | 1.0 |" in md
    assert "ratio of the means" in md and "shuffleRemoteBytesRead" in md and "taskset" in md
    assert "- **otd #2**: TimeoutError('x')" in md and "a note" in md and "Command: `sparkscale bench placement`" in md
    assert (tmp_path / "workers.png").stat().st_size > 0
    assert "objective F" in placement_table(results)


def test_repeats_get_a_median_per_placement_and_lost_records_are_summed():
    runs = []
    for repeat, (imbalance_value, objective) in enumerate([(1.9, 0.30), (1.1, 0.20), (1.5, 0.90)], start=1):
        run = fake_run("otd", imbalance_value, 1000, objective)
        run.update(repeat=repeat, lost=1 if repeat == 3 else 0)
        runs.append(run)
    table = median_table([*runs, fake_run("edrp", 1.2, 1000, 0.25)])
    assert "| median of the repeats | otd (3 runs) | edrp (1 runs) |" in table
    assert "| worker load imbalance | 1.5 | 1.2 |" in table and "| objective F (measured) | 0.3 | 0.25 |" in table
    assert "| lost / duplicated (summed) | 1 / 0 | 0 / 0 |" in table
    assert median_table([fake_run("otd", 1.0, 0, 0.1), fake_run("edrp", 1.0, 0, 0.1)]) == ""  # one run each


def vars_of(spec: PlacementSpec) -> dict:
    from dataclasses import asdict

    return json.loads(json.dumps(asdict(spec)))


def test_the_command_refuses_an_unknown_placement_before_anything_starts(tmp_path, monkeypatch):
    def never(*_args, **_kwargs):
        raise AssertionError("the benchmark must not start")

    monkeypatch.setattr(bench, "run_placement_bench", never)
    runner = CliRunner()
    out = runner.invoke(main, ["bench", "placement", "--placements", "otd,n-storm", "--out", str(tmp_path)])
    assert out.exit_code == 2 and "n-storm" in out.output and "spark-default" in out.output
    for args, fragment in [(["--worker-cores", "6"], "2 comma-separated"), (["--worker-cores", "6,0"], "at least 1"),
                           (["--executors", "1,4,3"], "MIN <= INITIAL <= MAX"), (["--executors", "a,b,c"], "3 comma"),
                           (["--duration-s", "5"], "duration-s")]:
        out = runner.invoke(main, ["bench", "placement", *args, "--out", str(tmp_path)])
        assert out.exit_code == 2 and fragment in out.output, (args, out.output)
    assert not (tmp_path / "results.json").exists()
    out = runner.invoke(main, ["bench", "placement", "--help"])
    assert out.exit_code == 0 and "--placements" in out.output and "--worker-cores" in out.output
