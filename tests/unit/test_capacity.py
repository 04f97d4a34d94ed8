"""The cluster-capacity guard: a scale-up asks for no more executors than the cluster can start,
counting what this app and the other managed apps asked for and have not got yet."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sparkscale.config import AppConfig
from sparkscale.model.plan import Action, Plan
from sparkscale.model.snapshot import Snapshot
from sparkscale.policies.capacity import apply_capacity, room_for, short_warnings, shortfall
from sparkscale.policies.guards import GuardInput
from sparkscale.policies.history import DecisionHistory

APP = AppConfig(name="app", min_executors=1, max_executors=8, executor_cores=2, executor_memory_mb=1024)


def snap(free: list[tuple[int, int]] | None, executors: int = 2, requested: int | None = None) -> Snapshot:
    """Workers with (free cores, free MB); None: no cluster view."""
    extensions: dict[str, Any] = {}
    if free is not None:
        extensions["cluster"] = {"app_id": "app-1", "unreachable": [], "executor_memory_mb": 1024, "workers": [
            {"id": f"w{i}", "host": f"h{i}", "cores_free": c, "memory_free_mb": m, "executors": []}
            for i, (c, m) in enumerate(free)]}
    if requested is not None:
        extensions["app"] = {"requested_executors": requested}
    return Snapshot.from_dict({
        "version": 1, "app": "app", "query": "q", "taken_at": 100.0, "window_s": 30.0,
        "executors": [{"id": str(i), "host": "h", "cores": 2} for i in range(executors)],
        "operators": [{"id": "source", "source": True, "parallelism": 1, "arrival_rate": 1.0, "instances": []}],
        "edges": [], "extensions": extensions,
    })


def up(to: int, snapshot: Snapshot, claimed: int = 0) -> Plan:
    plan = Plan("ds2", "app", actions=(Action.scale_executors(2, to, "needs more"),))
    history = replace(DecisionHistory.empty(), cores_claimed_elsewhere=claimed)
    return apply_capacity(plan, GuardInput(snapshot, history, APP))


def scale(plan: Plan) -> tuple[int | None, int | None] | None:
    a = next((a for a in plan.actions if a.type == "scale_executors"), None)
    return None if a is None else (a.from_, a.to)


def test_room_counts_whole_executors_of_the_apps_shape_on_each_worker():
    # 5 cores -> 2 executors of 2 cores; 3 cores but 1500 MB -> 1 (memory); 1 core -> none
    assert room_for(GuardInput(snap([(5, 8192), (3, 1500), (1, 8192)]), DecisionHistory.empty(), APP)) == (3, 9)
    assert room_for(GuardInput(snap(None), DecisionHistory.empty(), APP)) is None


def test_a_scale_up_that_fits_is_left_alone():
    plan = up(5, snap([(4, 8192), (2, 8192)]))  # room for 3 more: 2 -> 5 fits
    assert scale(plan) == (2, 5) and not plan.warnings


def test_a_scale_up_beyond_the_clusters_room_is_cut_and_says_so():
    plan = up(8, snap([(4, 8192), (2, 8192)]))
    assert scale(plan) == (2, 5)
    assert any("cluster short of resources: app needs 8 executors, gets 5" in w.reason for w in plan.warnings)
    assert any(line.startswith("guard cluster capacity") for line in plan.explanation)
    assert shortfall(plan) == 3 and shortfall(up(5, snap([(4, 8192), (2, 8192)]))) == 0


def test_executors_still_starting_and_other_apps_claims_take_room_first():
    # room for 3; this app's 1 starting executor and another app's 2 claimed cores leave 1
    plan = up(6, snap([(4, 8192), (2, 8192)], requested=3), claimed=2)
    assert scale(plan) == (2, 4)  # base 3 (asked already) + 1


def test_no_room_drops_the_scale_up_but_keeps_the_warning():
    plan = up(4, snap([(1, 8192), (0, 8192)]))
    assert scale(plan) is None and len(plan.warnings) == 1 and shortfall(plan) == 2


def test_no_view_and_scale_downs_pass_untouched():
    assert scale(up(8, snap(None))) == (2, 8)
    down = Plan("ds2", "app", actions=(Action.scale_executors(2, 1, "too many"),))
    assert apply_capacity(down, GuardInput(snap([(0, 0)]), DecisionHistory.empty(), APP)) is down


def test_sparkscale_status_shows_the_clusters_warnings():
    import json

    from sparkscale.daemon.operator_view import AppLine, status_table
    from sparkscale.daemon.status import AppStatus

    cut = up(8, snap([(4, 8192), (2, 8192)]))
    status = AppStatus("d", "leader", 1, 100.0, "ok", warnings=short_warnings(cut))
    assert AppStatus.from_dict(json.loads(json.dumps(status.to_dict()))) == status
    lines = status_table([AppLine("app", "d", status)], 110.0).splitlines()
    assert lines[lines.index("warnings:") + 1].startswith("  app: cluster short of resources: app needs 8")
    assert "warnings:" not in status_table([AppLine("app", "d", AppStatus("d", "leader", 1, 100.0, "ok"))], 110.0)
