"""The scaling benchmark's ds2-baseline row and memory row (issue 33): the daemon settings each
controller runs with, the memory case's definition and sizing, how an out-of-memory is recognised,
and the report's baseline and out-of-memory columns. No Spark."""

from __future__ import annotations

import json
import math

import pytest
import yaml
from click.testing import CliRunner

from sparkscale.cli import main
from sparkscale.config import load_config
from sparkscale.monitors.spark_rest import SparkRestError
from sparkscale_lab.bench.chaos_breakdown import ExecutorSpan
from sparkscale_lab.bench.measures import ScalingAction, SloLimits, measure, segments
from sparkscale_lab.bench.memory_state import HDFS_PROVIDER, MemoryStateSizing, OomWatch, is_oom, oom_losses
from sparkscale_lab.bench.scaling import BenchSpec
from sparkscale_lab.bench.scaling_controllers import (
    CONTROLLERS,
    MAX_STATE_MEMORY_FRACTION,
    daemon_settings,
)
from sparkscale_lab.bench.scaling_workloads import AppShape, Case, case_controllers, case_info, make_workload
from sparkscale_lab.bench.timeline import Sample
from sparkscale_lab.pipelines.profiles import parse_profile
from sparkscale_lab.pipelines.workloads.memory_state import COST_MS_CONF, STATE_BYTES_CONF, expected_output


def test_ds2_baseline_runs_every_stability_setting_at_its_old_value():
    cfg = load_config(None, daemon_settings("ds2-baseline", 10.0))
    g, p = cfg.guards, cfg.policy
    assert p.name == "ds2"
    assert p.utilization_band is False and g.startup_grace_batches == 0
    assert g.no_scale_down_while_draining is False and g.max_direction_changes_per_hour is None
    assert g.ineffective_scale_up_fraction is None and g.idle_executors_task_time_fraction is None
    assert g.max_state_memory_fraction is None and g.gc_time_fraction_max is None
    assert p.section("ds2").restart_aware is False and p.section("ds2").payback_horizon_s is None
    assert p.memory.recommend is False and p.memory.apply is False
    # The product's defaults differ where issue 33 changed them: the baseline really turns them off.
    defaults = load_config(None)
    assert defaults.policy.utilization_band is True and defaults.guards.startup_grace_batches == 3


def test_ds2_runs_the_product_defaults_plus_the_guards_the_benchmark_chooses():
    cfg = load_config(None, daemon_settings("ds2", 15.0))
    g, p = cfg.guards, cfg.policy
    assert p.name == "ds2" and p.utilization_band is True and g.startup_grace_batches == 3
    assert g.no_scale_down_while_draining is True and g.backlog_slo_s == 15.0  # the run's own SLO
    assert g.max_direction_changes_per_hour == 3 and g.ineffective_scale_up_fraction == 0.3
    assert g.idle_executors_task_time_fraction == 0.5
    assert g.max_state_memory_fraction == MAX_STATE_MEMORY_FRACTION
    assert p.section("ds2").restart_aware is False  # the product's default


def test_ds2_restart_aware_is_ds2_with_the_restart_aware_catch_up_and_runs_only_when_asked():
    ds2 = load_config(None, daemon_settings("ds2", 10.0))
    cfg = load_config(None, daemon_settings("ds2-restart-aware", 10.0))
    assert cfg.policy.section("ds2").restart_aware is True
    assert cfg.guards == ds2.guards and cfg.policy.utilization_band is ds2.policy.utilization_band
    assert "ds2-restart-aware" not in CONTROLLERS  # not in a default benchmark
    runner = CliRunner()
    bad = runner.invoke(main, ["bench", "scaling", "--controllers", "ds2-restarts", "--out", "unused"])
    assert bad.exit_code == 2 and "ds2-restart-aware" in bad.output  # named among the known ones


def test_other_daemons_get_their_policy_alone_and_static_none():
    assert daemon_settings("threshold", 10.0) == ["policy.name=threshold"]
    assert daemon_settings("dhalion", 10.0) == ["policy.name=dhalion"]
    for controller in ("static", "spark-dra"):
        with pytest.raises(ValueError, match="runs no daemon"):
            daemon_settings(controller, 10.0)
    assert CONTROLLERS.index("ds2-baseline") < CONTROLLERS.index("ds2")  # interleaved, baseline first


