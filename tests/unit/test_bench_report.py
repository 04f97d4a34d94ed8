"""`sparkscale report DIR` and the bench commands' argument checks, on hand-made results."""

from __future__ import annotations

import json

from click.testing import CliRunner

from sparkscale.bench.measures import ScalingAction, SloLimits, measure, segments
from sparkscale.bench.timeline import Sample
from sparkscale.cli import main
from sparkscale.pipeline.profiles import parse_profile

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
