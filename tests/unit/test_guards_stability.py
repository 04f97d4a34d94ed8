"""The stability guards and operator controls of issue 33: start-up grace, no scale-down while
draining, a cap on direction changes, excluded periods, per-app modes and quotas. Each is off by
default; each test turns one on and checks that it holds (and says why) or lets pass."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from pydantic import ValidationError
from structlog.testing import capture_logs

from sparkscale.cli import main
from sparkscale.config import AppConfig, AppMode, Config, GuardsConfig, LoopConfig, QuotasConfig
from sparkscale.config.periods import PeriodError, parse_period
from sparkscale.control.decision import app_mode
from sparkscale.daemon import wiring
from sparkscale.daemon.feeds import LogFeed, MetricsFeed
from sparkscale.daemon.metrics import DaemonMetrics
from sparkscale.model.plan import Action, Observation, Plan
from sparkscale.model.snapshot import Snapshot
from sparkscale.model.snapshot_merge import merge_snapshots
from sparkscale.monitors.progress_reports import ProgressReport
from sparkscale.monitors.snapshot_builder import SnapshotInputs, build_snapshot, run_first_batch
from sparkscale.policies import planner
from sparkscale.policies.capacity import SHORT_FIGURE, apply_capacity
from sparkscale.policies.direction_cap import reversals
from sparkscale.policies.draining import BACKLOG_FIGURE
from sparkscale.policies.guards import GuardInput, apply_guards
from sparkscale.policies.history import DecisionHistory
from sparkscale.policies.quotas import QUOTA_WARNING
from sparkscale.policies.startup_grace import first_batch_figure
from tests.unit import test_autoscaler as loops

SATURDAY_3AM = datetime(2026, 11, 28, 3, 0, tzinfo=UTC).timestamp()  # a Saturday
NOW = SATURDAY_3AM
# Only the guard under test acts: no delay, no factor cap, no cooldown, no stabilisation.
OFF: dict[str, Any] = {"scale_down_delay_s": 0, "max_scale_up_factor": 100, "max_scale_down_factor": 100}
LOOP_OFF = LoopConfig(cooldown_s=0, stabilization_s=0)
APP = AppConfig(name="app", min_executors=1, max_executors=8)
WARNING = Action.warn("the app is short of something")


def snap(executors: int = 4, taken_at: float = NOW, query: str = "q", backlog: float | None = None,
         arrival: float = 10.0, extensions: dict[str, Any] | None = None) -> Snapshot:
    source: dict[str, Any] = {"id": "src", "source": True, "parallelism": 1, "arrival_rate": arrival, "instances": []}
    if backlog is None:
        source["backlog_known"] = False
    else:
        source["backlog"] = backlog
    return Snapshot.from_dict({
        "version": 1, "app": "app", "query": query, "taken_at": taken_at, "window_s": 30.0,
        "executors": [{"id": str(k + 1), "host": "h", "cores": 1} for k in range(executors)],
        "operators": [source], "edges": [], "extensions": extensions or {},
    })


def scale_plan(from_: int, to: int, *extra: Action) -> Plan:
    return Plan("test", "app", actions=(Action.scale_executors(from_, to, "policy says so"), *extra))


def guard(plan: Plan, snapshot: Snapshot | None = None, history: DecisionHistory | None = None,
          **settings: Any) -> Plan:
    guards = GuardsConfig(**{**OFF, **settings})
    given = GuardInput(snapshot if snapshot is not None else snap(), history or DecisionHistory.empty(), APP)
    return apply_guards(plan, given, guards, LOOP_OFF)


def target(plan: Plan) -> int | None:
    scales = [a for a in plan.actions if a.type == "scale_executors"]
    return scales[0].to if scales else None


def notes(plan: Plan, name: str) -> list[str]:
    return [line for line in plan.explanation if line.startswith(f"guard {name}:")]


def decisions(*pairs: tuple[float, Plan]) -> DecisionHistory:
    """A history of these plans, decided at NOW - age."""
    history = DecisionHistory.empty()
    for age, plan in pairs:
        history = history.with_decision(NOW - age, plan)
    return history


def test_every_new_setting_but_the_start_up_grace_is_off_by_default():
    guards, quotas = GuardsConfig(), QuotasConfig()
    assert (guards.startup_grace_batches, guards.no_scale_down_while_draining, guards.max_direction_changes_per_hour,
            guards.excluded_periods) == (3, False, None, [])
    assert (quotas.max_cores, quotas.max_memory_mb) == (None, None)
    assert AppConfig(name="a").mode == AppMode.ACT


# ---------------------------------------------------------------------------------------------
# 1. Start-up grace


def run_snapshot(first: int | None, batches: list[int], latest: int | None = None, query: str = "q") -> Snapshot:
    progress: dict[str, Any] = {"batches": len(batches)}
    if first is not None:
        progress["run_first_batch_id"] = first
    if latest is not None:
        progress["latest_batch_id"] = latest
    return snap(query=query, extensions={"monitor": {"batches": batches}, "progress": progress})


def test_start_up_grace_holds_every_change_while_the_window_rests_on_the_runs_first_batches():
    plan = guard(scale_plan(4, 6, WARNING), run_snapshot(10, [10, 11, 12, 13]), startup_grace_batches=5)
    assert target(plan) is None and plan.warnings == (WARNING,)
    [line] = notes(plan, "start-up grace")
    assert "scale_executors 4 -> 6 held" in line and "began at batch 10" in line and "rests on batch 10" in line
    assert plan.observation.figure(first_batch_figure("q")) == 10  # carried on to the next decisions
    # Off: the same window is acted on.
    assert target(guard(scale_plan(4, 6), run_snapshot(10, [10, 11]), startup_grace_batches=0)) == 6
    # The default (3 batches) holds it too: batch 10 is one of the run's first three.
    assert target(guard(scale_plan(4, 6), run_snapshot(10, [10, 11]))) is None


def test_start_up_grace_ends_once_the_window_holds_no_batch_of_the_first_n():
    assert target(guard(scale_plan(4, 6), run_snapshot(10, [15, 16, 17]), startup_grace_batches=5)) == 6
    # No batch in the window: the latest batch stands for it.
    assert target(guard(scale_plan(4, 6), run_snapshot(10, [], latest=12), startup_grace_batches=5)) is None


def test_start_up_grace_does_not_hold_an_idle_app_that_never_leaves_its_first_batches():
    # No input arriving or waiting and no batch in the window: Spark runs no batch, so the run stays at
    # batch 0 however long it is idle; a scale-down of it is not resting on a start.
    idle = snap(arrival=0.0, backlog=0.0, extensions={"monitor": {"batches": []},
                                                      "progress": {"run_first_batch_id": 0, "latest_batch_id": 0}})
    assert target(guard(scale_plan(4, 1), idle, startup_grace_batches=5)) == 1
    # The same with input waiting (the first batch still running): held.
    waiting = snap(arrival=0.0, backlog=500.0, extensions={"monitor": {"batches": []},
                                                           "progress": {"run_first_batch_id": 0, "latest_batch_id": 0}})
    assert target(guard(scale_plan(4, 6), waiting, startup_grace_batches=5)) is None


def test_start_up_grace_carries_the_runs_first_batch_from_the_history():
    history = decisions((10, Plan("test", "app", observation=Observation(figures={first_batch_figure("q"): 10}))))
    plan = guard(scale_plan(4, 6), run_snapshot(None, [12, 13]), history, startup_grace_batches=5)
    assert target(plan) is None and "began at batch 10" in notes(plan, "start-up grace")[0]
    # A run whose start was never seen holds nothing.
    assert target(guard(scale_plan(4, 6), run_snapshot(None, [12, 13]), startup_grace_batches=5)) == 6


def test_start_up_grace_holds_an_app_while_any_of_its_queries_is_young():
    merged = merge_snapshots([run_snapshot(0, [40, 41], query="old"), run_snapshot(7, [7, 8], query="young")])
    plan = guard(scale_plan(4, 6), merged, startup_grace_batches=3)
    assert target(plan) is None and "query young's run began at batch 7" in notes(plan, "start-up grace")[0]
    assert "query old" not in notes(plan, "start-up grace")[0]


def report(run: str, batch: int, at: float) -> ProgressReport:
    return ProgressReport(batch_id=batch, run_id=run, num_input_rows=1, published_at_s=at)


def test_the_snapshot_names_the_runs_first_batch_only_when_the_reports_show_it_begin():
    restarted = [report("a", 5, 1.0), report("a", 6, 2.0), report("b", 6, 3.0), report("b", 7, 4.0)]
    assert run_first_batch(restarted) == 6  # a new run id: its first batch is the start
    assert run_first_batch([report("b", 7, 4.0), report("b", 8, 5.0)]) is None  # begun before the reports read
    assert run_first_batch([report("c", 0, 1.0), report("c", 1, 2.0)]) == 0  # a new checkpoint
    assert run_first_batch([]) is None


def test_the_built_snapshot_carries_the_runs_first_batch_and_reads_back():
    reports = [report("a", 5, 80.0), report("b", 5, 90.0), report("b", 6, 95.0)]
    built = build_snapshot(SnapshotInputs(app="app", query="q", taken_at=100.0, window_s=30.0, executors=[],
                                          batches=[], stages={}, progress=reports))
    assert built.extensions["progress"]["run_first_batch_id"] == 5
    assert Snapshot.from_dict(built.to_dict()).extensions["progress"]["run_first_batch_id"] == 5
    unseen = build_snapshot(SnapshotInputs(app="app", query="q", taken_at=100.0, window_s=30.0, executors=[],
                                           batches=[], stages={}, progress=reports[1:]))
    assert "run_first_batch_id" not in unseen.extensions["progress"]


# ---------------------------------------------------------------------------------------------
# 2. No scale-down while the backlog is above its SLO or draining


def test_a_scale_down_is_held_while_the_backlog_is_above_its_slo():
    plan = guard(scale_plan(4, 2), snap(backlog=500, arrival=10), no_scale_down_while_draining=True)
    assert target(plan) is None
    assert notes(plan, "draining") == ["guard draining: scale_executors 4 -> 2 held: the backlog, 500 records "
                                       "(50.0 s of input), is above the 10 s SLO"]
    assert plan.observation.figure(BACKLOG_FIGURE) == 500
    assert target(guard(scale_plan(4, 2), snap(backlog=500, arrival=10))) == 2  # off: as before


def test_a_scale_down_is_held_while_the_backlog_drains_and_allowed_when_it_does_not():
    history = decisions((30, Plan("test", "app", observation=Observation(figures={BACKLOG_FIGURE: 80}))))
    plan = guard(scale_plan(4, 2), snap(backlog=50, arrival=10), history, no_scale_down_while_draining=True)
    assert target(plan) is None and "is draining (80 -> 50 records over the last 30 s)" in notes(plan, "draining")[0]
    growing = decisions((30, Plan("test", "app", observation=Observation(figures={BACKLOG_FIGURE: 40}))))
    assert target(guard(scale_plan(4, 2), snap(backlog=50, arrival=10), growing,
                        no_scale_down_while_draining=True)) == 2
    assert target(guard(scale_plan(4, 2), snap(backlog=0), history, no_scale_down_while_draining=True)) == 2


def with_batches(snapshot: Snapshot, trigger_s: float, batch_s: float | None = None) -> Snapshot:
    return Snapshot.from_dict({**snapshot.to_dict(), "trigger_interval_s": trigger_s, "batch_duration_s": batch_s})


def test_a_backlog_within_a_few_batches_of_arrivals_is_not_draining_when_it_wobbles_down():
    # clicks-file at 15 rec/s a query, two queries, a 2 s trigger: the file listing read 60 then
    # 52 records (whole files of 7.5), 1.7 s of input; a healthy source has up to 3 batches'
    # worth, 30 x 2 x 3 + 1 = 181 records, waiting. That is the batch cycle, not a drain.
    history = decisions((15, Plan("test", "app", observation=Observation(figures={BACKLOG_FIGURE: 60}))))
    plan = guard(scale_plan(4, 2), with_batches(snap(backlog=52, arrival=30), 2.0), history,
                 no_scale_down_while_draining=True)
    assert target(plan) == 2 and not notes(plan, "draining")
    assert plan.observation.figure(BACKLOG_FIGURE) == 52
    # A batch longer than its trigger is the cycle: 3 batches of 4 s are 361 records.
    history = decisions((15, Plan("test", "app", observation=Observation(figures={BACKLOG_FIGURE: 400}))))
    assert target(guard(scale_plan(4, 2), with_batches(snap(backlog=300, arrival=30), 2.0, 4.0), history,
                        no_scale_down_while_draining=True)) == 2
    # Above it, a fall is a drain and holds: 300 records (10 s of input, within the SLO) over 181.
    plan = guard(scale_plan(4, 2), with_batches(snap(backlog=300, arrival=30), 2.0), history,
                 no_scale_down_while_draining=True)
    assert target(plan) is None and "is draining (400 -> 300 records over the last 15 s)" in notes(plan, "draining")[0]


def test_draining_never_holds_a_scale_up_nor_acts_on_an_unknown_backlog():
    assert target(guard(scale_plan(4, 6), snap(backlog=500), no_scale_down_while_draining=True)) == 6
    plan = guard(scale_plan(4, 2), snap(backlog=None), no_scale_down_while_draining=True)
    assert target(plan) == 2 and BACKLOG_FIGURE not in plan.observation.figures


# ---------------------------------------------------------------------------------------------
# 3. A cap on direction changes


def swings(*steps: tuple[float, int, int]) -> DecisionHistory:
    return decisions(*((age, scale_plan(a, b)) for age, a, b in steps))


def test_direction_changes_are_counted_from_the_history_within_the_hour():
    history = swings((5000, 2, 4), (3000, 4, 2), (2000, 2, 4), (1000, 4, 2))
    assert reversals(history, NOW - 3600) == (3, -1)
    assert reversals(history, NOW - 1500) == (1, -1)
    assert reversals(DecisionHistory.empty(), NOW - 3600) == (0, 0)


def test_at_the_cap_a_reversal_is_held_and_a_step_the_same_way_is_not():
    history = swings((3000, 2, 4), (2000, 4, 2), (1000, 2, 4))  # up, down, up: 2 reversals
    plan = guard(scale_plan(4, 2), history=history, max_direction_changes_per_hour=2)
    assert target(plan) is None
    assert "changed direction 2 time(s) in the last hour (cap 2)" in notes(plan, "direction changes")[0]
    assert target(guard(scale_plan(4, 6), history=history, max_direction_changes_per_hour=2)) == 6
    assert target(guard(scale_plan(4, 2), history=history, max_direction_changes_per_hour=3)) == 2
    assert target(guard(scale_plan(4, 2), history=history)) == 2  # no cap by default


# ---------------------------------------------------------------------------------------------
# 4. Excluded periods


def at(day: int, hour: int, minute: int = 0) -> float:
    """Epoch seconds of 2026-11-23 (a Monday) + `day` days at hour:minute UTC."""
    return datetime(2026, 11, 23 + day, hour, minute, tzinfo=UTC).timestamp()


def test_periods_are_read_with_days_ranges_and_windows_over_midnight():
    weekend = parse_period("Sat 00:00-06:00")
    assert weekend.days == {5} and weekend.contains(at(5, 3)) and not weekend.contains(at(5, 6))
    lunch = parse_period("Mon-Fri 12:00-13:00")
    assert lunch.days == {0, 1, 2, 3, 4} and lunch.contains(at(2, 12, 30)) and not lunch.contains(at(5, 12, 30))
    night = parse_period("daily 23:30-00:30")
    assert night.contains(at(0, 23, 45)) and night.contains(at(1, 0, 15)) and not night.contains(at(1, 0, 30))
    late = parse_period("Sat 22:00-02:00")  # runs into Sunday, not into Saturday morning
    assert late.contains(at(6, 1)) and not late.contains(at(5, 1))
    assert parse_period("Fri-Mon 00:00-24:00").days == {4, 5, 6, 0}
    assert parse_period("mon,Wed 08:00-09:00").days == {0, 2}


@pytest.mark.parametrize(("text", "problem"), [
    ("Sat", r"expected '<days> HH:MM-HH:MM \[ZONE\]'"),
    ("Sun 25:00-01:00", "the start 25:00 is not a time of day"),
    ("Sun 01:00-01:60", "the end 01:60 is not a time of day"),
    ("Funday 01:00-02:00", "'Funday' is not a day"),
    ("daily 05:00-05:00", "an empty window"),
])
def test_a_bad_period_says_what_is_wrong(text: str, problem: str):
    with pytest.raises(PeriodError, match=problem):
        parse_period(text)


def test_a_bad_period_in_the_config_is_an_error_naming_it_with_exit_2(tmp_path: Path):
    with pytest.raises(ValidationError, match=r"excluded_periods\[1\] = 'Sun 25:00-01:00': the start 25:00"):
        GuardsConfig(excluded_periods=["Sat 00:00-06:00", "Sun 25:00-01:00"])
    bad = tmp_path / "bad.yaml"
    bad.write_text("guards:\n  excluded_periods: ['Mon-Fri 12:00-13:00', 'weekend 00:00-06:00']\n")
    result = CliRunner().invoke(main, ["check-config", str(bad)])
    assert result.exit_code == 2 and "'weekend' is not a day" in result.output


def test_no_scaling_action_is_taken_inside_an_excluded_period_but_warnings_pass():
    plan = guard(scale_plan(4, 6, WARNING), excluded_periods=["Mon-Fri 12:00-13:00", "Sat 00:00-06:00"])
    assert target(plan) is None and plan.warnings == (WARNING,)
    assert notes(plan, "excluded period") == ["guard excluded period: scale_executors 4 -> 6 held: inside the "
                                              "excluded period 'Sat 00:00-06:00' (UTC)"]
    outside = snap(taken_at=at(5, 12))
    assert target(guard(scale_plan(4, 6), outside, excluded_periods=["Sat 00:00-06:00"])) == 6


# ---------------------------------------------------------------------------------------------
# 5. Per-app mode


def test_the_global_dry_run_makes_acting_apps_advise():
    act, advise, observe = (AppConfig(name="a", mode=m) for m in AppMode)
    assert [app_mode(a, False) for a in (act, advise, observe)] == [AppMode.ACT, AppMode.ADVISE, AppMode.OBSERVE]
    assert [app_mode(a, True) for a in (act, advise, observe)] == [AppMode.ADVISE, AppMode.ADVISE, AppMode.OBSERVE]
    with pytest.raises(ValidationError, match="mode"):
        AppConfig(name="a", mode="watch")


def moded(mode: str, *plans: Plan) -> loops.Loop:
    run = loops.loop(*plans)
    run.autoscaler.configure(Config.model_validate({"apps": [{"name": loops.APP, "mode": mode}]}))
    return run


def test_an_advised_app_is_logged_as_a_dry_run_and_nothing_is_carried_out():
    run = moded("advise", loops.SCALE_UP)
    assert run.autoscaler.cycle(loops.APP) == "ok"
    assert [d.mode for d in run.decisions.records] == ["dry_run"] and run.executor.started == []
    assert run.state.last_action_at == loops.TAKEN_AT  # as loop.dry_run: the cooldown shows what would be done
    acting = moded("act", loops.SCALE_UP)
    acting.autoscaler.cycle(loops.APP)
    assert [d.mode for d in acting.decisions.records] == ["acted"] and len(acting.executor.started) == 1


def test_an_observed_app_is_collected_and_logged_without_a_plan_or_a_written_decision():
    run = moded("observe", loops.SCALE_UP)
    assert run.autoscaler.cycle(loops.APP) == "ok"
    assert run.collector.calls == 1 and run.planner.seen == []  # no plan made
    assert run.decisions.records == [] and run.executor.started == []
    [decided] = run.decided()
    assert decided.decision.mode == "observe" and decided.decision_id is None and decided.decision.plan.actions == ()
    assert run.ended()[0].decision == decided.decision


def test_an_observed_cycle_is_logged_with_its_mode_and_counted_as_no_decision():
    run = moded("observe", loops.SCALE_UP)
    run.autoscaler.cycle(loops.APP)
    [decided] = run.decided()
    metrics = DaemonMetrics()
    with capture_logs() as logs:
        LogFeed().emit(decided)
        MetricsFeed(metrics).emit(decided)
    [cycle] = [e for e in logs if e["event"] == "cycle"]
    assert cycle["mode"] == "observe" and cycle["actions"] == [] and cycle["decision_id"] is None
    counted = [s for m in metrics.registry.collect() for s in m.samples if s.name == "sparkscale_decisions_total"]
    assert counted == []  # no plan was made: no decision counted
    metrics.close()


@pytest.mark.parametrize(("mode", "dry_run", "refused"), [("act", False, False), ("advise", False, True),
                                                          ("observe", False, True), ("act", True, True)])
def test_the_operators_requests_are_refused_for_an_app_that_does_not_act(monkeypatch: pytest.MonkeyPatch, mode: str,
                                                                          dry_run: bool, refused: bool):
    seen: list[bool] = []
    monkeypatch.setattr(wiring.manual, "serve_requests", lambda *args: seen.append(args[6]) or [])
    desk = wiring.RequestDesk(None, None, None, None, "me")  # type: ignore[arg-type]
    cfg = Config.model_validate({"apps": [{"name": "a", "mode": mode}], "loop": {"dry_run": dry_run}})
    desk.serve(cfg, cfg.app("a"), None, None)  # type: ignore[arg-type]
    assert seen == [refused]


# ---------------------------------------------------------------------------------------------
# 6. Quotas


SHAPED = AppConfig(name="app", min_executors=1, max_executors=8, executor_cores=2, executor_memory_mb=1024)


def up_to(to: int, quotas: QuotasConfig, cores: int = 0, memory_mb: int = 0, executors: int = 2) -> Plan:
    history = replace(DecisionHistory.empty(), cores_held_elsewhere=cores, memory_mb_held_elsewhere=memory_mb)
    given = GuardInput(snap(executors), history, SHAPED)
    return apply_capacity(scale_plan(executors, to), given, quotas)


def test_a_scale_up_over_the_cores_quota_is_cut_to_what_fits_with_a_warning():
    plan = up_to(8, QuotasConfig(max_cores=16), cores=6)  # 10 cores left: 5 executors of 2 cores
    assert target(plan) == 5
    assert notes(plan, "quota")[0].startswith("guard quota: scale_executors 2 -> 8 cut to 5: quotas.max_cores = 16")
    [warning] = plan.warnings
    assert warning.reason.startswith(f"{QUOTA_WARNING} app needs 8 executors, the quota allows 5")
    assert not plan.observation.figure(SHORT_FIGURE)  # the quota, not the cluster, was short
    assert target(up_to(8, QuotasConfig())) == 8  # no quota: as before


def test_the_memory_quota_binds_too_and_a_full_quota_holds_the_scale_up():
    assert target(up_to(8, QuotasConfig(max_cores=100, max_memory_mb=4096), memory_mb=1024)) == 3
    plan = up_to(8, QuotasConfig(max_cores=10), cores=6)  # 4 cores left: the app's own 2 executors
    assert target(plan) is None and "held" in notes(plan, "quota")[0] and len(plan.warnings) == 1
    assert target(up_to(1, QuotasConfig(max_cores=1), cores=6)) == 1  # a scale-down is never cut


def test_the_quota_inputs_round_trip_through_a_history_file():
    history = replace(DecisionHistory.empty(), cores_held_elsewhere=6, memory_mb_held_elsewhere=4096)
    back = DecisionHistory.from_dict(history.to_dict())
    assert (back.cores_held_elsewhere, back.memory_mb_held_elsewhere) == (6, 4096)
    assert DecisionHistory.from_dict({}).cores_held_elsewhere == 0  # an older file still reads


class ScaleUp:
    """A policy that always asks for 8 executors."""

    def decide(self, snapshot: Snapshot, history: DecisionHistory, cfg: Any, app: AppConfig) -> Plan:
        return scale_plan(len(snapshot.executors), 8)


def test_the_planner_applies_the_configured_guards_and_quotas(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(planner, "get_policy", lambda name: ScaleUp())
    cfg = Config.model_validate({"apps": [{"name": "app"}], "quotas": {"max_cores": 5}})
    history = replace(DecisionHistory.empty(), cores_held_elsewhere=1)
    plan = planner.decide(snap(2), history, cfg, cfg.app("app"))
    assert target(plan) == 4 and notes(plan, "quota")  # 5 cores, 1 held elsewhere: 4 executors of 1 core
    frozen = Config.model_validate({"apps": [{"name": "app"}], "guards": {"excluded_periods": ["Sat 00:00-06:00"]}})
    plan = planner.decide(snap(2), DecisionHistory.empty(), frozen, frozen.app("app"))
    assert target(plan) is None and notes(plan, "excluded period")
