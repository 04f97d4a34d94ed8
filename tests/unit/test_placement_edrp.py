"""EDRP as a placement policy: the MILP against a hand-checked instance and a brute-force
enumeration, what the downtime weight does, infeasibility, the landing rule, the downtime model."""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import pytest
from pydantic import ValidationError

from sparkscale.policies.placement.base import default_settings, get_placement, registered_placements
from sparkscale.policies.placement.downtime import DowntimeModel, action_downtime_s, action_kind, from_measured
from sparkscale.policies.placement.edrp import Edrp, solve
from sparkscale.policies.placement.edrp_model import EdrpSettings, objective_of, response_s, soft_response_s
from sparkscale.policies.placement.model import AppDemand, ClusterModel, ExecutorKey, PlacedExecutor, Worker

Shape = tuple[int, int]  # cores, memory MB
Dep = dict[str, dict[str, int]]  # app -> worker -> executors


def cluster(workers: Mapping[str, Shape], apps: Sequence[tuple[AppDemand, Sequence[int]]],
            landing: Mapping[str, str | None] | None = None,
            ids: Mapping[str, Sequence[str]] | None = None) -> ClusterModel:
    """Workers (id -> cores, memory), apps with their current count per worker (in `workers`
    order); executor ids 1, 2, ... per app unless `ids` gives them (in placement order)."""
    names = list(workers)
    execs: list[PlacedExecutor] = []
    for app, counts in apps:
        given = iter((ids or {}).get(app.app, ()))
        n = 0
        for w, k in zip(names, counts, strict=True):
            for _ in range(k):
                n += 1
                eid = next(given, str(n))
                execs.append(PlacedExecutor(ExecutorKey(app.app, eid), w, app.executor_cores, app.executor_memory_mb))
    used = {w: (sum(e.cores for e in execs if e.worker == w), sum(e.memory_mb for e in execs if e.worker == w))
            for w in names}
    ws = tuple(Worker(w, f"h-{w}", c, m, used[w][0], used[w][1]) for w, (c, m) in workers.items())
    return ClusterModel(ws, tuple(execs), tuple(a for a, _ in apps), landing=dict(landing or {}))


def app(name: str, cores: int = 1, lam: float = 0.0, mu: float | None = 100.0, lo: int = 1, hi: int = 4,
        state: int = 0, mem: int = 1024) -> AppDemand:
    return AppDemand(name, cores, mem, lo, hi, arrival_rate=lam, rate_per_executor=mu, state_bytes=state)


def current(model: ClusterModel) -> dict[str, dict[str, int]]:
    x = {a.app: {w.id: 0 for w in model.workers} for a in model.apps}
    for e in model.executors:
        x[e.key.app][e.worker] += 1
    return x


# (a) a hand-checked instance of the count form (docs/policies.md), from the paper's formulas
NOTES_DOWNTIME = DowntimeModel(sync_s=1.0, executor_add_s=0.0, executor_remove_s=0.01, reload_bytes_per_s=100.0)
def paper_settings(**settings: Any) -> EdrpSettings:
    """The paper's per-record M/M/1 (§7.2) and its R_max of 0.15 s unless given: the instances
    below are in the paper's units."""
    return EdrpSettings(**{"response_model": "mm1", "r_max_s": 0.15, **settings})


NOTES_SETTINGS = paper_settings(r_max_s=0.2, c_max=20.0, td_max_s=10.0, downtime=NOTES_DOWNTIME)
W3 = {"w1": (4, 8192), "w2": (4, 8192), "w3": (4, 8192)}


def notes_instance() -> ClusterModel:
    a = app("a", cores=1, lam=250.0, state=100)
    b = AppDemand("b", 2, 2048, 1, 4, arrival_rate=150.0, rate_per_executor=100.0, state_bytes=100)
    return cluster(W3, [(a, [2, 0, 0]), (b, [1, 1, 0])])


