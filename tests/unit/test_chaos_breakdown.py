"""`sparkscale bench chaos`'s recovery breakdown (detection, replacement, the state reload) from
synthetic executor lists, samples and progress reports, and its variants (which runs, which app
config). Nothing here starts a server."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from sparkscale.cli import main
from sparkscale.config import load_config
from sparkscale.monitors.progress_reports import ProgressReport
from sparkscale_lab.bench.chaos import CHAOS_YAML, ChaosSpec, app_name, app_yaml, planned_runs
from sparkscale_lab.bench.chaos_breakdown import (
    Breakdown,
    ExecutorSpan,
    breakdown,
    count_drop,
    executor_loss,
    parse_executor_spans,
    reload_figures,
)
from sparkscale_lab.bench.chaos_variants import CHANGELOG_CONF, VARIANT_NAMES, plan_runs, run_label
from sparkscale_lab.bench.timeline import Sample

T0 = 1_900_000_000.0  # the run's start, epoch seconds
FAULT = T0 + 70.0


def span(executor: str, added: float, removed: float | None = None, why: str | None = None) -> ExecutorSpan:
    return ExecutorSpan(executor, added, removed, why)


def test_parse_all_executors_keeps_dead_ones_and_leaves_the_driver_out():
    data = [{"id": "driver", "addTime": "2030-01-01T00:00:00.000GMT"},
            {"id": "0", "isActive": False, "addTime": "2030-01-01T00:00:01.000GMT",
             "removeTime": "2030-01-01T00:01:10.250GMT", "removeReason": "Remote RPC client disassociated."},
            {"id": "2", "isActive": True, "addTime": "2030-01-01T00:01:14.500GMT"}]
    dead, new = parse_executor_spans(data)
    assert (dead.id, dead.remove_reason, new.id, new.removed_at_s) == ("0", "Remote RPC client disassociated.", "2",
                                                                       None)
    assert dead.removed_at_s is not None and new.added_at_s - dead.removed_at_s == pytest.approx(4.25)
    with pytest.raises(ValueError, match="expected a JSON list, got dict"):
        parse_executor_spans({"not": "a list"})


def test_executor_loss_is_the_first_removal_after_the_fault_then_the_first_executor_added():
    spans = [span("0", T0, FAULT - 30, "decommissioned earlier"),  # before the fault: not this loss
             span("1", T0, FAULT + 0.8, "worker lost"), span("2", T0, FAULT + 0.9, "worker lost"),
             span("3", T0 + 1), span("4", FAULT + 6.5), span("5", FAULT + 9.0)]
    assert executor_loss(spans, FAULT) == (FAULT + 0.8, "worker lost", FAULT + 6.5)
    assert executor_loss(spans[:4], FAULT) == (FAULT + 0.8, "worker lost", None)  # no replacement came
    assert executor_loss([span("3", T0), span("4", FAULT + 5)], FAULT) == (None, None, None)  # a scale-up, no loss


def sample(t: float, executors: int | None) -> Sample:
    return Sample(t, 0, 0, None, executors, executors, 4)


def test_count_drop_finds_the_drop_and_the_rise_skipping_unknown_counts():
    samples = [sample(68, 2), sample(70, 2), sample(71, None), sample(72, 1), sample(73, 1), sample(77, 2)]
    assert count_drop(samples, 70.0) == (72, 77)
    assert count_drop(samples[:5], 70.0) == (72, None)
    assert count_drop([sample(71, 1)], 70.0) == (None, None)  # no count before the fault
    assert count_drop([sample(69, 2), sample(71, 2)], 70.0) == (None, None)


def report(batch: int, ended: float, loaded: int | None = None, load_ms: float | None = None,
           replay_ms: float | None = None, files: int | None = None, duration_ms: float = 900.0,
           run: str = "r1") -> ProgressReport:
    return ProgressReport(batch_id=batch, run_id=run, num_input_rows=1000, batch_duration_ms=duration_ms,
                          published_at_s=ended, state_loaded_from_dfs=loaded, state_load_ms=load_ms,
                          state_replay_ms=replay_ms, state_replayed_files=files)


def test_reload_figures_sum_the_batches_that_loaded_state_after_the_fault():
    reports = [
        report(10, FAULT - 1, loaded=0, load_ms=3),
        report(11, FAULT + 9, loaded=2, load_ms=1500, replay_ms=200, files=6, duration_ms=8200),  # running at it
        report(11, FAULT + 9.5, loaded=2, load_ms=1500),  # the same batch reported again: once
        report(12, FAULT + 10, loaded=0, load_ms=4),
        report(13, FAULT + 12, loaded=1, load_ms=700, replay_ms=50, files=3, duration_ms=2100),  # a partition moved
        report(14, FAULT + 60, loaded=4, load_ms=9000),  # after the recovery: not the fault's
    ]
    got = reload_figures(reports, FAULT, until=FAULT + 40)
    assert got == Breakdown(reload_ms=2200, loaded_from_dfs=3, replay_ms=250, replayed_files=9,
                            reload_batches=(11, 13), reload_batch_ms=8200, pre_fault_batch_ms=900.0)
    nothing = reload_figures([report(12, FAULT + 10, loaded=0, load_ms=4)], FAULT, FAULT + 40)
    assert (nothing.reload_ms, nothing.loaded_from_dfs, nothing.reload_batches) == (0.0, 0, ())
    assert reload_figures(reports[:1], FAULT, FAULT + 40) == Breakdown(pre_fault_batch_ms=900.0)  # none after it


def test_the_yardstick_is_the_median_batch_of_the_minute_before_the_fault():
    reports = [report(1, FAULT - 90, duration_ms=9000), report(2, FAULT - 50, duration_ms=800),
               report(3, FAULT - 20, duration_ms=1200), report(4, FAULT - 5, duration_ms=1000),
               report(5, FAULT + 4, duration_ms=6000)]
    got = reload_figures(reports, FAULT, FAULT + 40)
    assert (got.pre_fault_batch_ms, got.reload_batch_ms) == (1000, 6000)  # batch 1 is older than the minute


def test_without_the_loaded_from_dfs_metric_the_first_batch_after_the_fault_counts():
    reports = [report(11, FAULT + 4, load_ms=800, duration_ms=5000), report(12, FAULT + 5, load_ms=2)]
    got = reload_figures(reports, FAULT, FAULT + 40)
    assert (got.reload_ms, got.loaded_from_dfs, got.reload_batches, got.reload_batch_ms) == (800, None, (11,), 5000)
    assert reload_figures([report(11, FAULT + 4)], FAULT, FAULT + 40).reload_ms is None  # no figure at all


def test_breakdown_takes_executor_times_from_the_driver_else_from_the_samples():
    spans = [span("0", T0, FAULT + 1.234, "Remote RPC client disassociated."), span("2", FAULT + 7.5)]
    reports = [report(11, FAULT + 9, loaded=2, load_ms=1500)]
    samples = [sample(69, 2), sample(72, 1), sample(78, 2)]
    got = breakdown(spans, samples, reports, T0, FAULT, FAULT + 40, count_fallback=True)
    assert (got.detected_s, got.replaced_s, got.detected_by) == (1.23, 7.5, "Remote RPC client disassociated.")
    assert (got.reload_ms, got.loaded_from_dfs, got.reload_batches) == (1500, 2, (11,))
    fallback = breakdown(None, samples, reports, T0, FAULT, FAULT + 40, count_fallback=True)
    assert (fallback.detected_s, fallback.replaced_s, fallback.detected_by) == (2, 8, "executor count (samples)")
    assert fallback.reload_ms == 1500
    unknown = breakdown(None, samples, [], T0, FAULT, FAULT + 40, count_fallback=False)  # e.g. driver_kill
    assert unknown == Breakdown()
    assert unknown.to_dict()["reload_batches"] == [] and set(got.to_dict()) == set(Breakdown.__dataclass_fields__)


def test_a_fault_that_keeps_every_executor_reads_no_executor_times_from_the_driver(monkeypatch):
    # after a driver_kill the driver's executors are the new app's: its later scale-in is no detection
    from sparkscale_lab.bench import chaos_breakdown as cb

    asked: list[str] = []
    monkeypatch.setattr(cb, "executor_spans", lambda cfg, app: asked.append(app) or [span("0", T0, FAULT + 30, "x")])
    monkeypatch.setattr(cb, "connect_as", lambda cfg, identity: SimpleNamespace(close=lambda: None))
    monkeypatch.setattr(cb, "read_progress", lambda *a, **k: [])
    monkeypatch.setattr(cb, "workload", lambda name: SimpleNamespace(query="q"))
    cfg = SimpleNamespace(redis=SimpleNamespace(key_prefix="p:"),
                          app=lambda name: SimpleNamespace(pipeline="wordcount"))
    samples = [sample(69, 2), sample(72, 1)]
    kept = cb.measure(cfg, "a", samples, T0, FAULT, FAULT + 40, loses_executors=False)
    assert asked == [] and (kept.detected_s, kept.replaced_s) == (None, None)
    lost = cb.measure(cfg, "a", samples, T0, FAULT, FAULT + 40, loses_executors=True)
    assert asked == ["a"] and lost.detected_s == 30


def test_variants_run_only_for_the_faults_that_kill_executors():
    kills = {"executor_kill": True, "worker_kill": True, "driver_kill": False}
    assert plan_runs(("executor_kill", "driver_kill", "worker_kill"), ("default", "changelog", "spare"), kills) == [
        ("executor_kill", "default"), ("executor_kill", "changelog"), ("executor_kill", "spare"),
        ("driver_kill", "default"),
        ("worker_kill", "default"), ("worker_kill", "changelog"), ("worker_kill", "spare")]
    assert plan_runs(("driver_kill",), ("spare",), kills) == [("driver_kill", "default")]
    assert planned_runs(ChaosSpec(faults=("driver_kill", "redis_restart"))) == [
        ("driver_kill", "default"), ("redis_restart", "default")]  # the short test's runs, as before
    with pytest.raises(KeyError, match="unknown variant 'replica'"):
        planned_runs(ChaosSpec(faults=("executor_kill",), variants=("replica",)))
    assert VARIANT_NAMES == ("default", "changelog", "spare") and ChaosSpec().variants == ("default",)


def test_each_variant_is_its_own_app_with_its_settings(tmp_path):
    assert (run_label("worker_kill"), run_label("worker_kill", "spare")) == ("worker_kill", "worker_kill-spare")
    assert (app_name("worker_kill"), app_name("worker_kill", "changelog")) == (
        "chaos-worker-kill", "chaos-worker-kill-changelog")
    apps = {}
    for variant in VARIANT_NAMES:
        path = tmp_path / f"{variant}.yaml"
        path.write_text("apps:" + app_yaml(app_name("executor_kill", variant), variant) + CHAOS_YAML)
        apps[variant] = load_config(path, []).app(app_name("executor_kill", variant))
    shape = {v: (a.min_executors, a.initial_executors, a.max_executors, a.shuffle_partitions) for v, a in apps.items()}
    assert shape == {"default": (2, 2, 3, 4), "changelog": (2, 2, 3, 4), "spare": (3, 3, 4, 4)}
    assert apps["changelog"].spark_conf == {CHANGELOG_CONF: "true"}
    assert apps["default"].spark_conf == {} and apps["spare"].spark_conf == {}


def test_bench_chaos_refuses_unknown_variants_before_starting_anything(tmp_path):
    out = CliRunner().invoke(main, ["bench", "chaos", "--variants", "default,replica", "--out", str(tmp_path)])
    assert out.exit_code == 2 and "replica" in out.output
    assert not (tmp_path / "results.json").exists()
    help_text = CliRunner().invoke(main, ["bench", "chaos", "--help"]).output
    assert "--variants" in help_text and "changelog" in help_text and "spare" in help_text
