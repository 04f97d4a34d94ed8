"""`sparkscale report DIR` and the bench commands' argument checks, on hand-made results."""

from __future__ import annotations

import json

from click.testing import CliRunner

from sparkscale.cli import main
from sparkscale_lab.bench.measures import ScalingAction, SloLimits, measure, segments
from sparkscale_lab.bench.timeline import Sample
from sparkscale_lab.pipelines.profiles import parse_profile

PROFILE = "steps:10@20s,40@20s,10@20s"


def fake_run(controller: str, repeat: int, executors: int, lost: int = 0) -> dict:
    samples = [Sample(t, 10 * t, 10 * t - 5, 400.0, executors, executors, 4) for t in range(0, 70, 2)]
    actions = [ScalingAction(21.0, "scale_executors", 1, 2)] if controller == "ds2" else []
    m = measure(samples, actions, segments(parse_profile(PROFILE)), SloLimits(1000), lambda r: 1 if r < 20 else 2)
    return {"controller": controller, "repeat": repeat, "started_at": 0, "samples": [s.to_dict() for s in samples],
            "actions": [a.to_dict() for a in actions], "measures": m.to_dict(), "lost": lost, "duplicated": 0,
            "total_records": 600, "notes": []}


def results(tmp_path) -> dict:
    data = {"command": "sparkscale bench scaling --repeat 2", "calibration": {"10": 1, "40": 2},
            "spec": {"workload": "dag-linear", "profile": PROFILE, "controllers": ["static", "ds2"], "repeat": 2,
                     "seed": 7, "min_executors": 1, "max_executors": 4},
            "runs": [fake_run("static", 1, 4), fake_run("ds2", 1, 2), fake_run("static", 2, 4),
                     fake_run("ds2", 2, 1, 3)]}
    (tmp_path / "results.json").write_text(json.dumps(data))
    return data