def test_notes_instance_edrp() -> None:
    model = notes_instance()
    result = solve(model, NOTES_SETTINGS)
    assert result.plan.objective == pytest.approx(0.22, abs=1e-9)
    dep = result.deployment
    assert dep is not None
    assert dep["a"]["w1"] == 2 and sum(dep["a"].values()) == 4  # a: 2 -> 4, nothing removed
    assert dep["b"] == {"w1": 1, "w2": 1, "w3": 0}
    # where the two additions go is a tie in F: the hand-checked [2, 1, 1] scores the same
    assert objective_of(model, NOTES_SETTINGS, {"a": {"w1": 2, "w2": 1, "w3": 1}}) == pytest.approx(0.22)
    (change,) = result.plan.counts
    assert (change.app, change.executors_now, change.executors_target, change.remove) == ("a", 2, 4, ())
    figures = result.plan.figures
    assert figures["response_s"] == pytest.approx(0.04) and figures["downtime_s"] == pytest.approx(1.0)
    assert figures["cost_per_h"] == pytest.approx(8.0)
    assert figures["milp_objective"] == pytest.approx(objective_of(model, NOTES_SETTINGS, dep), abs=1e-6)


def test_notes_instance_reduced() -> None:
    model = notes_instance()
    result = solve(model, NOTES_SETTINGS.model_copy(update={"reduced": True}))
    assert result.plan.objective == pytest.approx(0.235, abs=1e-9)
    assert result.deployment is not None and sum(result.deployment["a"].values()) == 3
    assert result.plan.figures["variables"] > 0 and result.plan.figures["constraints"] > 0


# (b) the MILP's optimum equals a brute-force enumeration
def brute_force(model: ClusterModel, s: EdrpSettings, soft: bool = False) -> tuple[float, list[Dep], list[Dep]]:
    """min F, its argmins and every deployment that meets the constraints, written out independently."""
    names = [w.id for w in model.workers]
    x0 = current(model)
    free = {w.id: (w.cores - w.cores_used, w.memory_mb - w.memory_used_mb) for w in model.workers}
    for e in model.executors:
        c, m = free[e.worker]
        free[e.worker] = (c + e.cores, m + e.memory_mb)
    c_max = s.c_max if s.c_max is not None else s.price_per_core_hour * sum(w.cores for w in model.workers)
    options: list[list[dict[str, int]]] = []
    for a in model.apps:
        n0 = sum(x0[a.app].values())
        if a.rate_per_executor is None:
            allowed = {n0}
        elif soft:  # R_max in the objective only: every count in range
            allowed = set(range(max(a.min_executors, 1), a.max_executors + 1))
        else:
            allowed = {k for k in range(max(a.min_executors, 1), a.max_executors + 1)
                       if a.arrival_rate < k * a.rate_per_executor
                       and 1 / (a.rate_per_executor - a.arrival_rate / k) <= s.r_max_s}
        top = max(allowed, default=0)
        mine = []
        for vec in itertools.product(range(top + 1), repeat=len(names)):
            x = dict(zip(names, vec, strict=True))
            adds = {w: x[w] - x0[a.app][w] for w in names if x[w] > x0[a.app][w]}
            removes = sum(max(x0[a.app][w] - x[w], 0) for w in names)
            if sum(vec) not in allowed or action_downtime_s(a, x0[a.app], x, s.downtime) > s.td_max_s:
                continue
            if a.app in model.landing and any(w != model.landing[a.app] for w in adds):
                continue
            if s.reduced and (sum(adds.values()) > 1 or removes > 1):
                continue
            mine.append(x)
        options.append(mine)
    best, argbest, feasible = math.inf, [], []
    for combo in itertools.product(*options):
        dep = {a.app: x for a, x in zip(model.apps, combo, strict=True)}
        if any(sum(a.executor_cores * dep[a.app][w] for a in model.apps) > free[w][0]
               or sum(a.executor_memory_mb * dep[a.app][w] for a in model.apps) > free[w][1] for w in names):
            continue
        if sum(s.price_per_core_hour * a.executor_cores * sum(dep[a.app].values()) for a in model.apps) > c_max:
            continue
        if sum(max(dep[a][w] - x0[a][w], 0) for a in model.landing if a in dep for w in names) > 1:
            continue
        feasible.append(dep)
        f = objective_of(model, s, dep, soft_r=soft)
        if f < best - 1e-12:
            best, argbest = f, [dep]
        elif abs(f - best) <= 1e-12:
            argbest.append(dep)
    return best, argbest, feasible


