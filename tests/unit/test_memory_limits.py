"""A memory increase held to `quotas.max_memory_mb` and to the workers' room (issue 33,
policies/memory_limits.py, policies/capacity.py): cut to the largest memory that fits, in steps of
256 MB, or held with a warning naming the limit when the cut is under `policy.memory`'s step; no
quota or no cluster view leaves it alone, and a decrease is never cut."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sparkscale.config import AppConfig, Config, GuardsConfig, PolicyConfig, QuotasConfig
from sparkscale.config.memory import MemoryPolicyConfig
from sparkscale.model.plan import Action, ActionType, Plan
from sparkscale.model.snapshot import Snapshot
from sparkscale.policies import planner
from sparkscale.policies.capacity import SHORT_WARNING, apply_capacity, memory_room_mb, short_warnings, shortfall
from sparkscale.policies.guard_input import GuardInput
from sparkscale.policies.history import DecisionHistory
from sparkscale.policies.quotas import QUOTA_WARNING
from tests.unit.test_memory import LOOP_OFF, OFF
from tests.unit.test_memory import snap as heap_snap

APP = AppConfig(name="app", min_executors=1, max_executors=8, executor_cores=2, executor_memory_mb=1024)
SETTINGS = MemoryPolicyConfig(recommend=True, apply=True)  # step: 256 MB (25 % of 1024, min_change_mb 256)
Workers = list[tuple[int, int, int]]  # (free cores, free MB, this app's executors on it)


def snap(workers: Workers | None = None, executors: int = 4, error: str | None = None) -> Snapshot:
    """`executors` of the app; with `workers`, a cluster view whose executors are the app's, in order."""
    extensions: dict[str, Any] = {}
    if workers is not None:
        ids = iter(range(executors))
        extensions["cluster"] = {"app_id": "app-1", "unreachable": [], "executor_memory_mb": 1024, "workers": [
            {"id": f"w{i}", "host": f"h{i}", "cores_free": c, "memory_free_mb": m,
             "executors": [str(next(ids)) for _ in range(own)]} for i, (c, m, own) in enumerate(workers)]}
        if error is not None:
            extensions["cluster"]["error"] = error
    return Snapshot.from_dict({
        "version": 1, "app": "app", "query": "q", "taken_at": 100.0, "window_s": 30.0,
        "executors": [{"id": str(i), "host": "h", "cores": 2} for i in range(executors)],
        "operators": [{"id": "source", "source": True, "parallelism": 1, "arrival_rate": 1.0, "instances": []}],
        "edges": [], "extensions": extensions,
    })


def given(snapshot: Snapshot, held_mb: int = 0, claimed: int = 0) -> GuardInput:
    history = replace(DecisionHistory.empty(), memory_mb_held_elsewhere=held_mb, cores_claimed_elsewhere=claimed)
    return GuardInput(snapshot, history, APP)


def memory_plan(from_mb: int = 1024, to_mb: int = 2048) -> Plan:
    return Plan("test", "app", actions=(Action.set_executor_memory("q", from_mb, to_mb, "heap peak"),))


def memory(plan: Plan) -> tuple[int | None, int | None] | None:
    found = [a for a in plan.actions if a.type == ActionType.SET_EXECUTOR_MEMORY]
    return (found[0].from_, found[0].to) if found else None


def lines(plan: Plan, start: str) -> list[str]:
    return [line for line in plan.explanation if line.startswith(start)]


# -- the quota --------------------------------------------------------------------------------------


