"""The unmeasured-query guard (policies/unmeasured_query.py): an app of two queries, one of whose
batches outlasts the window, as in the clicks-file sine run of issue 33 (page_windows ran no batch
to its end for 35 s with 1,329 records waiting while user_totals went on); and what the monitor
says of a running batch (monitors/snapshot_builder.py `batch_running_since`)."""

from __future__ import annotations

from typing import Any

from sparkscale.config import AppConfig, Config
from sparkscale.model.plan import Action, Plan
from sparkscale.model.snapshot import Snapshot
from sparkscale.model.snapshot_merge import merge_snapshots
from sparkscale.monitors.snapshot_builder import batch_running_since
from sparkscale.monitors.spark_rest import BatchRef, RestJob
from sparkscale.policies import planner
from sparkscale.policies.history import DecisionHistory
from sparkscale.policies.unmeasured_query import unmeasured_queries
from tests.unit.test_guards_stability import guard, notes, target

NOW = 1_795_907_967.0
APP = AppConfig(name="app", min_executors=1, max_executors=4)


def query(name: str, *, arrival: float, backlog: float, stage_records: float | None, executors: int = 4,
          running_s: float | None = None) -> Snapshot:
    """One query's snapshot: its source, one stage when `stage_records` is given (a batch of it
    finished in the window), and a batch running for `running_s` (None: none runs)."""
    operators: list[dict[str, Any]] = [
        {"id": "src", "source": True, "parallelism": 1, "arrival_rate": arrival, "backlog": backlog,
         "instances": [{"records_in": arrival * 15, "records_out": arrival * 15, "useful_time_s": 15.0,
                        "executor": "1"}]}]
    edges: list[dict[str, Any]] = []
    if stage_records is not None:
        operators.append({"id": "stage0", "parallelism": 4, "instances": [
            {"records_in": stage_records / 4, "records_out": stage_records / 4, "useful_time_s": 0.5,
             "executor": str(k % executors + 1)} for k in range(4)]})
        edges.append(["src", "stage0"])
    return Snapshot.from_dict({
        "version": 1, "app": "app", "query": name, "taken_at": NOW, "window_s": 15.0,
        "executors": [{"id": str(k + 1), "host": "h", "cores": 1} for k in range(executors)],
        "operators": operators, "edges": edges,
        "extensions": {"monitor": {"batch_running_since_s": None if running_s is None else NOW - running_s}}})


def held_up() -> Snapshot:
    """user_totals measured; page_windows' batch still running, 1,329 records waiting."""
    return merge_snapshots([query("page_windows", arrival=0.0, backlog=1329.0, stage_records=None, running_s=35.0),
                            query("user_totals", arrival=25.8, backlog=536.8, stage_records=387.0)])


def scale_plan(from_: int, to: int) -> Plan:
    return Plan("test", "app", actions=(Action.scale_executors(from_, to, "policy says so"),))


def test_a_query_whose_batch_outlasts_the_window_beside_a_measured_one_is_unmeasured():
    assert unmeasured_queries(held_up()) == [("page_windows", 1329.0, 35.0)]
    # No batch running: it waits for its trigger (one longer than the window), it is not held up.
    waiting = merge_snapshots([query("page_windows", arrival=20.0, backlog=300.0, stage_records=None),
                               query("user_totals", arrival=25.8, backlog=0.0, stage_records=387.0)])
    assert unmeasured_queries(waiting) == []
    # A batch running for less than the window: the window's start came between two of its batches.
    young = merge_snapshots([query("page_windows", arrival=20.0, backlog=300.0, stage_records=None, running_s=9.0),
                             query("user_totals", arrival=25.8, backlog=0.0, stage_records=387.0)])
    assert unmeasured_queries(young) == []
    # No query measured at all: not a partial view (DS2 keeps the executors itself then).
    blind = merge_snapshots([query("page_windows", arrival=0.0, backlog=1329.0, stage_records=None, running_s=35.0),
                             query("user_totals", arrival=25.8, backlog=10.0, stage_records=None, running_s=20.0)])
    assert unmeasured_queries(blind) == []


def test_a_scale_down_on_a_partial_view_is_held_and_says_which_query_is_missing():
    plan = guard(scale_plan(4, 1), held_up())
    assert target(plan) is None
    [line] = notes(plan, "unmeasured query")
    assert "scale_executors 4 -> 1 held" in line
    assert "page_windows (a batch running for 35 s, 1,329 records waiting)" in line
    assert "user_totals" not in line
    # The recommendation the scale-down delay reads next is the current count, not the blind 1.
    assert plan.observation.recommended_executors == 4


def test_a_scale_up_and_a_query_waiting_for_its_trigger_pass():
    assert target(guard(scale_plan(4, 6), held_up())) == 6
    waiting = merge_snapshots([query("page_windows", arrival=20.0, backlog=300.0, stage_records=None),
                               query("user_totals", arrival=25.8, backlog=0.0, stage_records=387.0)])
    assert target(guard(scale_plan(4, 1), waiting)) == 1


def test_ds2_on_the_partial_view_keeps_the_executors_where_it_would_drop_to_one():
    cfg = Config.model_validate({"apps": [APP.model_dump()], "policy": {"name": "ds2"},
                                 "guards": {"scale_down_delay_s": 0, "max_scale_down_factor": 100},
                                 "loop": {"cooldown_s": 0}})
    plan = planner.decide(held_up(), DecisionHistory.empty(), cfg, APP)
    assert not [a for a in plan.actions if a.type == "scale_executors"]
    assert any(line.startswith("guard unmeasured query: scale_executors 4 -> 1 held") for line in plan.explanation)
    # The same window with no batch of page_windows running (between its triggers): DS2's 1 executor goes.
    between = merge_snapshots([query("page_windows", arrival=0.0, backlog=0.0, stage_records=None),
                               query("user_totals", arrival=25.8, backlog=536.8, stage_records=387.0)])
    scaled = planner.decide(between, DecisionHistory.empty(), cfg, APP)
    assert [(a.from_, a.to) for a in scaled.actions if a.type == "scale_executors"] == [(4, 1)]


def job(job_id: int, status: str, query: str, submitted_at_s: float, batch: int = 7) -> RestJob:
    ref = BatchRef(query, f"{query}-id", "run-1", batch)
    return RestJob(job_id, status, f"{query}\nid = {query}-id\nrunId = run-1\nbatch = {batch}", ref, (job_id,),
                   submitted_at_s, None if status == "RUNNING" else submitted_at_s + 1.0)


def test_the_monitor_names_when_the_querys_oldest_running_batch_job_began():
    jobs = [job(1, "SUCCEEDED", "page_windows", NOW - 60.0, batch=6), job(2, "RUNNING", "page_windows", NOW - 35.0),
            job(3, "RUNNING", "page_windows", NOW - 20.0), job(4, "RUNNING", "user_totals", NOW - 50.0)]
    assert batch_running_since(jobs, "page_windows") == NOW - 35.0
    assert batch_running_since(jobs, "user_totals") == NOW - 50.0
    assert batch_running_since(jobs[:1], "page_windows") is None  # every job done: waiting for its trigger
    # An unnamed query's jobs are found by its id.
    assert batch_running_since([job(5, "RUNNING", "", NOW - 5.0)], "nameless", "-id") == NOW - 5.0