def random_instance(rng: random.Random) -> tuple[ClusterModel, EdrpSettings]:
    workers = {f"w{i}": (rng.randint(2, 8), rng.choice([2048, 4096, 8192])) for i in range(rng.randint(2, 3))}
    room = {w: list(shape) for w, shape in workers.items()}
    apps = []
    for k in range(rng.randint(1, 3)):
        mu = None if rng.random() < 0.15 else rng.uniform(50, 150)
        hi = rng.randint(1, 3)
        lam = 0.0 if mu is None else rng.uniform(0, 0.7 * hi * mu)
        a = app(f"a{k}", cores=rng.choice([1, 1, 2]), lam=lam, mu=mu, lo=1, hi=hi,
                state=rng.choice([0, 10**8, 5 * 10**8]), mem=rng.choice([512, 1024, 2048]))
        counts = [0] * len(workers)
        for _ in range(rng.randint(1, 3)):  # executors now, each on a random worker with room
            fits = [i for i, w in enumerate(workers)
                    if room[w][0] >= a.executor_cores and room[w][1] >= a.executor_memory_mb]
            if fits:
                i = rng.choice(fits)
                w = list(workers)[i]
                room[w][0] -= a.executor_cores
                room[w][1] -= a.executor_memory_mb
                counts[i] += 1
        apps.append((a, counts))
    landing: dict[str, str | None] = {}
    for a, _ in apps:
        if rng.random() < 0.3:
            landing[a.app] = rng.choice([*workers, *workers, None])
    raw = [rng.random() for _ in range(3)]
    if rng.random() < 0.25:
        raw[2] = 0.0  # w_d = 0: the paper's baseline
    w_r, w_c = raw[0] / sum(raw), raw[1] / sum(raw)
    settings = paper_settings(
        w_r=w_r, w_c=w_c, w_d=max(1.0 - w_r - w_c, 0.0), r_max_s=rng.choice([0.05, 0.2, 1.0, 1.0]),
        c_max=rng.choice([None, None, 8.0]), td_max_s=rng.choice([10.0, 60.0]), reduced=rng.random() < 0.3,
        downtime=DowntimeModel(sync_s=rng.uniform(0.5, 2), executor_remove_s=rng.uniform(0, 6),
                               executor_add_s=rng.choice([0.0, 0.5]), reload_bytes_per_s=1e8))
    return cluster(workers, apps, landing), settings


@pytest.mark.parametrize("seed", range(60))
def test_milp_matches_brute_force(seed: int) -> None:
    model, s = random_instance(random.Random(seed))
    best, argbest, feasible = brute_force(model, s)
    result = solve(model, s)
    if not argbest:  # the paper's problem has no solution: the best step without the R_max bound
        best, argbest, feasible = brute_force(model, s, soft=True)
        assert [w.kind for w in result.plan.warnings][:1] == ["infeasible"]
        if not argbest:
            assert result.deployment is None and result.plan.empty
            return
        assert result.plan.figures["r_bound_relaxed"] == 1.0
        assert result.plan.objective == pytest.approx(best, abs=1e-5)
        assert result.deployment in feasible
        return
    dep = result.deployment
    assert dep is not None, result.plan.warnings
    assert result.plan.objective == pytest.approx(best, abs=1e-5)
    assert result.plan.objective == pytest.approx(objective_of(model, s, dep), abs=1e-12)
    assert result.plan.figures["milp_objective"] == pytest.approx(result.plan.objective, abs=1e-6)
    assert dep in feasible  # the chosen deployment is one the enumeration allows


# (c) the downtime weight
def test_downtime_weight_keeps_deployment() -> None:
    """w_d = 0 scales in for a small gain in cost; a large w_d keeps the deployment, as the paper's
    balanced run does ("terminating this extra replica is not worth more downtime")."""
    a = app("a", cores=1, lam=50.0, state=10**9)
    model = cluster(W3, [(a, [1, 1, 1])])
    base = {"r_max_s": 0.2, "c_max": 12.0, "td_max_s": 60.0}
    eager = solve(model, paper_settings(w_r=0.5, w_c=0.5, w_d=0.0, **base)).plan
    careful = solve(model, paper_settings(w_r=0.05, w_c=0.05, w_d=0.9, **base)).plan
    assert len(eager.counts) == 1 and eager.counts[0].executors_target < 3
    assert eager.figures["downtime_s"] > 0
    assert careful.empty and careful.figures["downtime_s"] == 0.0
    assert careful.sized == ("a",)  # kept, not left to the scaling policy
    # the gain eager takes is real in its own weights, and not worth it in careful's
    eager_dep = {"a": {"w1": 1, "w2": 0, "w3": 0}}
    assert objective_of(model, paper_settings(w_r=0.5, w_c=0.5, w_d=0.0, **base), eager_dep) < \
        objective_of(model, paper_settings(w_r=0.5, w_c=0.5, w_d=0.0, **base), current(model))
    careful_s = paper_settings(w_r=0.05, w_c=0.05, w_d=0.9, **base)
    assert objective_of(model, careful_s, eager_dep) > objective_of(model, careful_s, current(model))