def test_an_increase_over_the_memory_quota_is_cut_to_the_largest_256_mb_step_that_fits() -> None:
    # 8000 - 1000 held elsewhere = 7000 MB for 4 executors: 1750 each -> 1536
    plan = apply_capacity(memory_plan(), given(snap(), held_mb=1000), QuotasConfig(max_memory_mb=8000), SETTINGS)
    assert memory(plan) == (1024, 1536)
    [cut] = [a for a in plan.actions if a.type == ActionType.SET_EXECUTOR_MEMORY]
    assert cut.reason == "heap peak; cut to what the quota allows"
    assert lines(plan, "guard quota:") == [
        "guard quota: set_executor_memory 1024 -> 2048 MB cut to 1536 MB: quotas.max_memory_mb = 8000 (1000 MB "
        "held by the other managed apps, 4 executor(s) of this app)"]
    [warning] = plan.warnings
    assert warning.reason.startswith(f"{QUOTA_WARNING} app needs executors of 2048 MB, the quota allows 1536 MB "
                                     "each: quotas.max_memory_mb = 8000")
    # Exactly the quota: left alone; the count is what the app asked for when more than it holds.
    exact = memory_plan()
    assert apply_capacity(exact, given(snap(), 1000), QuotasConfig(max_memory_mb=1000 + 4 * 2048), SETTINGS) is exact
    asked = snap()
    asked = replace(asked, extensions={**asked.extensions, "app": {"requested_executors": 5}})
    assert memory(apply_capacity(memory_plan(), given(asked, 1000), QuotasConfig(max_memory_mb=1000 + 4 * 2048),
                                 SETTINGS)) == (1024, 1536)  # 8192 / 5 = 1638 -> 1536


def test_a_cut_under_the_step_holds_the_increase_with_a_warning_naming_the_quota() -> None:
    # 6120 - 1000 = 5120 / 4 = 1280: 256 MB more, exactly the step: cut; one MB less: 1024, held.
    assert memory(apply_capacity(memory_plan(), given(snap(), 1000), QuotasConfig(max_memory_mb=6120),
                                 SETTINGS)) == (1024, 1280)
    plan = apply_capacity(memory_plan(), given(snap(), 1000), QuotasConfig(max_memory_mb=6119), SETTINGS)
    assert memory(plan) is None
    [warning] = plan.warnings
    assert warning.reason.startswith(f"{QUOTA_WARNING} app needs executors of 2048 MB")
    assert "it keeps 1024 MB: quotas.max_memory_mb = 6119" in warning.reason
    [line] = lines(plan, "guard quota:")
    assert line.startswith("guard quota: set_executor_memory 1024 -> 2048 MB held: quotas.max_memory_mb = 6119")
    assert line.endswith("1024 MB fits, under the step of 256 MB above 1024 MB (policy.memory.min_change_mb, "
                         "min_change_fraction)")
    # The configured step decides: 1280 is 256 MB more, under a min_change_mb of 512.
    bigger_step = MemoryPolicyConfig(apply=True, min_change_mb=512)
    assert memory(apply_capacity(memory_plan(), given(snap(), 1000), QuotasConfig(max_memory_mb=6120),
                                 bigger_step)) is None
    # An app already over the quota at its current memory: held, never grown.
    assert memory(apply_capacity(memory_plan(), given(snap(), 9000), QuotasConfig(max_memory_mb=8000),
                                 SETTINGS)) is None


def test_no_memory_quota_leaves_the_increase_alone() -> None:
    plan = memory_plan()
    assert apply_capacity(plan, given(snap(), 10**6), QuotasConfig(), SETTINGS) is plan
    assert apply_capacity(plan, given(snap(), 10**6), QuotasConfig(max_cores=1), SETTINGS) is plan
    assert apply_capacity(plan, given(snap(), 10**6), None, SETTINGS) is plan


# -- the workers' room ------------------------------------------------------------------------------


