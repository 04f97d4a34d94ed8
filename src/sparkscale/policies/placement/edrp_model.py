"""EDRP's model of a deployment, apart from the solver: its settings, each app's response time for a
count (eq. 1, §7.2), the instance read off the cluster model (the count form's data,
docs/policies.md), and the objective F of any deployment (eq. 12), which `bench placement` also
evaluates on what it measured."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from pydantic import Field, model_validator

from sparkscale.config.base import ConfigSection
from sparkscale.model.placement import executor_order
from sparkscale.policies.placement.downtime import DowntimeModel, action_downtime_s
from sparkscale.policies.placement.model import AppDemand, ClusterModel

Counts = Mapping[str, Mapping[str, int]]  # app -> worker -> executors


class EdrpSettings(ConfigSection):
    """`placement.edrp`: Cardellini et al.'s EDRP, the executor counts and placement of every app
    together, a MILP weighing response time, cost and reconfiguration downtime.

    Weights default to the paper's "balanced" run (§7, Tables III and V).
    R_max and T_D,max default to the prototype's bounds (§7.3). C_max defaults to None: the cost of
    every core of the cluster, the worst any deployment can cost here."""

    w_r: float = Field(0.3, ge=0.0, description="Weight of response time in the objective (w_r + w_c + w_d = 1).")
    w_c: float = Field(0.3, ge=0.0, description="Weight of cost in the objective.")
    w_d: float = Field(0.4, ge=0.0, description="Weight of reconfiguration downtime in the objective.")
    response_model: Literal["microbatch", "mm1"] = Field("microbatch", description=(
        "Each app's response time for k executors: microbatch (an M/M/1 with one trigger interval's records "
        "as the customer: end-to-end latency) or mm1 (the paper's per-record M/M/1, §7.2)."))
    r_max_s: float = Field(10.0, gt=0.0, description=(  # the paper's 0.15 s is per record (mm1)
        "Bound on, and scale of, the response time, in seconds."))
    c_max: float | None = Field(None, gt=0.0, examples=[16.0], description=(
        "Bound on, and scale of, the cost, per hour; null = every core of the cluster at price_per_core_hour."))
    td_max_s: float = Field(60.0, gt=0.0, description="Bound on, and scale of, the downtime, in seconds.")
    price_per_core_hour: float = Field(1.0, gt=0.0, description="Cost of one executor core for an hour.")
    reduced: bool = Field(False, description=(
        "rEDRP (§7.2): each app's deployment changes by at most one executor added, removed or moved."))
    time_limit_s: float = Field(10.0, gt=0.0, description="Time limit of one MILP solve, in seconds.")
    mip_rel_gap: float = Field(1e-7, ge=0.0, description=(  # HiGHS's default 1e-4 would hide small F differences
        "Relative optimality gap at which the solver stops."))
    downtime: DowntimeModel = Field(DowntimeModel(), description=(
        "Downtime per kind of action, in seconds, until this cluster has measured them (the daemon plans "
        "with the median stall it measured, kept in Redis)."))

    @model_validator(mode="after")
    def _weights(self) -> EdrpSettings:
        total = self.w_r + self.w_c + self.w_d
        if abs(total - 1.0) > 1e-9:  # EDRP eq. (12): w_r + w_c + w_d = 1
            raise ValueError(f"w_r + w_c + w_d must be 1, not {total:g}")
        return self


def response_s(app: AppDemand, k: int, model: str = "mm1") -> float | None:
    """R_a(k), traffic split equally over the k executors (EDRP eq. 1); None: not modelled, inf:
    unstable (lambda >= k mu).

    - "mm1": the paper's M/M/1 per executor (§7.2), a record's time in seconds;
    - "microbatch": Spark serves a trigger interval's records (lambda T) as one batch at k mu
      records/s, so the batch is the M/M/1 customer: service time rho T (rho = lambda / (k mu)),
      response rho T / (1 - rho), plus the T / 2 a record waits on average for its batch to start:
      end-to-end latency in seconds, the figure an operator (and `bench placement`) measures."""
    mu, lam = app.rate_per_executor, app.arrival_rate
    if mu is None:
        return None
    if k <= 0 or lam >= k * mu:
        return math.inf
    if model == "microbatch":
        rho, t = lam / (k * mu), app.trigger_s
        return t / 2 + rho * t / (1 - rho)  # M/M/1: S / (1 - rho), S = rho T
    return 1.0 / (mu - lam / k)  # R_i(lambda_i/|U|) = (mu_i - lambda_i/|U|)^-1


OVERLOAD_R_FACTOR = 100.0  # soft mode: an unstable count's response, in R_max, per unit of utilisation


def soft_response_s(app: AppDemand, k: int, r_max_s: float, model: str = "mm1") -> float | None:
    """R_a(k) when R_max cannot be held (`solve`'s second try): finite for an unstable count too,
    100 R_max x its utilisation lambda/(k mu), so that more executors still rank better."""
    r = response_s(app, k, model)
    if r is None or math.isfinite(r) or k <= 0:
        return r
    return OVERLOAD_R_FACTOR * r_max_s * app.arrival_rate / (k * (app.rate_per_executor or 1.0))


@dataclass
class Instance:
    """The count form's data (docs/policies.md, "EDRP"), read off the model."""

    workers: list[str]
    apps: list[AppDemand]
    x0: dict[str, dict[str, int]]
    ids: dict[str, dict[str, list[str]]]  # app -> worker -> executor ids, oldest first
    kc: dict[str, int]
    km: dict[str, int]
    c_max: float
    counts: dict[str, list[int]] = field(default_factory=dict)  # K_a
    soft_r: bool = False  # R_max not held as a bound (no deployment could hold it)
    ub: dict[tuple[str, str], int] = field(default_factory=dict)  # u_{a,w}


def app_response(inst: Instance, s: EdrpSettings, a: AppDemand, k: int) -> float | None:
    if inst.soft_r:
        return soft_response_s(a, k, s.r_max_s, s.response_model)
    return response_s(a, k, s.response_model)


def prepare(model: ClusterModel, s: EdrpSettings, soft_r: bool = False) -> Instance:
    workers = [w.id for w in model.workers]
    known = set(workers)
    names = {a.app for a in model.apps}
    x0 = {a.app: dict.fromkeys(workers, 0) for a in model.apps}
    ids: dict[str, dict[str, list[str]]] = {a.app: {w: [] for w in workers} for a in model.apps}
    own_cores = dict.fromkeys(workers, 0)
    own_mem = dict.fromkeys(workers, 0)
    for e in model.executors:  # executors on unknown (dead) workers are gone: ignored
        if e.key.app in names and e.worker in known:
            x0[e.key.app][e.worker] += 1
            ids[e.key.app][e.worker].append(e.key.id)
            own_cores[e.worker] += e.cores
            own_mem[e.worker] += e.memory_mb
    for per in ids.values():
        for lst in per.values():
            lst.sort(key=executor_order)
    # capacity: free + the managed apps' own executors (EDRP eq. 18; C.2 Res_u)
    kc = {w.id: max(w.cores - w.cores_used + own_cores[w.id], 0) for w in model.workers}
    km = {w.id: max(w.memory_mb - w.memory_used_mb + own_mem[w.id], 0) for w in model.workers}
    c_max = cost_bound(s, sum(w.cores for w in model.workers))
    inst = Instance(workers, list(model.apps), x0, ids, kc, km, c_max, soft_r=soft_r)
    for a in model.apps:
        n0 = sum(x0[a.app].values())
        if a.rate_per_executor is None:
            inst.counts[a.app] = [n0]  # no service rate: the count stays, placement may change
        else:  # stable (lambda < k mu) and within R_max (EDRP eq. 15); soft: every count in range
            inst.counts[a.app] = [k for k in range(max(a.min_executors, 1), a.max_executors + 1)
                                  if (r := app_response(inst, s, a, k)) is not None and (soft_r or r <= s.r_max_s)]
        kmax = max(inst.counts[a.app], default=0)
        for w in workers:
            fit_c = kc[w] // a.executor_cores if a.executor_cores > 0 else kmax
            fit_m = km[w] // a.executor_memory_mb if a.executor_memory_mb > 0 else kmax
            inst.ub[a.app, w] = min(fit_c, fit_m, kmax)
    return inst


def metrics(inst: Instance, s: EdrpSettings, counts: Counts) -> tuple[float, float, float]:
    """R, C, T_D of a deployment (EDRP eqs. 5, 8, 10)."""
    r, cost, downs = 0.0, 0.0, []
    for a in inst.apps:
        x = counts.get(a.app, inst.x0[a.app])
        n = sum(x.values())
        ra = app_response(inst, s, a, n)
        if ra is not None:
            r = max(r, ra)  # EDRP eq. (5): the slowest path; each app is one
        cost += s.price_per_core_hour * a.executor_cores * n  # EDRP eq. (2), (8)
        downs.append(action_downtime_s(a, inst.x0[a.app], x, s.downtime))  # EDRP eq. (11), (25)
    return r, cost, max(downs, default=0.0)  # EDRP eq. (10)


def objective_of(model: ClusterModel, settings: EdrpSettings | None, counts: Counts, soft_r: bool = False) -> float:
    """F (EDRP eq. 12) of any deployment `counts` (app -> worker -> executors), as seen from the
    model's current one. Apps absent from `counts` keep their current deployment. No bound or
    capacity is checked: an unstable app (lambda >= k mu) gives inf (`soft_r`: its penalty,
    `soft_response_s`, as in `solve`'s second try)."""
    s = settings or EdrpSettings()
    return objective(prepare(model, s, soft_r), s, counts)


def cost_bound(s: EdrpSettings, cluster_cores: int) -> float:
    """C_max: the configured one, else every core of the cluster at price_per_core_hour."""
    return s.c_max if s.c_max is not None else s.price_per_core_hour * cluster_cores


def weighted_terms(s: EdrpSettings, r: float, cost: float, c_max: float, t_d: float) -> tuple[float, float, float]:
    """w_r R/R_max, w_c C/C_max, w_d T_D/T_D,max: the terms of F (EDRP eq. 12)."""
    return s.w_r * r / s.r_max_s, s.w_c * cost / c_max, s.w_d * t_d / s.td_max_s


def objective(inst: Instance, s: EdrpSettings, counts: Counts) -> float:
    r, cost, t_d = metrics(inst, s, counts)
    return sum(weighted_terms(s, r, cost, inst.c_max, t_d))  # EDRP eq. (12)