# (d) infeasible: a warning that names what cannot be held, and the best step towards it
def test_infeasible_cores() -> None:
    a = app("a", cores=1, lam=250.0)  # needs 3 executors, the cluster has 2 cores
    plan = solve(cluster({"w1": (2, 8192)}, [(a, [1])]), paper_settings(r_max_s=1.0)).plan
    warning = plan.warnings[0]
    assert warning.kind == "infeasible" and "cores" in warning.message
    assert warning.figures["cores_needed"] == 3 and warning.figures["cores_available"] == 2
    assert [(c.executors_now, c.executors_target) for c in plan.counts] == [(1, 2)]  # all the cluster has


def test_infeasible_app_named() -> None:
    a = app("slow", cores=1, lam=250.0, hi=2)  # 2 executors cannot keep up with 250/s at 100/s each
    plan = get_placement("edrp").place(cluster(W3, [(a, [1, 0, 0])]), paper_settings())
    assert plan.warnings[0].kind == "infeasible" and "slow" in plan.warnings[0].message
    assert [c.executors_target for c in plan.counts] == [2]  # its max: as close as it may get
    assert math.isfinite(plan.objective) and plan.figures["r_bound_relaxed"] == 1.0
    assert plan.sized == ("slow",)  # the relaxed plan sizes it too


def test_an_overloaded_app_ranks_more_executors_better_without_the_bound() -> None:
    a = app("slow", cores=1, lam=250.0, hi=2)
    assert soft_response_s(a, 2, 0.15) < soft_response_s(a, 1, 0.15) < math.inf
    assert response_s(a, 2) == math.inf


# (e) additions only on the landing worker, one per call
@pytest.mark.parametrize("landing", ["w2", "w3"])
def test_addition_on_landing_worker(landing: str) -> None:
    a = app("a", cores=1, lam=150.0)  # needs 2 executors
    result = solve(cluster(W3, [(a, [1, 0, 0])], landing={"a": landing}), paper_settings(r_max_s=1.0))
    assert result.deployment == {"a": {w: int(w in ("w1", landing)) for w in W3}}
    assert result.plan.counts[0].executors_target == 2


def test_no_landing_worker_is_short() -> None:
    a = app("a", cores=1, lam=150.0)
    plan = solve(cluster(W3, [(a, [1, 0, 0])], landing={"a": None}), paper_settings(r_max_s=1.0)).plan
    assert plan.empty and plan.warnings[0].kind == "infeasible"


def test_one_addition_per_call_with_landing() -> None:
    """Both apps need a second executor. Without landing predictions both get one in this call;
    with them only one addition per call is realisable, so the cluster is short this cycle."""
    apps = [(app("a", lam=150.0), [1, 0, 0]), (app("b", lam=150.0), [0, 1, 0])]
    s = paper_settings(r_max_s=1.0)
    free = solve(cluster(W3, apps), s).deployment
    assert free is not None and [sum(free[n].values()) for n in ("a", "b")] == [2, 2]
    held = solve(cluster(W3, apps, landing={"a": "w3", "b": "w1"}), s).plan
    assert held.empty and [w.kind for w in held.warnings] == ["infeasible"]
    one = solve(cluster(W3, apps, landing={"a": "w3"}), s).deployment  # b has no prediction: unrestricted
    assert one is not None and one["a"] == {"w1": 1, "w2": 0, "w3": 1} and sum(one["b"].values()) == 2


