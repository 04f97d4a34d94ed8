"""`sparkscale bench userjob` without Spark: the schedule of migrations, the statistics, the tables
and the results page, on hand-made records."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from click.testing import CliRunner

from sparkscale.cli import main
from sparkscale.config import load_config
from sparkscale_lab.bench import userjob
from sparkscale_lab.bench.userjob_tables import (
    CycleSample,
    MigrationRecord,
    OutputCheck,
    UserJobResults,
    alternate,
    cycle_stats,
    cycle_table,
    percentile,
    phase_columns,
    phase_table,
    render_markdown,
    schedule,
)

QUERIES = ("page_windows", "user_totals")


def test_each_query_alternates_4_8_4_across_strategies_queries_interleaved():
    steps = schedule(("ccr", "dcr"), QUERIES, 3)
    assert len(steps) == 2 * 3 * 2
    assert [(s.strategy, s.query, s.round) for s in steps[:4]] == [
        ("ccr", "page_windows", 0), ("ccr", "user_totals", 0), ("ccr", "page_windows", 1), ("ccr", "user_totals", 1)]
    for q in QUERIES:
        mine = [(s.from_partitions, s.to_partitions) for s in steps if s.query == q]
        assert mine == [(4, 8), (8, 4), (4, 8), (8, 4), (4, 8), (8, 4)]  # dcr carries on from where ccr left it
    assert [s.strategy for s in steps].count("dcr") == 6 and steps[6].strategy == "dcr"
    # A query left elsewhere starts from there; one off the alternation goes back to 8.
    started = schedule(("ccr",), QUERIES, 1, {"page_windows": 8, "user_totals": 2})
    assert [(s.from_partitions, s.to_partitions) for s in started] == [(8, 4), (2, 8)]
    assert alternate(4) == 8 and alternate(8) == 4 and alternate(6) == 8


def test_percentile_is_the_nearest_rank():
    values = [float(v) for v in range(20, 0, -1)]
    assert percentile(values, 0.9) == 18.0 and percentile(values, 0.5) == 10.0 and percentile(values, 1.0) == 20.0
    assert percentile([3.0], 0.9) == 3.0 and percentile([], 0.9) is None


def record(strategy: str, query: str, rnd: int, total: float, status: str = "done", **phases: float) -> MigrationRecord:
    return MigrationRecord(strategy, query, rnd, 4, 8, status, phases_s=dict(phases), total_s=total,
                           detail="no" if status != "done" else "")


def records() -> list[MigrationRecord]:
    why = "reads a file source: dsm stops it mid-batch"
    out = [MigrationRecord("dsm", q, 0, 4, 8, "refused", why) for q in QUERIES]
    for rnd, (a, b) in enumerate([(1.0, 10.0), (3.0, 20.0), (2.0, 30.0)]):
        out.append(record("ccr", "page_windows", rnd, 10 * a, paused=0.1, stopped=a, repartitioned=b))
        out.append(record("ccr", "user_totals", rnd, 10 * b, paused=0.2, stopped=b, repartitioned=a))
    out.append(record("dcr", "page_windows", 0, 5.0, drained=1.5, stopped=0.5))
    out.append(record("dcr", "user_totals", 0, 9.0, status="rolled_back"))
    return out


def rows(table: str) -> dict[tuple[str, str], list[str]]:
    lines = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| strategy")]
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines]
    return {(c[0], c[1]): c[2:] for c in cells}


def test_the_phase_table_gives_medians_per_query_and_pooled_with_n_and_failures():
    columns = phase_columns(("ccr", "dcr"))
    assert columns == ["paused", "drained", "stopped", "captured", "repartitioned", "restarted", "resumed", "restored"]
    assert phase_columns(("dcr", "ccr")) == ["paused", "drained", "stopped", "captured", "repartitioned", "restarted",
                                            "restored", "resumed"]
    table = phase_table(records(), ("ccr", "dcr"), QUERIES)
    header = table.splitlines()[0]
    assert "| n |" in header and "stopped (s)" in header and header.endswith("| total (s) | failed |")
    got = rows(table)
    index = {name: i for i, name in enumerate(["n", *[f"{c} (s)" for c in columns], "total (s)", "failed"])}
    pw, ut, pooled = got[("ccr", "page_windows")], got[("ccr", "user_totals")], got[("ccr", "pooled")]
    assert pw[index["n"]] == "3" and pw[index["stopped (s)"]] == "2.00" and pw[index["repartitioned (s)"]] == "20.00"
    assert ut[index["stopped (s)"]] == "20.00" and ut[index["total (s)"]] == "200.00"
    assert pooled[index["n"]] == "6" and pooled[index["stopped (s)"]] == "6.50"  # median of 1,2,3,10,20,30
    assert pooled[index["paused (s)"]] == "0.15" and pooled[index["failed"]] == "0"
    assert pw[index["drained (s)"]] == "n/a" and pw[index["captured (s)"]] == "-"  # not ccr's; no figure
    dcr = got[("dcr", "pooled")]
    assert dcr[index["n"]] == "1" and dcr[index["failed"]] == "1" and dcr[index["drained (s)"]] == "1.50"
    assert dcr[index["captured (s)"]] == "n/a" and got[("dcr", "user_totals")][index["stopped (s)"]] == "-"
    assert not any(key[0] == "dsm" for key in got)  # refused: not counted


def cycles() -> list[CycleSample]:
    out = []
    for i in range(10):
        out.append(CycleSample("clicks", 2, 0.9 + 0.01 * i, 0.05, 0.5))
        out.append(CycleSample("wc", 1, 0.7 + 0.01 * i, 0.05, 0.5))
    out.append(CycleSample("wc", 0, 0.1, 0.0, 0.0, error="app 'wc' is not running"))
    return out


def test_the_cycle_table_compares_two_queries_with_one():
    stats = cycle_stats(cycles(), "clicks")
    assert stats.queries == 2 and stats.n == 10 and stats.errors == 0
    assert round(stats.cycle_median_s, 3) == 0.995 and round(stats.cycle_p90_s, 3) == 1.03
    assert round(stats.without_host_median_s, 3) == 0.495 and stats.host_sample_median_s == 0.5
    wc = cycle_stats(cycles(), "wc")
    assert wc.n == 10 and wc.errors == 1 and wc.queries == 1
    got = rows(cycle_table(cycles(), ["clicks", "wc"]))
    assert got[("clicks", "2")][1:3] == ["0.995", "1.030"]
    ratio = next(v for k, v in got.items() if k[0] == "ratio clicks / wc")
    assert ratio[1:4] == [f"{0.995 / 0.795:.2f}", f"{1.03 / 0.83:.2f}", f"{0.495 / 0.295:.2f}"]


def results(check: OutputCheck | None) -> UserJobResults:
    spec = {**asdict(userjob.UserJobSpec()), "strategies": ["dsm", "dcr", "ccr"], "script_name": "clickstream.py",
            "app": "clicks", "policy": "ds2"}
    return UserJobResults("sparkscale bench userjob --repeat 3", "2025-01-02T03:04:05+00:00", "Linux x86_64, 2 CPUs",
                          spec, list(QUERIES), ["dcr", "ccr"], ["dsm"], ["clicks", "wc"], records(), cycles(), check)


def test_the_page_says_loudly_when_data_was_lost_and_names_command_and_machine():
    good = OutputCheck(True, "clickcheck OK", input_records=1200)
    page = render_markdown(results(good))
    assert not page.startswith("**") and "output verified: lost 0" in page
    assert "- Refused (not counted): dsm: refused for page_windows, user_totals: reads a file source" in page
    assert "dcr user_totals 4 -> 8 (round 1): rolled_back" in page
    assert "Command: `sparkscale bench userjob --repeat 3`" in page
    assert page.rstrip().endswith("Measured 2025-01-02T03:04:05+00:00 on Linux x86_64, 2 CPUs.")
    assert "| ratio clicks / wc |" in page and "| ccr | pooled | 6 |" in page
    bad = OutputCheck(False, "clickcheck FAILED", input_records=1200, windows_lost=2, users_duplicated=1)
    page = render_markdown(results(bad))
    assert page.startswith("**DATA LOST OR DUPLICATED") and "lost 2 (2 windows, 0 users), duplicated 1" in page
    assert render_markdown(results(None)).startswith("**The output was not verified")


def test_results_round_trip_through_json(tmp_path):
    original = results(OutputCheck(True, "ok", input_records=5))
    page = userjob.save(original, str(tmp_path / "sub" / "userjob"))
    assert (tmp_path / "sub" / "userjob.md").read_text() == page
    loaded = UserJobResults.from_dict(json.loads((tmp_path / "sub" / "userjob.json").read_text()))
    assert loaded == original


def test_the_apps_load_as_a_config(tmp_path):
    spec = userjob.UserJobSpec(script=str(userjob.DEFAULT_SCRIPT))
    path = tmp_path / "bench.yaml"
    path.write_text("apps:" + spec.apps_yaml(tmp_path / "in", tmp_path / "out", tmp_path / "chk")
                    + userjob.MIGRATION_YAML)
    cfg = load_config(path)
    clicks, wc = cfg.app("clicks"), cfg.app("wc")
    assert clicks.runs_script and Path(clicks.script) == userjob.DEFAULT_SCRIPT.resolve()
    assert clicks.args[clicks.args.index("--input") + 1] == str(tmp_path / "in")
    assert clicks.spark_conf == {"spark.sql.shuffle.partitions": "4"} and clicks.max_executors == 3
    assert wc.pipeline == "wordcount" and wc.trigger_interval_s == spec.trigger_s
    assert cfg.migration.phase_timeout_s == 120


def test_cycles_are_interleaved_and_no_app_is_always_first(monkeypatch):
    order: list[str] = []
    monkeypatch.setattr(userjob, "time_cycle", lambda _cfg, app, _opts: order.append(app) or CycleSample(
        app, 1, 0.1, 0.0, 0.0))
    samples = userjob.time_cycles(None, ["clicks", "wc"], 3, None)
    assert order == ["clicks", "wc", "wc", "clicks", "clicks", "wc"] and len(samples) == 6


def test_bench_userjob_refuses_unknown_strategies(tmp_path):
    out = CliRunner().invoke(main, ["bench", "userjob", "--strategies", "ccr,magic", "--out", str(tmp_path / "u")])
    assert out.exit_code == 2 and "magic" in out.output