def test_the_memory_case_starts_spread_with_its_state_on_the_heap():
    wl = make_workload("memory-state", ".")
    (app,) = yaml.safe_load("apps:" + wl.apps_yaml(AppShape(1, 4, 1)))["apps"]
    assert app["pipeline"] == "memory_state" and app["executor_memory_mb"] == 512
    assert app["initial_executors"] == 4 and app["min_executors"] == 1  # spread over the maximum at the start
    assert app["trigger_interval_s"] == 10 and wl.trigger_s == 10.0  # the stateful tasks' fixed cost spread
    assert app["spark_conf"]["spark.sql.streaming.stateStore.providerClass"] == HDFS_PROVIDER
    assert app["spark_conf"][STATE_BYTES_CONF] == "114688" and app["spark_conf"][COST_MS_CONF] == "50"
    assert wl.backlog_basis == "counted"
    case = Case("memory-state", MemoryStateSizing().profile, "memory-state-steps")
    assert case_controllers(case, CONTROLLERS) == ("ds2-baseline", "ds2")
    assert case_controllers(Case("dag-linear", "steps:1@1s", "x"), ("static", "ds2")) == ("static", "ds2")
    assert case_info(case, ".")["judges_out_of_memory"] is True
    assert case_info(Case("dag-linear", "steps:1@1s", "x"), ".")["judges_out_of_memory"] is False


def test_the_memory_case_is_sized_so_that_only_a_scale_down_runs_out_of_memory():
    s = MemoryStateSizing()
    profile = parse_profile(s.profile)
    assert 180 <= (profile.duration_s or 0) <= 240  # a 3-4 minute profile
    high, low = segments(profile)
    warmup_s = BenchSpec(cases=(), controllers=()).warmup_s  # at the first rate, before the clock starts
    state_mib = s.state_mib_at(high.end_s, warmup_s)
    heap_mib = s.executor_memory_mb  # each executor's -Xmx
    # Spread over 4 executors it fits to the run's end with room for a second version of it (in the
    # run of docs/results/bench_scaling_33_memory ds2 kept 4 executors to the end and lost none).
    assert s.state_mib_at(low.end_s, warmup_s) / 4 < heap_mib / 2
    # Gathered on 2 at the low step it fills over three quarters of the heap: the baseline's 4 -> 2
    # lost 4 executors to an OOM in that run; at 48 KiB a record (169 MiB on each of 2) it lost none.
    assert state_mib / 2 > 0.75 * heap_mib
    # ds2's guard holds the baseline's first scale-down (4 -> 2, max_scale_down_factor 2) already.
    assert state_mib / 2 > MAX_STATE_MEMORY_FRACTION * s.executor_memory_mb
    # DS2 at its 0.8 target utilisation wants every executor at the high step, one at the low.
    assert math.ceil(s.cores_needed(high.rate) / 0.8) == 4 and math.ceil(s.cores_needed(low.rate) / 0.8) == 1


def test_the_memory_pipeline_expects_each_record_once():
    records = [{"uid": "r-0", "key": "1", "value": "5"}, {"uid": "r-1", "key": "1", "value": "6"}]
    assert expected_output(records, None) == {"r-0": 1, "r-1": 1}  # type: ignore[arg-type]


def test_an_out_of_memory_is_told_from_the_driver_s_remove_reason():
    assert is_oom("Command exited with code 52")
    assert is_oom("java.lang.OutOfMemoryError: Java heap space")
    assert not is_oom("Executor decommission.") and not is_oom("Command exited with code 520")
    assert not is_oom(None) and not is_oom("")
    spans = [ExecutorSpan("1", 0.0, 50.0, "Command exited with code 52"), ExecutorSpan("2", 0.0, 40.0,
             "Executor decommission."), ExecutorSpan("3", 0.0, None, None), ExecutorSpan("4", 60.0, 90.0,
             "Command exited with code 52")]
    assert oom_losses(spans) == 2 and oom_losses([]) == 0 and oom_losses(None) is None


PROFILE = "steps:10@20s,40@20s,10@20s"


def fake_run(case: str, controller: str, actions: int, oom: int | None) -> dict:
    prof = parse_profile(PROFILE)
    samples = [Sample(t, int(prof.records_by(t)), int(prof.records_by(t)), 400.0, 2, 2, 4) for t in range(0, 62, 2)]
    done = [ScalingAction(float(21 + i), "scale_executors", 1 + i % 2, 2 - i % 2) for i in range(actions)]
    m = measure(samples, done, segments(prof), SloLimits(1000), lambda r: 1 if r < 20 else 2, load_at=prof.rate_at)
    return {"case": case, "workload": "memory-state", "profile": PROFILE, "controller": controller, "repeat": 1,
            "started_at": 0, "samples": [s.to_dict() for s in samples], "actions": [a.to_dict() for a in done],
            "measures": m.to_dict(), "lost": 0, "duplicated": 0, "total_records": 600, "notes": [],
            "executors_lost_oom": oom}