def test_relocation_becomes_move() -> None:
    """b needs a second 3-core executor; only moving one of a's (fixed count) makes room on w1."""
    workers = {"w1": (4, 8192), "w2": (4, 8192)}
    a = app("a", cores=1, mu=None)
    b = app("b", cores=3, lam=150.0)
    model = cluster(workers, [(a, [2, 0]), (b, [0, 1])], ids={"a": ["7", "12"]})
    plan = solve(model, paper_settings(r_max_s=1.0)).plan
    (move,) = plan.moves
    assert (move.key, move.source, move.target) == (ExecutorKey("a", "12"), "w1", "w2")  # the newest id
    assert [(c.app, c.executors_target) for c in plan.counts] == [("b", 2)]


def test_scale_in_removes_newest() -> None:
    a = app("a", cores=1, lam=10.0, hi=3)
    model = cluster({"w1": (4, 8192)}, [(a, [3])], ids={"a": ["2", "10", "3"]})
    s = paper_settings(w_r=0.1, w_c=0.9, w_d=0.0)
    (change,) = solve(model, s).plan.counts
    assert change.executors_target == 1 and set(change.remove) == {ExecutorKey("a", "10"), ExecutorKey("a", "3")}
    (change,) = solve(model, s.model_copy(update={"reduced": True})).plan.counts
    assert change.executors_target == 2 and change.remove == (ExecutorKey("a", "10"),)


# the solver's answer is checked, not trusted
def test_solver_limit_without_solution(monkeypatch: pytest.MonkeyPatch) -> None:
    import scipy.optimize

    def limit(*args: object, **kwargs: object) -> scipy.optimize.OptimizeResult:
        return scipy.optimize.OptimizeResult(status=1, x=None, fun=None, message="Time limit reached")

    monkeypatch.setattr(scipy.optimize, "milp", limit)
    plan = solve(notes_instance(), NOTES_SETTINGS).plan
    assert plan.empty and [w.kind for w in plan.warnings] == ["solver_limit"]


def test_solver_limit_uses_incumbent(monkeypatch: pytest.MonkeyPatch) -> None:
    import scipy.optimize

    real = scipy.optimize.milp

    def limited(*args: object, **kwargs: object) -> scipy.optimize.OptimizeResult:
        res = real(*args, **kwargs)
        res.status = 1
        return res

    monkeypatch.setattr(scipy.optimize, "milp", limited)
    plan = solve(notes_instance(), NOTES_SETTINGS).plan
    assert plan.objective == pytest.approx(0.22) and len(plan.counts) == 1
    assert [w.kind for w in plan.warnings] == ["solver_limit"]


def test_solution_breaking_capacity_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """scipy issue #22812: HiGHS may report "optimal" for a point that breaks a bound."""
    import scipy.optimize

    real = scipy.optimize.milp

    def broken(*args: object, **kwargs: object) -> scipy.optimize.OptimizeResult:
        res = real(*args, **kwargs)
        res.x = res.x + 3.0  # every count 3 higher: more than any worker holds
        return res

    monkeypatch.setattr(scipy.optimize, "milp", broken)
    plan = solve(notes_instance(), NOTES_SETTINGS).plan
    assert plan.empty and [w.kind for w in plan.warnings] == ["solver_check"]


# (f) the downtime model on hand-computed cases
DM = DowntimeModel(sync_s=1.0, executor_add_s=0.0, executor_remove_s=6.0, reload_bytes_per_s=50e6)
STATEFUL = app("s", state=100 * 10**6)


def test_downtime_unchanged_is_zero() -> None:
    assert action_downtime_s(STATEFUL, {"w1": 2}, {"w1": 2, "w2": 0}, DM) == 0.0
    assert action_kind({"w1": 2}, {"w1": 2, "w2": 0}) == "none"


def test_downtime_removal() -> None:
    now = {"w1": 2, "w2": 2}
    # 1 s sync + 6 s decommission + 1/4 of 100 MB reloaded at 50 MB/s
    assert action_downtime_s(STATEFUL, now, {"w1": 1, "w2": 2}, DM) == pytest.approx(7.5)
    # two source workers in parallel: the slower (2 removed, 1 s of reload) counts
    assert action_downtime_s(STATEFUL, now, {"w1": 0, "w2": 1}, DM) == pytest.approx(8.0)
    assert action_kind(now, {"w1": 1, "w2": 2}) == "scale-in"


