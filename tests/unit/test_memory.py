"""Memory right-sizing and the GC guard (issue 33, "Memory"): the figures the snapshot carries (from
Spark REST and progress JSON fixtures), the state-memory guard on scale-downs, the GC guard on
scale-ups and the recommended executor memory. Each setting is off by default; each test turns one on
and checks that it holds (and says why) or lets pass."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from sparkscale.config import AppConfig, Config, GuardsConfig, LoopConfig, PolicyConfig
from sparkscale.config.memory import MemoryPolicyConfig
from sparkscale.model.memory_figures import MIB, MemoryFigures
from sparkscale.model.plan import Action, Plan
from sparkscale.model.snapshot import Snapshot, SnapshotError
from sparkscale.model.snapshot_merge import merge_snapshots
from sparkscale.monitors.executor_figures import app_extension, executor_figures, window_work
from sparkscale.monitors.progress_reports import ProgressReport
from sparkscale.monitors.snapshot_builder import SnapshotInputs, build_snapshot, finished_batches
from sparkscale.monitors.spark_rest import parse_executors, parse_jobs, parse_stage_attempts
from sparkscale.policies import planner
from sparkscale.policies.gc_guard import RECOMMENDED_MEMORY_FIGURE, round_up_mb
from sparkscale.policies.guards import GuardInput, apply_guards
from sparkscale.policies.history import DecisionHistory
from sparkscale.policies.memory import recommended_memory_mb
from sparkscale.policies.memory_guard import MEMORY_WARNING

REST = Path(__file__).parent / "fixtures" / "rest"
RECORDED = REST / "wordcount"
NOW = 1_800_000_000.0
OFF: dict[str, Any] = {"scale_down_delay_s": 0, "max_scale_up_factor": 100, "max_scale_down_factor": 100}
LOOP_OFF = LoopConfig(cooldown_s=0, stabilization_s=0)
APP = AppConfig(name="app", min_executors=1, max_executors=8, executor_memory_mb=1024)


def load(directory: Path, name: str) -> Any:
    return json.loads((directory / name).read_text())


def recorded_snapshot() -> Snapshot:
    """The recorded wordcount run (PySpark 4.3: executors, stages with jvmGcTime, progress reports)."""
    meta = load(RECORDED, "meta.json")
    jobs = parse_jobs(load(RECORDED, "jobs.json"))
    stages = {int(p.stem): parse_stage_attempts(json.loads(p.read_text()))
              for p in (RECORDED / "stages").glob("*.json")}
    progress = [ProgressReport.from_fields(f) for f in load(RECORDED, "progress_history.json")]
    return build_snapshot(SnapshotInputs(
        app=meta["app"], query=meta["query"], taken_at=meta["taken_at"], window_s=meta["window_s"],
        executors=parse_executors(load(RECORDED, "executors.json")), stages=stages, progress=progress,
        batches=finished_batches(jobs, meta["query"], [(r.run_id, r.batch_id) for r in progress]),
        trigger_interval_s=meta["trigger_interval_s"],
    ))


def snap(executors: int = 4, state_mb: float | None = None, gc: float | None = None, heap_mb: float | None = None,
         query: str = "q") -> Snapshot:
    app: dict[str, Any] = {}
    if gc is not None:
        app["gc_time_fraction"] = gc
    if heap_mb is not None:
        app["heap_used_bytes"] = round(heap_mb * MIB)
    extensions: dict[str, Any] = {"app": app}
    if state_mb is not None:
        extensions["progress"] = {"state_memory_bytes": round(state_mb * MIB)}
    return Snapshot.from_dict({
        "version": 1, "app": "app", "query": query, "taken_at": NOW, "window_s": 30.0,
        "executors": [{"id": str(k + 1), "host": "h", "cores": 1} for k in range(executors)],
        "operators": [{"id": "src", "source": True, "parallelism": 1, "arrival_rate": 10.0, "instances": [],
                       "backlog_known": False}],
        "edges": [], "extensions": extensions,
    })


def scale_plan(from_: int, to: int) -> Plan:
    return Plan("test", "app", actions=(Action.scale_executors(from_, to, "policy says so"),))


def guard(plan: Plan, snapshot: Snapshot, memory: MemoryPolicyConfig | None = None, **settings: Any) -> Plan:
    given = GuardInput(snapshot, DecisionHistory.empty(), APP)
    return apply_guards(plan, given, GuardsConfig(**{**OFF, **settings}), LOOP_OFF, memory)


def target(plan: Plan) -> int | None:
    scales = [a for a in plan.actions if a.type == "scale_executors"]
    return scales[0].to if scales else None


def lines(plan: Plan, start: str) -> list[str]:
    return [line for line in plan.explanation if line.startswith(start)]


# -- 1. figures -----------------------------------------------------------------------------------


def test_tasks_carry_their_gc_time_and_the_window_counts_it_by_share():
    stage = parse_stage_attempts(load(RECORDED / "stages", "17.json"))[0]
    assert [t.jvm_gc_time_ms for t in stage.tasks if t.jvm_gc_time_ms] and all(
        t.jvm_gc_time_ms >= 0 for t in stage.tasks)
    task = {"taskId": 1, "index": 0, "executorId": "0", "status": "SUCCESS", "launchTime": "2026-11-22T05:00:09.000GMT",
            "duration": 2000, "taskMetrics": {"executorRunTime": 2000, "jvmGcTime": 500}}
    stages = {1: parse_stage_attempts([{"stageId": 1, "status": "COMPLETE", "tasks": {"1": task}}])}
    launched = stages[1][0].tasks[0].launched_at_s
    assert launched is not None
    taken_at = launched + 2.0
    work = window_work(stages, taken_at, 1.0)["0"]  # the last half of the task's run
    assert work.gc_s == pytest.approx(0.25) and work.run_s == pytest.approx(1.0)
    executors = parse_executors(load(REST / "hosts", "executors.json"))[:1]
    assert executor_figures(executors, {"0": work}, taken_at, 1.0)[0].extra["gc_time_fraction"] == 0.25
    figures = app_extension(executors, {"0": work}, taken_at, 1.0)
    assert (figures["gc_time_s"], figures["gc_time_fraction"]) == (0.25, 0.25)


def test_app_figures_carry_heap_and_storage_memory_from_rest():
    executors = parse_executors(load(REST / "hosts", "executors.json"))
    figures = app_extension(executors, {}, NOW, 30.0)
    peaks = [e.memory.peak_jvm_heap_bytes for e in executors if e.memory and e.memory.peak_jvm_heap_bytes]
    assert peaks and figures["heap_used_bytes"] == max(peaks)  # the executor nearest its heap's end
    assert figures["heap_max_bytes"] is None  # Spark's REST API does not report -Xmx: not measured
    assert figures["storage_used_bytes"] == sum(e.memory.storage_used_bytes for e in executors if e.memory)
    assert figures["storage_total_bytes"] == sum(e.memory.storage_total_bytes for e in executors if e.memory)
    assert figures["gc_time_fraction"] is None  # no task in the window: not measured
    assert app_extension([], {}, NOW, 30.0)["heap_used_bytes"] is None


def test_the_recorded_snapshot_carries_memory_gc_and_state_figures():
    snapshot = recorded_snapshot()
    memory = snapshot.memory
    reports = [ProgressReport.from_fields(f) for f in load(RECORDED, "progress_history.json")]
    latest = max((r for r in reports if r.batch_id in snapshot.extensions["monitor"]["batches"]),
                 key=lambda r: r.batch_id)
    assert memory.state_memory_bytes == latest.state_memory_bytes and memory.state_memory_bytes
    assert memory.heap_used_bytes and memory.heap_max_bytes is None
    assert memory.storage_total_bytes and memory.storage_used_bytes is not None
    assert memory.gc_time_fraction is not None and 0 < memory.gc_time_fraction < 1
    assert Snapshot.from_dict(snapshot.to_dict()).memory == memory


def test_state_memory_sums_the_stateful_operators_of_the_latest_progress():
    fields = {"batch_id": "3", "run_id": "r", "state_operators": json.dumps([
        {"operator": "a", "memory_used_bytes": 1000}, {"operator": "b", "memory_used_bytes": 234}])}
    assert ProgressReport.from_fields(fields).state_memory_bytes == 1234


def test_old_snapshots_parse_with_nothing_measured_and_bad_figures_are_named():
    assert snap().memory == MemoryFigures()
    merged = merge_snapshots([snap(state_mb=100, query="a"), snap(state_mb=50, query="b"), snap(query="c")])
    assert merged.memory.state_memory_bytes == 150 * MIB  # every query's state
    bad = snap().to_dict()
    bad["extensions"] = {"app": {"gc_time_fraction": 1.5}}
    with pytest.raises(SnapshotError, match=r"app\.gc_time_fraction"):
        Snapshot.from_dict(bad)


# -- 2. the state-memory guard --------------------------------------------------------------------


def test_memory_guard_refuses_a_scale_down_that_puts_too_much_state_per_executor():
    # 2000 MB of state over 2 executors: 1000 MB each, above 0.5 x 1024 MB.
    held = guard(scale_plan(4, 2), snap(4, state_mb=2000), max_state_memory_fraction=0.5)
    assert target(held) is None
    assert any(a.type == "warn" and a.reason.startswith(MEMORY_WARNING) for a in held.actions)
    [line] = lines(held, "guard state memory:")
    assert "1000 MB per executor on 2" in line and "512 MB" in line


def test_memory_guard_lets_a_scale_down_pass_when_the_state_fits_or_is_unknown_or_off():
    assert target(guard(scale_plan(4, 2), snap(4, state_mb=800), max_state_memory_fraction=0.5)) == 2
    assert target(guard(scale_plan(4, 2), snap(4), max_state_memory_fraction=0.5)) == 2
    assert target(guard(scale_plan(4, 2), snap(4, state_mb=2000))) == 2  # off by default
    assert target(guard(scale_plan(4, 6), snap(4, state_mb=9000), max_state_memory_fraction=0.5)) == 6  # up


# -- 3. the GC guard ------------------------------------------------------------------------------


def test_gc_guard_turns_a_scale_up_into_a_memory_recommendation():
    held = guard(scale_plan(2, 4), snap(2, gc=0.3), gc_time_fraction_max=0.1)
    assert target(held) is None
    [warning] = [a for a in held.actions if a.type == "warn"]
    assert warning.reason == ("GC takes 30 % of executor time: add memory, not executors (recommended "
                              "executor_memory_mb 1536)")
    assert lines(held, "guard GC:") and held.observation.figure(RECOMMENDED_MEMORY_FIGURE) == 1536


def test_gc_guard_lets_pass_below_the_limit_a_scale_down_or_when_off():
    assert target(guard(scale_plan(2, 4), snap(2, gc=0.05), gc_time_fraction_max=0.1)) == 4
    assert target(guard(scale_plan(4, 2), snap(4, gc=0.5), gc_time_fraction_max=0.1)) == 2
    assert target(guard(scale_plan(2, 4), snap(2, gc=0.5))) == 4
    assert target(guard(scale_plan(2, 4), snap(2), gc_time_fraction_max=0.1)) == 4  # not measured


def test_memory_rounds_up_to_256_mb():
    assert (round_up_mb(1536), round_up_mb(1537), round_up_mb(10)) == (1536, 1792, 256)


# -- 4. the recommendation ------------------------------------------------------------------------


def test_recommendation_from_the_heap_peak_over_the_target_fraction_bounded():
    settings = MemoryPolicyConfig(recommend=True, target_heap_fraction=0.7, max_executor_memory_mb=4096)
    assert recommended_memory_mb(round(900 * MIB), settings) == 1536  # 900 / 0.7 = 1286 -> 1536
    assert recommended_memory_mb(round(200 * MIB), settings) == 512  # over-provisioned: less
    assert recommended_memory_mb(round(9000 * MIB), settings) == 4096


def test_recommendation_in_the_explanation_and_the_observation_only_when_on():
    plan = guard(Plan("test", "app"), snap(heap_mb=900), MemoryPolicyConfig(recommend=True))
    assert plan.observation.figure(RECOMMENDED_MEMORY_FIGURE) == 1536
    [line] = lines(plan, "memory:")
    assert "recommended executor_memory_mb 1536" in line and "900 MB of 1024 MB" in line
    off = guard(Plan("test", "app"), snap(heap_mb=900), MemoryPolicyConfig())
    assert RECOMMENDED_MEMORY_FIGURE not in off.observation.figures and not lines(off, "memory:")
    unknown = guard(Plan("test", "app"), snap(), MemoryPolicyConfig(recommend=True))
    assert lines(unknown, "memory: no JVM heap peak")


def test_the_planner_passes_policy_memory_to_the_guards():
    config = Config(apps=[APP], guards=GuardsConfig(**OFF), loop=LOOP_OFF,
                    policy=PolicyConfig(memory=MemoryPolicyConfig(recommend=True)))
    plan = planner.decide(snap(heap_mb=900), DecisionHistory.empty(), config, APP)
    assert plan.observation.figure(RECOMMENDED_MEMORY_FIGURE) == 1536


def test_settings_are_off_by_default_and_checked():
    assert GuardsConfig().max_state_memory_fraction is None and GuardsConfig().gc_time_fraction_max is None
    assert PolicyConfig().memory == MemoryPolicyConfig() and not MemoryPolicyConfig().recommend
    assert GuardsConfig(max_state_memory_fraction=0.5, gc_time_fraction_max=0.2).gc_time_fraction_max == 0.2
    for bad in ({"max_state_memory_fraction": 0}, {"gc_time_fraction_max": 1.0}):
        with pytest.raises(ValidationError):
            GuardsConfig(**bad)
    with pytest.raises(ValidationError):
        PolicyConfig(memory={"max_executor_memory_mb": 100})
