"""No scale-up while the executors are mostly idle and the backlog is within its SLO (issue 33):
the per-record rates of a stage that is mostly fixed cost, multiplied up to the target rate, asked
for an executor the query could not use."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from sparkscale.config import AppConfig, Config, GuardsConfig
from sparkscale.model.snapshot import Snapshot
from sparkscale.policies import planner
from sparkscale.policies.history import DecisionHistory
from sparkscale.policies.idle_executors import TASK_TIME_FIGURE, task_time_fraction
from tests.unit.test_guards_stability import guard, notes, scale_plan, snap, target

RECORDED = Path(__file__).parent.parent / "fixtures" / "snapshots" / "clicks_file_15rps_behind.json"


def busy(snapshot: Snapshot, *executors: tuple[Any, Any, int]) -> Snapshot:
    """`snapshot` with executors of (task_time_s, present_s, cores)."""
    data = snapshot.to_dict()
    data["executors"] = [{"id": str(k + 1), "host": "h", "cores": cores, "task_time_s": run_s, "present_s": present_s}
                         for k, (run_s, present_s, cores) in enumerate(executors)]
    return Snapshot.from_dict(data)


def test_a_scale_up_is_held_while_the_executors_idle_and_the_backlog_is_within_its_slo():
    idle = busy(snap(backlog=50, arrival=10), (7.2, 30, 1))  # 24 % busy, 5 s of input waiting
    plan = guard(scale_plan(1, 2), idle, idle_executors_task_time_fraction=0.5)
    assert target(plan) is None and plan.observation.figure(TASK_TIME_FIGURE) == pytest.approx(0.24)
    assert "ran tasks 24% of the window (under 50%)" in notes(plan, "idle executors")[0]
    assert "50 records (5.0 s of input), is within the 10 s SLO" in notes(plan, "idle executors")[0]
    # Off by default: the same plan passes, and nothing is recorded.
    plan = guard(scale_plan(1, 2), idle)
    assert target(plan) == 2 and TASK_TIME_FIGURE not in plan.observation.figures


@pytest.mark.parametrize(("snapshot", "why"), [
    (busy(snap(backlog=50, arrival=10), (16, 30, 1)), "busy enough: 53 %"),
    (busy(snap(backlog=150, arrival=10), (3, 30, 1)), "15 s of input: above the SLO"),
    (busy(snap(backlog=20, arrival=0), (3, 30, 1)), "records waiting, none arriving"),
    (busy(snap(backlog=None, arrival=10), (3, 30, 1)), "backlog unknown"),
    (snap(backlog=10, arrival=10), "no executor figures"),
    (busy(snap(backlog=10, arrival=10), (3, 0, 1)), "an executor that did not exist in the window"),
])
def test_a_scale_up_passes_when_busy_behind_or_unmeasured(snapshot: Snapshot, why: str):
    plan = guard(scale_plan(1, 2), snapshot, idle_executors_task_time_fraction=0.5)
    assert target(plan) == 2 and not notes(plan, "idle executors"), why


def test_a_scale_down_is_never_held_and_the_share_is_over_all_executors_cores_and_presence():
    idle = busy(snap(backlog=0, arrival=10), (3, 30, 1))
    assert target(guard(scale_plan(4, 2), idle, idle_executors_task_time_fraction=0.5)) == 2
    # 2 cores for 30 s busy 36 s, 1 core for the last 10 s busy 10 s: 46 / 70.
    mixed = busy(snap(backlog=0, arrival=10), (36, 30, 2), (10, 10, 1))
    assert task_time_fraction(mixed) == pytest.approx(46 / 70)


@pytest.mark.parametrize("bad", [True, math.nan, math.inf, -1.0, "3"])
def test_figures_that_are_not_seconds_are_left_out(bad: Any):
    data = snap(backlog=0, arrival=10).to_dict()
    data["executors"] = [{"id": "1", "host": "h", "cores": 1, "task_time_s": bad, "present_s": 30},
                         {"id": "2", "host": "h", "cores": 1, "task_time_s": 6, "present_s": bad},
                         {"id": "3", "host": "h", "cores": 1, "task_time_s": 3, "present_s": 30}]
    assert task_time_fraction(Snapshot.from_dict(data)) == pytest.approx(0.1)


def test_the_recorded_clicks_file_window_asks_for_a_second_executor_and_the_guard_holds_it():
    """`sparkscale bench scaling`'s clicks-file at 15 records/s (2026-11-28): the snapshot behind
    the ds2 run's first action. Its stateful stage ran 7 records in 4 tasks of 0.16-0.48 s."""
    snapshot = Snapshot.from_dict(json.loads(RECORDED.read_text()))
    app = AppConfig(name="bench", min_executors=1, max_executors=4)
    cfg = Config.model_validate({"apps": [app.model_dump()], "policy": {"name": "ds2"},
                                 "guards": {"scale_down_delay_s": 30}})
    asked = planner.decide(snapshot, DecisionHistory.empty(), cfg, app)
    assert target(asked) == 2  # DS2 projects 1.44 busy cores for 15 rec/s
    cfg = cfg.model_copy(update={"guards": GuardsConfig(scale_down_delay_s=30, idle_executors_task_time_fraction=0.5)})
    held = planner.decide(snapshot, DecisionHistory.empty(), cfg, app)
    assert target(held) is None and held.observation.figure(TASK_TIME_FIGURE) == pytest.approx(3.671 / 15, abs=1e-3)