def test_downtime_addition_only() -> None:
    assert action_downtime_s(STATEFUL, {"w1": 1}, {"w1": 1, "w2": 1}, DM) == pytest.approx(1.0)
    slow_add = DM.model_copy(update={"executor_add_s": 2.0})
    assert action_downtime_s(STATEFUL, {"w1": 1}, {"w1": 1, "w2": 1}, slow_add) == pytest.approx(3.0)
    assert action_kind({"w1": 1}, {"w1": 2}) == "scale-out"  # eq. (25) as printed has SO/SI swapped


def test_downtime_migration_and_restart() -> None:
    slow_add = DM.model_copy(update={"executor_add_s": 2.0})
    # 1 sync + 2 add + 6 remove + half of 100 MB at 50 MB/s
    assert action_downtime_s(STATEFUL, {"w1": 2}, {"w1": 1, "w2": 1}, slow_add) == pytest.approx(10.0)
    assert action_kind({"w1": 2}, {"w1": 1, "w2": 1}) == "migration"
    assert action_downtime_s(STATEFUL, {"w1": 2}, {"w1": 3}, DM, restart=True) == pytest.approx(21.0)


def test_from_measured() -> None:
    dm = from_measured({"executor_remove": [4.0, 9.0, 5.0], "restart": [], "executor_add": [0.5]})
    assert dm.executor_remove_s == 5.0 and dm.executor_add_s == 0.5
    assert dm.restart_s == DowntimeModel().restart_s and dm.sync_s == DowntimeModel().sync_s
    assert from_measured({"sync": [3.0]}, base=DM).executor_remove_s == DM.executor_remove_s
    with pytest.raises(ValueError, match="unknown"):
        from_measured({"executor_move": [1.0]})
    with pytest.raises(ValidationError):
        from_measured({"restart": [-1.0]})


def test_response_time() -> None:
    parser = app("parser", lam=220.0, mu=233.0)  # M/M/1: 1 / (mu - lam / k)
    assert response_s(parser, 1) == pytest.approx(1 / 13)
    assert response_s(parser, 2) == pytest.approx(1 / 123)
    assert response_s(app("x", lam=200.0), 2) == math.inf
    assert response_s(app("x", mu=None), 2) is None


# (g) settings
def test_settings_validation() -> None:
    with pytest.raises(ValidationError, match="must be 1"):
        paper_settings(w_r=0.5, w_c=0.5, w_d=0.5)
    with pytest.raises(ValidationError):
        paper_settings(w_r=-0.1, w_c=0.7, w_d=0.4)
    with pytest.raises(ValidationError):
        paper_settings(unknown=1)
    ok = paper_settings(w_r=0.6, w_c=0.0, w_d=0.4, downtime={"sync_s": 6.0})
    assert ok.downtime.sync_s == 6.0


# (h) registered
def test_registered() -> None:
    assert "edrp" in registered_placements()
    assert isinstance(get_placement("edrp"), Edrp)
    assert default_settings("edrp") == EdrpSettings()


# the default response model: a micro-batch query's end-to-end latency
def test_the_micro_batch_response_is_mm1_with_a_trigger_intervals_batch_as_the_customer() -> None:
    a = replace(app("a", lam=150.0, mu=100.0), trigger_s=2.0)
    # k = 2: rho = 0.75, S = rho T = 1.5 s, R = T/2 + S/(1 - rho) = 1 + 6 = 7 s
    assert response_s(a, 2, "microbatch") == pytest.approx(7.0)
    assert response_s(a, 3, "microbatch") == pytest.approx(1.0 + 1.0 / 0.5)  # rho 0.5
    assert response_s(a, 1, "microbatch") == math.inf  # 150/s at 100/s: never keeps up
    assert response_s(a, 4, "microbatch") < response_s(a, 3, "microbatch")


def test_by_default_edrp_sizes_apps_to_a_latency_bound_in_seconds() -> None:
    a = replace(app("a", cores=1, lam=150.0, mu=100.0, hi=4), trigger_s=2.0)
    model = cluster(W3, [(a, [1, 1, 0])])
    # R_max 5 s: 2 executors give 7 s (too slow), 3 give 3 s: the cheapest that holds it
    plan = solve(model, EdrpSettings(r_max_s=5.0, w_r=0.2, w_c=0.6, w_d=0.2)).plan
    assert [(c.executors_now, c.executors_target) for c in plan.counts] == [(2, 3)]
    assert plan.figures["response_s"] == pytest.approx(3.0) and not plan.warnings