def test_an_increase_the_workers_cannot_hold_is_cut_counting_the_apps_own_executors_as_released() -> None:
    # w0: 0 + 2 x 2 cores, 512 + 2 x 1024 MB; w1: 2 + 2 x 2 cores, 1024 + 2 x 1024 MB. 4 executors of 2
    # cores at 1280 MB: 2 + 2; at 1281 MB: 1 + 2.
    tight = snap([(0, 512, 2), (2, 1024, 2)])
    assert memory_room_mb(given(tight), 4) == (1280, 10)
    plan = apply_capacity(memory_plan(), given(tight), QuotasConfig(), SETTINGS)
    assert memory(plan) == (1024, 1280)
    [line] = lines(plan, "guard cluster capacity:")
    assert line.startswith("guard cluster capacity: set_executor_memory 1024 -> 2048 MB cut to 1280 MB: 4 "
                           "executor(s) of 2 core(s) must fit on the workers (10 core(s) free")
    [warning] = short_warnings(plan)
    assert warning.startswith(f"{SHORT_WARNING} app needs executors of 2048 MB, the cluster allows 1280 MB each")
    assert shortfall(plan) == 0  # no executor was cut
    # Room for 4 at 2048 MB once the app's own are released: left alone.
    roomy = memory_plan()
    assert apply_capacity(roomy, given(snap([(0, 2048, 2), (0, 2048, 2)])), None, SETTINGS) is roomy


def test_an_increase_held_when_the_workers_room_is_under_the_step() -> None:
    # Each worker holds exactly its 2 executors of 1024 MB: 1024 MB fits, 1025 does not.
    full = snap([(0, 0, 2), (0, 0, 2)])
    assert memory_room_mb(given(full), 4) == (1024, 8)
    plan = apply_capacity(memory_plan(), given(full), None, SETTINGS)
    assert memory(plan) is None
    [warning] = short_warnings(plan)
    assert "it keeps 1024 MB" in warning
    assert lines(plan, "guard cluster capacity:")[0].startswith(
        "guard cluster capacity: set_executor_memory 1024 -> 2048 MB held: ")
    # Other apps' claimed cores come first: 6 slots of 2 cores at 2048 MB, 2 of them claimed: the 4 fit;
    # 3 claimed: no memory leaves room for the 4.
    claimed = snap([(2, 4096, 2), (2, 4096, 2)])
    assert memory(apply_capacity(memory_plan(), given(claimed, claimed=4), None, SETTINGS)) == (1024, 2048)
    assert memory(apply_capacity(memory_plan(), given(claimed, claimed=6), None, SETTINGS)) is None
    # Not enough cores for the count at any memory: 0 fits.
    assert memory_room_mb(given(snap([(0, 8192, 1)], executors=4)), 4) == (0, 2)


def test_an_unknown_cluster_view_cuts_nothing() -> None:
    plan = memory_plan()
    assert apply_capacity(plan, given(snap(None)), None, SETTINGS) is plan
    assert apply_capacity(plan, given(snap([(0, 0, 2), (0, 0, 2)], error="master down")), None, SETTINGS) is plan
    assert memory_room_mb(given(snap([])), 4) is None


def test_a_decrease_is_never_cut() -> None:
    down = memory_plan(2048, 1024)
    tight = given(snap([(0, 0, 2), (0, 0, 2)]), held_mb=10**6)
    assert apply_capacity(down, tight, QuotasConfig(max_memory_mb=256), SETTINGS) is down


# -- through the planner ----------------------------------------------------------------------------


def test_the_planner_cuts_the_memory_action_by_the_configured_quota_and_step() -> None:
    # A heap peak of 900 MB recommends 1536 MB for the 4 executors of 1024; the quota leaves 1280 each.
    app = AppConfig(name="app", min_executors=1, max_executors=8, executor_memory_mb=1024)
    config = Config(apps=[app], guards=GuardsConfig(**OFF), loop=LOOP_OFF, policy=PolicyConfig(memory=SETTINGS),
                    quotas=QuotasConfig(max_memory_mb=4 * 1280))
    plan = planner.decide(heap_snap(heap_mb=900), DecisionHistory.empty(), config, app)
    assert memory(plan) == (1024, 1280) and lines(plan, "guard quota:")
    stepped = config.model_copy(update={"policy": PolicyConfig(memory=MemoryPolicyConfig(
        recommend=True, apply=True, min_change_mb=512))})
    held = planner.decide(heap_snap(heap_mb=900), DecisionHistory.empty(), stepped, app)
    assert memory(held) is None and any(w.reason.startswith(QUOTA_WARNING) for w in held.warnings)
