"""EDRP (Cardellini, Lo Presti, Nardelli, Russo Russo, CCPE 2017) as a cluster placement policy.

Why: EDRP chooses how many executors each app gets and where they run in a single decision. It
weighs response time and cost against the downtime of getting there (eq. 12), so it does not
reconfigure for a small gain. Solved as a MILP with scipy's HiGHS, in its count form (docs/policies.md,
"EDRP"; its rows are numbered 1-13 below).

Count form: with S_u = 1, R_{i,U} (eq. 1) depends only on |U| and C_{i,U} (eq. 2) is linear in it.
So integer counts x[a,w] plus a one-hot count choice z[a,k] replace the paper's multiset binaries.
The network terms (eq. 3-4) are left out: there is one LAN, and traffic is OTD's concern.

Spark, not in the paper:
- an operator is an app, a replica is an executor, a node is a standalone worker;
- R_a(k): the paper's M/M/1 (§7.2), traffic split equally, with Spark's unit of work as its
  customer by default: a trigger interval's records served as one batch at k mu, so R is a
  record's end-to-end latency in seconds (`response_s`, `response_model: microbatch`; "mm1" is
  the paper's per-record form 1/(mu - lambda/k)); k is infeasible when lambda >= k*mu. An app
  with no `rate_per_executor` keeps its current count (it may still move) and is left out of R;
- R in eq. (12) is the worst app's response (each app is a path of eq. 5). C is pi * cores per hour;
- additions are realisable only on `model.landing[app]`: the master places new executors and the
  daemon cannot choose where. An entry of None allows no addition; an app with no entry has no
  restriction (offline what-if, the paper's EDRP). Across the apps that have an entry, at most one
  executor is added per call, since each addition moves the others' landing worker;
- removals pick the newest executors on the workers the solution empties. A relocation that
  keeps the count becomes a `Move` (make-before-break). Otherwise a `CountChange`: its `remove`
  lists exactly which executors go, so it adds `target - now + len(remove)`; the daemon must add
  before it removes, or freed cores would move the landing worker;
- downtime is `downtime.action_downtime_s`, recomputed from the solution (T_a may float above it).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import numpy as np
from pydantic import BaseModel

from sparkscale.policies.placement.base import register_placement, settings_as
from sparkscale.policies.placement.downtime import action_downtime_s, action_kind
from sparkscale.policies.placement.edrp_model import (
    EdrpSettings,
    Instance,
    app_response,
    metrics,
    objective,
    prepare,
)
from sparkscale.policies.placement.model import (
    ClusterModel,
    CountChange,
    ExecutorKey,
    Move,
    PlacementPlan,
    PlacementWarning,
)

EPS = 1e-6  # per executor added or removed: p, q become exact parts of x - x0, fewer changes win ties


@dataclass
class _Milp:
    """Columns and rows as they are added; `A` is built sparse at the end."""

    lb: list[float] = field(default_factory=list)
    ub: list[float] = field(default_factory=list)
    integer: list[int] = field(default_factory=list)
    cost: list[float] = field(default_factory=list)
    rows: list[tuple[dict[int, float], float, float]] = field(default_factory=list)

    def var(self, lb: float, ub: float, integer: bool, cost: float = 0.0) -> int:
        self.lb.append(lb)
        self.ub.append(ub)
        self.integer.append(int(integer))
        self.cost.append(cost)
        return len(self.lb) - 1

    def row(self, coefs: dict[int, float], lo: float, hi: float) -> None:
        self.rows.append((coefs, lo, hi))

    def solve(self, time_limit_s: float, gap: float) -> Any:
        from scipy.optimize import Bounds, LinearConstraint, milp  # here: listing policies need no scipy
        from scipy.sparse import coo_array

        r_idx = [i for i, (coefs, _, _) in enumerate(self.rows) for _ in coefs]
        c_idx = [j for coefs, _, _ in self.rows for j in coefs]
        vals = [v for coefs, _, _ in self.rows for v in coefs.values()]
        a = coo_array((vals, (r_idx, c_idx)), shape=(len(self.rows), len(self.lb))).tocsr()
        lo, hi = np.array([r[1] for r in self.rows]), np.array([r[2] for r in self.rows])
        return milp(np.array(self.cost), integrality=np.array(self.integer),
                    bounds=Bounds(np.array(self.lb), np.array(self.ub)), constraints=LinearConstraint(a, lo, hi),
                    options={"time_limit": time_limit_s, "mip_rel_gap": gap})


def _build(inst: Instance, s: EdrpSettings,
           landing: Mapping[str, str | None]) -> tuple[_Milp, dict[tuple[str, str], int]]:
    """Variables x, p, q, b, z, g, T_a, r, t and rows 1-13 of the count form (docs/policies.md)."""
    m, dm = _Milp(), s.downtime
    r = m.var(0.0, math.inf if inst.soft_r else s.r_max_s, False, s.w_r / s.r_max_s)  # EDRP eq. (15) as a bound
    t = m.var(0.0, s.td_max_s, False, s.w_d / s.td_max_s)  # EDRP eq. (17) as a bound
    x: dict[tuple[str, str], int] = {}
    cores: dict[str, dict[int, float]] = {w: {} for w in inst.workers}
    mem: dict[str, dict[int, float]] = {w: {} for w in inst.workers}
    cost_row: dict[int, float] = {}
    landed: dict[int, float] = {}
    for a in inst.apps:
        name, x0 = a.app, inst.x0[a.app]
        n0 = sum(x0.values())
        rho = a.state_bytes / (n0 * dm.reload_bytes_per_s) if n0 else 0.0  # s per removed executor
        restricted = name in landing
        link: dict[int, float] = {}  # row 5
        change: dict[int, float] = {}  # row 8
        adds: dict[int, float] = {}
        removes: dict[int, float] = {}
        g = m.var(0, 1, True)  # a is reconfigured
        add_flag = m.var(0, 1, True)  # something is added to a
        big_m = 0
        tail: list[tuple[int, int]] = []  # (b, q) per worker with executors of a
        for w in inst.workers:
            u = inst.ub[name, w]
            if u == 0 and x0[w] == 0:
                continue
            price = s.price_per_core_hour * a.executor_cores
            xi = x[name, w] = m.var(0, u, True, s.w_c / inst.c_max * price)
            cores[w][xi] = a.executor_cores  # row 1 (EDRP eq. 18)
            mem[w][xi] = a.executor_memory_mb  # row 2
            cost_row[xi] = price  # row 3 (EDRP eq. 16)
            link[xi] = 1.0
            delta = {xi: 1.0}
            p_ub = u if not restricted else (1 if landing[name] == w else 0)
            if p_ub > 0:
                p = m.var(0, p_ub, True, EPS)
                delta[p] = -1.0
                change[p] = adds[p] = 1.0
                if restricted:
                    landed[p] = 1.0
            if x0[w] > 0:
                q = m.var(0, x0[w], True, EPS)
                b = m.var(0, 1, True)  # some executor of a leaves w
                delta[q] = 1.0
                change[q] = removes[q] = 1.0
                m.row({q: 1.0, b: -float(x0[w])}, -np.inf, 0.0)  # row 7
                tail.append((b, q))
            m.row(delta, x0[w], x0[w])  # row 6: x - p + q = x0
            big_m += u + x0[w]
        z = {k: m.var(0, 1, True) for k in inst.counts[name]}
        m.row(dict.fromkeys(z.values(), 1.0), 1.0, 1.0)  # row 4 (EDRP eq. 19)
        m.row({**link, **{zi: -float(k) for k, zi in z.items()}}, 0.0, 0.0)  # row 5
        if change:
            m.row({**change, g: -float(big_m)}, -np.inf, 0.0)  # row 8
        if adds:
            m.row({**adds, add_flag: -float(big_m)}, -np.inf, 0.0)
        ta = m.var(0.0, np.inf, False)
        base = {ta: 1.0, g: -dm.sync_s, add_flag: -dm.executor_add_s}
        m.row(base, 0.0, np.inf)  # row 9 for a worker a loses nothing on
        for b, q in tail:  # row 9: EDRP eq. (25)-(27), (31) "otherwise", per source worker
            m.row({**base, b: -dm.executor_remove_s, q: -rho}, 0.0, np.inf)
        m.row({t: 1.0, ta: -1.0}, 0.0, np.inf)  # row 10 (EDRP eq. 14)
        if a.rate_per_executor is not None:  # row 11 (EDRP eq. 13)
            resp = {zi: -float(app_response(inst, s, a, k) or 0.0) for k, zi in z.items()}
            m.row({r: 1.0, **resp}, 0.0, np.inf)
        for part in (adds, removes) if s.reduced else ():  # row 13 (rEDRP): one add, one remove, or one move
            m.row(part, -np.inf, 1.0)
    for w in inst.workers:
        if cores[w]:
            m.row(cores[w], -np.inf, float(inst.kc[w]))  # row 1
            m.row(mem[w], -np.inf, float(inst.km[w]))  # row 2
    if cost_row:
        m.row(cost_row, -np.inf, inst.c_max)  # row 3
    if landed:
        m.row(landed, -np.inf, 1.0)  # row 12: one addition per call among landing-restricted apps
    return m, x


def _check(inst: Instance, s: EdrpSettings, dep: dict[str, dict[str, int]],
           landing: Mapping[str, str | None]) -> str | None:
    """Why the rounded solution breaks a constraint (scipy issue #22812), or None."""
    for w in inst.workers:
        if sum(a.executor_cores * dep[a.app][w] for a in inst.apps) > inst.kc[w]:
            return f"cores on {w}"
        if sum(a.executor_memory_mb * dep[a.app][w] for a in inst.apps) > inst.km[w]:
            return f"memory on {w}"
    added_restricted = 0
    for a in inst.apps:
        x, x0 = dep[a.app], inst.x0[a.app]
        if sum(x.values()) not in inst.counts[a.app] or any(x[w] < 0 for w in x):
            return f"count of {a.app}"
        adds = {w: x[w] - x0[w] for w in x if x[w] > x0[w]}
        if a.app in landing:
            added_restricted += sum(adds.values())
            if any(w != landing[a.app] for w in adds):
                return f"landing of {a.app}"
        if s.reduced and (sum(adds.values()) > 1 or sum(max(x0[w] - x[w], 0) for w in x) > 1):
            return f"rEDRP neighbourhood of {a.app}"
    if added_restricted > 1:
        return "more than one addition"
    r, cost, t_d = metrics(inst, s, dep)
    if ((r > s.r_max_s * (1 + 1e-9) and not inst.soft_r) or cost > inst.c_max * (1 + 1e-9)
            or t_d > s.td_max_s * (1 + 1e-9)):
        return "a bound (R_max, C_max or T_D,max)"
    return None


def _why_infeasible(inst: Instance, s: EdrpSettings) -> tuple[str, dict[str, float]]:
    """What cannot be held: the daemon's "the cluster is short"."""
    short = [a for a in inst.apps if not inst.counts[a.app]]
    if short:
        a = short[0]
        return (f"{a.app}: no count in {a.min_executors}..{a.max_executors} keeps R <= R_max={s.r_max_s:g}s "
                f"at lambda={a.arrival_rate:g}/s, mu={a.rate_per_executor:g}/s per executor",
                {"apps_short": float(len(short))})
    need = sum(a.executor_cores * min(inst.counts[a.app]) for a in inst.apps)
    have = sum(inst.kc.values())
    cost = sum(s.price_per_core_hour * a.executor_cores * min(inst.counts[a.app]) for a in inst.apps)
    figures = {"cores_needed": float(need), "cores_available": float(have), "cost_min_per_h": cost}
    if need > have:
        return f"the apps need at least {need} cores, the workers can give {have}", figures
    if cost > inst.c_max:
        return f"the least cost {cost:g}/h is above C_max={inst.c_max:g}/h", figures
    return ("no deployment fits the workers' cores and memory, the bounds and the landing rule "
            "(additions only on the master's landing worker, one per call)"), figures


@dataclass(frozen=True)
class EdrpResult:
    plan: PlacementPlan
    deployment: dict[str, dict[str, int]] | None  # the chosen x (app -> worker -> executors), None: no solution


def _actions(inst: Instance, s: EdrpSettings, dep: dict[str, dict[str, int]]) -> tuple[list[Move], list[CountChange]]:
    moves: list[Move] = []
    counts: list[CountChange] = []
    for a in inst.apps:
        x0, x = inst.x0[a.app], dep[a.app]
        kind = action_kind(x0, x)
        if kind == "none":
            continue
        gone = [ExecutorKey(a.app, i) for w in inst.workers if x0[w] > x[w]
                for i in inst.ids[a.app][w][-(x0[w] - x[w]):]]  # newest ids on the worker
        targets = [w for w in inst.workers for _ in range(max(x[w] - x0[w], 0))]
        down = action_downtime_s(a, x0, x, s.downtime)
        n0, n1 = sum(x0.values()), sum(x.values())
        if kind == "migration":
            for key, target in zip(gone, targets, strict=True):
                source = next(w for w in inst.workers if key.id in inst.ids[a.app][w])
                moves.append(Move(key, source, target, 0.0, f"EDRP: relocate ({down:.1f}s downtime)"))
        else:
            counts.append(CountChange(a.app, n0, n1, tuple(gone),
                                      f"EDRP {kind}: {n0} -> {n1} executors ({down:.1f}s downtime)"))
    return moves, counts


def solve(model: ClusterModel, settings: EdrpSettings | None = None) -> EdrpResult:
    """The EDRP plan and the deployment it chose. When no deployment holds R_max (an app needs more
    executors than it may have, or more than the one addition a call can place), the paper's
    problem is infeasible; an operator still wants the best step towards it: the MILP is solved
    again with R_max in the objective only, and the plan carries the `infeasible` warning."""
    s = settings or EdrpSettings()
    hard = _solve(model, s, soft_r=False)
    failed = next((w for w in hard.plan.warnings if w.kind == "infeasible"), None)
    if failed is None or not model.apps:
        return hard
    soft = _solve(model, s, soft_r=True)
    if soft.deployment is None:
        return hard
    warning = PlacementWarning("infeasible", f"{failed.message}; planned the best step without the R_max bound",
                               dict(failed.figures))
    plan = soft.plan
    relaxed = replace(plan, warnings=(warning, *plan.warnings), figures={**plan.figures, "r_bound_relaxed": 1.0})
    return EdrpResult(relaxed, soft.deployment)


def _solve(model: ClusterModel, s: EdrpSettings, soft_r: bool) -> EdrpResult:
    inst = prepare(model, s, soft_r)
    landing = {a.app: model.landing[a.app] for a in inst.apps if a.app in model.landing}
    f_now = objective(inst, s, inst.x0)
    figures: dict[str, float] = {"objective_now": f_now} if math.isfinite(f_now) else {}
    m, x = _build(inst, s, landing)
    figures |= {"variables": float(len(m.lb)), "constraints": float(len(m.rows))}

    def no_change(kind: str, message: str, extra: Mapping[str, float] | None = None) -> EdrpResult:
        warning = PlacementWarning(kind, message, dict(extra or {}))
        return EdrpResult(PlacementPlan("edrp", warnings=(warning,), figures=figures, reason=message), None)

    if not inst.apps:
        return EdrpResult(PlacementPlan("edrp", figures=figures, reason="no managed app"), {})
    if any(not inst.counts[a.app] for a in inst.apps):
        return no_change("infeasible", *_why_infeasible(inst, s))
    started = time.perf_counter()
    res = m.solve(s.time_limit_s, s.mip_rel_gap)
    figures["solve_ms"] = (time.perf_counter() - started) * 1000.0
    warnings: list[PlacementWarning] = []
    if res.status == 2:
        return no_change("infeasible", *_why_infeasible(inst, s))
    if res.status == 1:
        if res.x is None:
            return no_change("solver_limit", f"no solution within {s.time_limit_s:g}s: {res.message}")
        warnings.append(PlacementWarning("solver_limit", f"best found within {s.time_limit_s:g}s, may not be optimal"))
    elif res.status != 0 or res.x is None:
        return no_change("solver_error", f"HiGHS status {res.status}: {res.message}")
    dep = {a.app: {w: round(res.x[x[a.app, w]]) if (a.app, w) in x else 0 for w in inst.workers}
           for a in inst.apps}
    broken = _check(inst, s, dep, landing)
    if broken:
        return no_change("solver_check", f"the solver's solution breaks {broken}; nothing changed")
    r, cost, t_d = metrics(inst, s, dep)
    f = objective(inst, s, dep)
    changes = sum(abs(dep[a.app][w] - inst.x0[a.app][w]) for a in inst.apps for w in inst.workers)
    figures |= {"objective": f, "milp_objective": float(res.fun) - EPS * changes, "response_s": r,
                "cost_per_h": cost, "downtime_s": t_d}
    moves, counts = _actions(inst, s, dep)
    reason = (f"EDRP F={f:.4f} (now {f_now:.4f})" if math.isfinite(f_now) else f"EDRP F={f:.4f}")
    plan = PlacementPlan("edrp", tuple(moves), tuple(counts), tuple(warnings), f, figures,
                         reason + ("" if moves or counts else ": keep the current deployment"),
                         sized=tuple(a.app for a in inst.apps if a.rate_per_executor is not None))
    return EdrpResult(plan, dep)


@register_placement
class Edrp:
    name: ClassVar[str] = "edrp"
    config_model: ClassVar[type[EdrpSettings]] = EdrpSettings

    def place(self, model: ClusterModel, settings: BaseModel | None) -> PlacementPlan:
        return solve(model, settings_as(settings, EdrpSettings)).plan