def test_report_compares_actions_with_the_baseline_and_counts_the_out_of_memory(tmp_path):
    case = {"name": "memory-state-steps", "workload": "memory-state", "profile": PROFILE, "backlog_basis": "counted",
            "latency_source": None, "trigger_s": 1.0, "judges_out_of_memory": True}
    runs = [fake_run("memory-state-steps", "ds2-baseline", 4, 2), fake_run("memory-state-steps", "ds2", 1, 0)]
    data = {"command": "sparkscale bench scaling --workload memory-state", "cases": [case], "runs": runs,
            "failed_runs": [], "calibration": {"memory-state": {"10": 1, "40": 2}},
            "spec": {"controllers": ["ds2-baseline", "ds2"], "seed": 7, "min_executors": 1, "max_executors": 4,
                     "slo_backlog_s": 10, "slo_latency_s": 10}}
    (tmp_path / "results.json").write_text(json.dumps(data))
    out = CliRunner().invoke(main, ["report", str(tmp_path)])
    assert out.exit_code == 0, out.output
    page = (tmp_path / "results.md").read_text()
    lines = [line for line in page.splitlines() if line.startswith("| ")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.strip("|").split("|")] for line in lines[1:]}
    ratio, oom = header.index("scaling actions vs ds2-baseline"), header.index("executors lost to OOM")
    assert header[ratio - 1] == "scaling actions" and header[oom + 1:] == ["lost", "duplicated"]
    assert rows["ds2"][ratio] == "0.25x" and rows["ds2-baseline"][ratio] == "1x"
    assert rows["ds2"][oom] == "0" and rows["ds2-baseline"][oom] == "2"
    assert "| fewer scaling actions than ds2-baseline | ds2 1, ds2-baseline 4 | yes | - |" in page
    assert ("| no executor lost to an out-of-memory where ds2-baseline lost one | ds2 0, ds2-baseline 2 over the "
            "runs | yes | - |") in page
    assert "Executors lost to OOM:" in page and "Scaling actions vs ds2-baseline:" in page


def test_the_memory_case_is_not_calibrated_and_runs_two_controllers():
    from sparkscale_lab.bench.scaling import estimated_duration_s
    from sparkscale_lab.bench.scaling_workloads import matrix

    memory = BenchSpec(cases=matrix(["memory-state"], []), controllers=CONTROLLERS, repeat=1, warmup_s=0)
    assert memory.rates_of("memory-state") == []
    dag = BenchSpec(cases=matrix(["dag-linear"], []), controllers=CONTROLLERS, repeat=1)
    assert dag.rates_of("dag-linear") == [15.0, 60.0]
    # Two runs of the 220 s profile with their overhead, no calibration.
    assert estimated_duration_s(memory) == pytest.approx(2 * (220 + 65))


class FakeRest:
    """A driver's REST API that lists `listing` under app `app_id`, or does not answer (None)."""

    def __init__(self) -> None:
        self.app_id, self.listing = "app-1", None

    def application(self, name: str) -> object:
        if self.listing is None:
            raise SparkRestError("http://driver/applications", "no answer", unreachable=True)
        return type("App", (), {"id": self.app_id})()

    def get_json(self, path: str) -> list:
        assert path == f"applications/{self.app_id}/allexecutors"
        return self.listing


class FakeProbe:
    def look(self, client, rest, t0):
        return Sample(0.0, 0, 0, None, 1, 1, 4)


def executor(eid: str, removed: float | None = None, reason: str | None = None) -> dict:
    return {"id": eid, "addTime": "2026-11-27T10:00:00.000GMT", "removeReason": reason,
            **({"removeTime": "2026-11-27T10:01:00.000GMT"} if removed else {})}


def test_the_oom_watch_keeps_what_a_driver_listed_after_it_is_gone():
    rest = FakeRest()
    watch = OomWatch(FakeProbe(), "bench", every=2)
    watch.look(None, rest, 0.0)  # the driver does not answer yet; only every 2nd look reads it
    watch.look(None, rest, 0.0)
    assert watch.oom_losses() is None
    rest.listing = [{"id": "driver"}, executor("1"), executor("2", 60.0, "Command exited with code 52")]
    watch.look(None, rest, 0.0)
    assert watch.oom_losses() is None  # an odd look: not read
    watch.look(None, rest, 0.0)
    assert watch.oom_losses() == 1
    rest.listing = None  # the query failed on every retry and ended the driver
    watch.read(rest)
    assert watch.oom_losses() == 1
    rest.app_id, rest.listing = "app-2", [executor("2", 60.0, "Command exited with code 52")]  # a new driver's "2"
    watch.read(rest)
    assert watch.oom_losses() == 2
