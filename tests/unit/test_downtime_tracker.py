"""EDRP's downtime measured on this cluster: each executor change the daemon carried out followed
into the snapshots after it, the longest batch less the usual one, the model's own terms taken off."""

from __future__ import annotations

from dataclasses import replace

from sparkscale.config import AppConfig, Config
from sparkscale.daemon.cluster_planner import ClusterPlanner
from sparkscale.daemon.downtime_tracker import DowntimeTracker, measured_kind
from sparkscale.model.plan import Action
from sparkscale.model.snapshot import ExecutorFigures, Snapshot
from sparkscale.policies.placement.downtime import DowntimeModel


def snap(at: float, median_s: float, longest_s: float, state_bytes: int = 0, app: str = "a",
         ended_at: float | None = None) -> Snapshot:
    progress = {"longest_batch_s": longest_s, "state_memory_bytes": state_bytes}
    if ended_at is not None:
        progress["longest_batch_ended_at_s"] = ended_at
    return Snapshot.from_dict({
        "version": 1, "app": app, "query": "q", "taken_at": at, "window_s": 10.0, "batch_duration_s": median_s,
        "executors": [], "operators": [{"id": "source", "source": True, "parallelism": 1, "arrival_rate": 10.0,
                                       "instances": []}], "edges": [],
        "extensions": {"progress": progress}})


def test_the_kind_of_each_action():
    assert measured_kind(Action.scale_executors(1, 2, "up")) == "executor_add"
    assert measured_kind(Action.scale_executors(3, 1, "down")) == "executor_remove"
    assert measured_kind(Action.set_parallelism("stage1", 4, 6, "more")) == "restart"
    assert measured_kind(Action.replace_executor("2", "move")) is None  # adds and removes at once


def test_a_scale_up_stall_is_its_longest_batch_less_the_usual_one_and_t_syn():
    tracker = DowntimeTracker(horizon_s=30.0)
    tracker.observe("a", snap(90.0, 1.0, 1.2))  # before: batches of 1 s
    tracker.action_done("a", Action.scale_executors(1, 2, "up"), 100.0, 110.0)
    tracker.observe("a", snap(115.0, 4.0, 8.0))  # the new executor: one batch of 8 s
    tracker.observe("a", snap(125.0, 1.0, 1.1))
    assert tracker.samples(DowntimeModel()) == {}  # still inside the horizon: not closed
    tracker.observe("a", snap(141.0, 1.0, 1.0))  # past 110 + 30 s: closed
    assert tracker.samples(DowntimeModel()) == {"executor_add": [8.0 - 1.0 - 1.0]}  # less t_syn's 1 s
    model = tracker.model(DowntimeModel())
    assert model.executor_add_s == 6.0 and model.executor_remove_s == DowntimeModel().executor_remove_s
    # a batch during the watch does not move the baseline, and another app's snapshots are not this app's
    tracker.observe("b", snap(150.0, 9.0, 30.0, app="b"))
    assert tracker.samples(DowntimeModel())["executor_add"] == [6.0]


def test_a_removal_leaves_out_the_state_reload_the_model_adds_itself():
    tracker = DowntimeTracker(horizon_s=20.0)
    tracker.observe("a", snap(0.0, 1.0, 1.0, state_bytes=400_000_000))
    tracker.action_done("a", Action.scale_executors(2, 1, "down"), 10.0, 12.0)
    tracker.observe("a", snap(20.0, 2.0, 12.0))
    tracker.observe("a", snap(40.0, 1.0, 1.0))
    # stall 11 s; the model adds t_syn 1 s and half the 400 MB at 50 MB/s = 4 s itself
    assert tracker.samples(DowntimeModel()) == {"executor_remove": [11.0 - 1.0 - 4.0]}
    assert DowntimeTracker(10.0).model(DowntimeModel(restart_s=7.0)).restart_s == 7.0  # unmeasured: as given


def test_no_change_is_measured_without_a_batch_seen_before_it():
    tracker = DowntimeTracker(horizon_s=10.0)
    tracker.action_done("a", Action.scale_executors(1, 2, "up"), 0.0, 1.0)
    tracker.observe("a", snap(20.0, 1.0, 9.0))
    assert tracker.samples(DowntimeModel()) == {}


def test_the_cluster_planner_gives_edrp_the_measured_downtime():
    cfg = Config.model_validate({"apps": [{"name": "a"}], "loop": {"interval_s": 5.0, "window_s": 10.0},
                                 "placement": {"name": "edrp"}})
    planner = ClusterPlanner(cfg)
    app = AppConfig(name="a")
    planner.observe(app, snap(0.0, 1.0, 1.0), None)
    planner.downtime.action_done("a", Action.scale_executors(1, 2, "up"), 1.0, 2.0)
    planner.observe(app, snap(10.0, 1.0, 5.0), None)
    planner.observe(app, snap(30.0, 1.0, 1.0), None)
    assert planner.downtime.model(cfg.placement.edrp.downtime).executor_add_s == 3.0
    # The same stall, as the app's own cost of an executor start (restart-aware catch-up).
    assert planner.change_costs("a", "ccr") == {"executor_add": (4.0,)}


def test_a_long_batch_that_ended_before_the_action_is_the_previous_actions_stall_not_its_own():
    """Two changes in a row: the first one's 9 s batch is still in the window when the second starts."""
    tracker = DowntimeTracker(horizon_s=20.0)
    tracker.observe("a", snap(90.0, 1.0, 1.0, ended_at=89.0))
    tracker.action_done("a", Action.scale_executors(1, 2, "up"), 100.0, 101.0)
    tracker.observe("a", snap(110.0, 1.0, 10.0, ended_at=109.0))  # the addition's stall
    tracker.observe("a", snap(122.0, 1.0, 10.0, ended_at=109.0))  # closed at 121; still the longest in the window
    tracker.action_done("a", Action.scale_executors(2, 1, "down"), 115.0, 116.0)
    tracker.observe("a", snap(130.0, 1.0, 10.0, ended_at=109.0))
    tracker.observe("a", snap(140.0, 1.0, 1.5, ended_at=139.0))  # the removal's own batches
    samples = tracker.samples(DowntimeModel(sync_s=0.0))
    assert samples["executor_add"] == [9.0]
    assert samples["executor_remove"] == [0.5]  # not 9 s again


def test_the_cluster_planner_tells_each_app_what_the_others_hold_for_the_quotas():
    cfg = Config.model_validate({"apps": [{"name": "a"}, {"name": "b"}]})
    planner = ClusterPlanner(cfg)
    a = AppConfig(name="a", executor_cores=2, executor_memory_mb=2048)
    b = AppConfig(name="b", executor_cores=1, executor_memory_mb=1024)
    planner.observe(a, replace(snap(0.0, 1.0, 1.0), executors=snap_executors(2)), None)
    # b has 1 executor and asked for 3: what it asked for counts, it is on its way.
    asked = Snapshot.from_dict({**snap(0.0, 1.0, 1.0, app="b").to_dict(),
                                "executors": [e.to_dict() for e in snap_executors(1)],
                                "extensions": {"app": {"requested_executors": 3}}})
    planner.observe(b, asked, None)
    assert planner.held_elsewhere("a") == (3, 3072)
    assert planner.held_elsewhere("b") == (4, 4096)
    planner.forget("b")
    assert planner.held_elsewhere("a") == (0, 0)


def snap_executors(n: int) -> tuple[ExecutorFigures, ...]:
    return tuple(ExecutorFigures(id=str(k), host="127.0.0.1", cores=1) for k in range(n))