def test_report_writes_the_table_and_a_timeline_per_run(tmp_path):
    results(tmp_path)
    out = CliRunner().invoke(main, ["report", str(tmp_path)])
    assert out.exit_code == 0, out.output
    table = (tmp_path / "results.md").read_text()
    rows = {line.split("|")[1].strip(): line for line in table.splitlines() if line.startswith("| ")}
    assert set(rows) >= {"controller", "static", "ds2"}
    # static: 4 executors for 60 s = 240 core-s over a need of 1*40 + 2*20 = 80: 3x; ds2 ran on 2, then on 1.
    assert "| 240 |" in rows["static"] and "| 3 |" in rows["static"]
    assert "| 90 (60–120) | 1.12 (0.75–1.5) |" in rows["ds2"]  # core-s and over-provisioning: median (range)
    assert rows["ds2"].rstrip(" |").endswith("| 3 | 0")  # lost summed over runs, then duplicated
    assert "Command: `sparkscale bench scaling --repeat 2`" in table
    for name in ("timeline-static-1.png", "timeline-ds2-2.png", "executors.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_of_a_directory_without_results_exits_2(tmp_path):
    out = CliRunner().invoke(main, ["report", str(tmp_path)])
    assert out.exit_code == 2 and "results.json does not exist" in out.output


def test_bench_scaling_refuses_unknown_controllers_and_endless_profiles(tmp_path):
    runner = CliRunner()
    out = runner.invoke(main, ["bench", "scaling", "--controllers", "ds2,magic", "--out", str(tmp_path)])
    assert out.exit_code == 2 and "magic" in out.output
    out = runner.invoke(main, ["bench", "scaling", "--profile", "constant:10", "--out", str(tmp_path)])
    assert out.exit_code == 2 and "must end" in out.output
    assert not (tmp_path / "results.json").exists()


def test_report_of_a_migration_benchmark_tables_the_medians_and_plots_each_strategy(tmp_path):
    samples = [Sample(t, 100 * t, 100 * t - 50, 300.0, 2, 2, 4 if t < 20 else 8).to_dict() for t in range(0, 40)]

    def migration(direction: str, to: int, restore_s: float) -> dict:
        return {"direction": direction, "to": to, "phases": {"requested": 10.0, "done": 16.0},
                "figures": {"restore_s": restore_s, "rebalance_s": 2.0, "captured_records": 250}}

    data = {"kind": "migration", "command": "sparkscale bench migration --repeat 2",
            "spec": {"workload": "dag-star", "rate": 100},
            "strategies": [{"strategy": "ccr", "samples": samples, "lost": 0, "duplicated": 0, "total_expected": 3900,
                            "migrations": [migration("scale-out", 8, 5.0), migration("scale-in", 4, 6.0),
                                           migration("scale-out", 8, 7.0), migration("scale-in", 4, 6.0)]}]}
    (tmp_path / "results.json").write_text(json.dumps(data))
    out = CliRunner().invoke(main, ["report", str(tmp_path)])
    assert out.exit_code == 0, out.output
    rows = [line for line in (tmp_path / "results.md").read_text().splitlines() if line.startswith("| ccr")]
    assert rows[0].startswith("| ccr | scale-out | 2 | 6.0 | - | - | 2.0 |")  # restore_s median of 5 and 7
    assert rows[1].startswith("| ccr | scale-in | 2 | 6.0 |")
    assert (tmp_path / "timeline-ccr.png").read_bytes()[:4] == b"\x89PNG"


def test_bench_migration_refuses_unknown_strategies_and_workloads(tmp_path):
    runner = CliRunner()
    out = runner.invoke(main, ["bench", "migration", "--strategies", "ccr,teleport", "--out", str(tmp_path)])
    assert out.exit_code == 2 and "teleport" in out.output
    out = runner.invoke(main, ["bench", "migration", "--workload", "wordcount", "--out", str(tmp_path)])
    assert out.exit_code == 2 and "dag-star" in out.output
    assert not (tmp_path / "results.json").exists()


def case_run(case: str, profile: str, controller: str, repeat: int, backlog: int, latency_ms: float | None,
             executors: int, lost: int = 0) -> dict:
    prof = parse_profile(profile)
    samples = [Sample(t, int(prof.records_by(t)), int(prof.records_by(t)) - backlog, 400.0, executors, executors, 4,
                      None, latency_ms) for t in range(0, 62, 2)]
    limits = SloLimits(1000, backlog_s=10, latency_limit_ms=10_000)
    m = measure(samples, [], segments(prof), limits, lambda r: 1 if r < 20 else 2, load_at=prof.rate_at)
    return {"case": case, "workload": case.rsplit("-", 1)[0], "profile": profile, "controller": controller,
            "repeat": repeat, "started_at": 0, "samples": [s.to_dict() for s in samples], "actions": [],
            "measures": m.to_dict(), "lost": lost, "duplicated": 0, "total_records": 600, "notes": []}


def test_report_of_a_matrix_has_a_table_targets_and_plots_per_case(tmp_path):
    sine = "sine:15,5,30s@60s"
    cases = [{"name": "dag-linear-steps", "workload": "dag-linear", "profile": PROFILE, "backlog_basis": "counted",
              "latency_source": "stream entry times", "trigger_s": 1.0},
             {"name": "clicks-file-sine", "workload": "clicks-file", "profile": sine, "backlog_basis": "stated",
              "latency_source": "file landing times", "trigger_s": 2.0}]
    runs = []
    for case, profile in (("dag-linear-steps", PROFILE), ("clicks-file-sine", sine)):
        runs += [case_run(case, profile, "static", 1, 50, 3000.0, 4),
                 case_run(case, profile, "spark-dra", 1, 300, 12_000.0, 4),  # 30 s of input waiting at 10/s
                 case_run(case, profile, "ds2", 1, 120, None if case.startswith("clicks") else 11_000.0, 2,
                          lost=1 if case.startswith("clicks") else 0)]
    data = {"command": "sparkscale bench scaling --quick", "cases": cases, "runs": runs, "failed_runs": [
                {"case": "clicks-file-sine", "controller": "ds2", "repeat": 2, "error": "RuntimeError('boom')"}],
            "calibration": {"dag-linear": {"10": 1, "40": 2}, "clicks-file": {"10": 1, "20": 2}},
            "spec": {"controllers": ["static", "spark-dra", "ds2"], "seed": 7, "min_executors": 1,
                     "max_executors": 4, "slo_backlog_s": 10, "slo_latency_s": 10}}
    (tmp_path / "results.json").write_text(json.dumps(data))
    out = CliRunner().invoke(main, ["report", str(tmp_path)])
    assert out.exit_code == 0, out.output
    page = (tmp_path / "results.md").read_text()
    dag, clicks = page.split("## clicks-file-sine")
    assert dag.startswith("## dag-linear-steps: `dag-linear` under `steps:10@20s,40@20s,10@20s`")
    rows = {line.split("|")[1].strip(): line for line in dag.splitlines() if line.startswith("| ")}
    # 10 s of input at the rate measured over the last 10 s (the profile's before 10 s): 100 records at
    # 10/s, 160 at 22 s, 220 at 24 s ... 400 at 30-40 s, then 340, 280, 220, 160 and 100 at 50 s.
    # ds2's 120 waiting: behind at 0-20 s and 50-58 s: 22 + 10 = 32 s; its 11 s latency: all 60 s.
    # spark-dra's 300: behind at 0-26 s and 44-58 s: 28 + 16 = 44 s. static's 50: never.
    assert rows["ds2"].startswith("| ds2 | 1 | 32 | 60 |")
    assert rows["spark-dra"].startswith("| spark-dra | 1 | 44 | 60 |")
    assert rows["static"].startswith("| static | 1 | 0 | 0 |")
    assert "| backlog-SLO seconds <= static's | ds2 32 s, static 0 s | **no** | 32 s over |" in dag
    assert ("| backlog-SLO seconds <= half of spark-dra's | ds2 32 s, spark-dra 44 s (half: 22 s) | **no** "
            "| 10 s over |") in dag
    assert "stream entry times" in dag and "counted (records arrived" in dag
    clicks_rows = {line.split("|")[1].strip(): line for line in clicks.splitlines() if line.startswith("| ")}
    assert clicks_rows["ds2"].split("|")[4].strip() == "n/a"  # no latency sampled for it
    assert ("| nothing lost or duplicated | 1 lost, 0 duplicated over 1 run(s) | **no** | 1 lost, 0 duplicated |"
            in clicks)
    assert "not judged: the load changes continuously" in clicks and "stated by the app's progress reports" in clicks
    assert "ds2 run 2 FAILED: RuntimeError('boom')" in clicks
    for name in ("timeline-dag-linear-steps-ds2-1.png", "timeline-clicks-file-sine-static-1.png",
                 "executors-dag-linear-steps.png", "executors-clicks-file-sine.png"):
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"
    assert not (tmp_path / "executors.png").exists()


def test_bench_scaling_checks_cases_before_running(tmp_path):
    runner = CliRunner()
    out = runner.invoke(main, ["bench", "scaling", "--case", "clicks-file", "--out", str(tmp_path)])
    assert out.exit_code == 2 and "WORKLOAD=PROFILE" in out.output
    out = runner.invoke(main, ["bench", "scaling", "--case", "teleport=steps:1@1s", "--out", str(tmp_path)])
    assert out.exit_code == 2 and "teleport" in out.output
    out = runner.invoke(main, ["bench", "scaling", "--case", "dag-linear=steps:1@1s", "--workload", "dag-linear",
                               "--out", str(tmp_path)])
    assert out.exit_code == 2 and "not both" in out.output
    out = runner.invoke(main, ["bench", "scaling", "--case", "clicks-file=sine:10,5,60s", "--out", str(tmp_path)])
    assert out.exit_code == 2 and "must end" in out.output
    assert not (tmp_path / "results.json").exists()


def test_bench_scaling_defaults_to_the_whole_matrix_and_quick_to_one_short_run(tmp_path, monkeypatch):
    from sparkscale_lab.bench import report, scaling

    specs = []
    monkeypatch.setattr(scaling, "run_bench", lambda spec, out, command, resume=False: specs.append(spec))
    monkeypatch.setattr(report, "render", lambda out: "table")
    runner = CliRunner()
    out = runner.invoke(main, ["bench", "scaling", "--out", str(tmp_path)])
    assert out.exit_code == 0, out.output
    full = specs.pop()
    assert [(c.name, c.profile) for c in full.cases] == [
        ("dag-linear-steps", "steps:15@45s,60@90s,15@90s"), ("clicks-file-steps", "steps:15@45s,60@90s,15@90s"),
        ("clicks-file-sine", "sine:37.5,22.5,120s@240s")]
    assert full.controllers == ("static", "spark-dra", "threshold", "dhalion", "ds2-baseline", "ds2")
    assert full.repeat == 3 and full.calibrate and full.calibration_trial_s == 60 and full.warmup_s == 20
    out = runner.invoke(main, ["bench", "scaling", "--quick", "--out", str(tmp_path)])
    assert out.exit_code == 0, out.output
    quick = specs.pop()
    assert [c.name for c in quick.cases] == ["dag-linear-steps"] and quick.controllers == ("ds2",)
    assert quick.repeat == 1 and not quick.calibrate and quick.cases[0].profile == "steps:15@30s,60@60s,15@45s"
    out = runner.invoke(main, ["bench", "scaling", "--quick", "--workload", "clicks-file", "--controllers",
                               "static,ds2", "--out", str(tmp_path)])
    quick_clicks = specs.pop()
    assert [c.name for c in quick_clicks.cases] == ["clicks-file-steps"]
    assert quick_clicks.controllers == ("static", "ds2") and quick_clicks.repeat == 1
    # Cases given one by one; the same profile twice gets numbered names.
    out = runner.invoke(main, ["bench", "scaling", "--case", "dag-linear=steps:15@45s,60@90s,15@90s", "--case",
                               "dag-linear=steps:15@20s,60@20s", "--out", str(tmp_path)])
    assert [c.name for c in specs.pop().cases] == ["dag-linear-steps", "dag-linear-steps-2"]
    # The memory row under its own profile; the baseline comparison alone.
    out = runner.invoke(main, ["bench", "scaling", "--workload", "memory-state", "--controllers",
                               "static,ds2-baseline,ds2", "--out", str(tmp_path)])
    assert out.exit_code == 0, out.output
    memory = specs.pop()
    assert [(c.name, c.profile) for c in memory.cases] == [("memory-state-steps", "steps:60@100s,10@120s")]
    assert memory.controllers == ("static", "ds2-baseline", "ds2")
