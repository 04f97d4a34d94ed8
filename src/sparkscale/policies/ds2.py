"""DS2 (Kalavri et al., OSDI'18) as a sparkscale policy: executors for the cores the query needs,
and a repartition where an operator's partitions are fewer than its optimal parallelism π. The
model itself, and the choices it makes where the paper leaves room, are ds2_model.py's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import ClassVar

from pydantic import Field, model_validator

from sparkscale.config import AppConfig, ConfigSection, PolicyConfig
from sparkscale.model.plan import Action, ExpectedOutcome, Observation, Plan
from sparkscale.model.snapshot import Snapshot
from sparkscale.model.snapshot_merge import query_names, query_of
from sparkscale.partitions import many_divisor_count
from sparkscale.policies.band import UtilizationBand
from sparkscale.policies.base import register_policy
from sparkscale.policies.catch_up import change_cost, payback
from sparkscale.policies.change_costs import EXECUTOR_ADD, EXECUTOR_REMOVE, MIGRATION_PREFIX, cost_s, migration_kind
from sparkscale.policies.ds2_model import Ds2Estimate, OperatorEstimate, ceiling, estimate, num
from sparkscale.policies.figures import stage_work
from sparkscale.policies.history import DecisionHistory
from sparkscale.policies.outcomes import CAPACITY
from sparkscale.policies.scalability import coefficient, scaled_cores


class Ds2Config(ConfigSection):
    """`policy.ds2`: DS2's catch-up time and the bounds of an operator's parallelism."""

    # At least 1 s: the backlog is drained over it (backlog / catch_up_s), and a vanishing one makes
    # any backlog an infinite target rate.
    catch_up_s: float = Field(60.0, ge=1, description=(
        "Extra capacity so that a source backlog drains within this many seconds."))
    min_parallelism: int = Field(1, ge=1, description="The least parallelism of any operator.")
    max_parallelism: int = Field(64, ge=1, le=100_000, description="The most parallelism of any operator.")
    # policies/scalability.py
    scalability_min_coefficient: float = Field(0.5, gt=0, le=1, description=(
        "The lower bound of the observed scalability coefficient (how much of a linear gain more cores bring)."))
    scalability_min_observations: int = Field(3, ge=1, description=(
        "Judged scale-ups needed before the observed scalability coefficient is used."))
    # policies/catch_up.py, policies/change_costs.py
    restart_aware: bool = Field(False, description=(
        "Restart-aware catch-up: size so that the records arriving while the coming change stalls the query "
        "(its measured cost) drain within catch_up_s too."))
    # The EDRP model's defaults (policies/placement/downtime.py).
    executor_add_cost_default_s: float = Field(9.0, ge=0, description=(
        "The stall an executor addition costs until one was measured, in seconds (restart_aware)."))
    executor_remove_cost_default_s: float = Field(0.0, ge=0, description=(
        "The stall an executor removal costs until one was measured, in seconds (restart_aware)."))
    restart_cost_default_s: float = Field(20.0, ge=0, description=(
        "The stall a migration (query restart) costs until one was measured, whatever its strategy, in seconds."))
    # policies/task_overhead.py (issue 33)
    task_overhead: bool = Field(True, description=(
        "Separate each stage's per-task fixed cost from its per-record cost (fitted over the window's tasks): "
        "only the per-record part grows with the rate, since batches get bigger, not more numerous; "
        "false = DS2's linear model. The outcome judge and placement measure capacity with the same model."))
    payback_horizon_s: float | None = Field(None, gt=0, examples=[600.0], description=(
        "Keep a repartition only when the records/s it gains over this many seconds exceed the records "
        "arriving during its stall (else executor scaling alone); null = no check."))

    @model_validator(mode="after")
    def _range(self) -> Ds2Config:
        if self.min_parallelism > self.max_parallelism:
            raise ValueError("min_parallelism is above max_parallelism")
        return self


@register_policy
class Ds2Policy:
    """DS2 as a sparkscale policy: executors for the cores needed, repartitions where partitions < π."""

    name: ClassVar[str] = "ds2"
    config_model: ClassVar[type[Ds2Config]] = Ds2Config

    def decide(self, snapshot: Snapshot, history: DecisionHistory, cfg: PolicyConfig, app: AppConfig) -> Plan:
        """Each decision is computed afresh from the window's true rates; the history gives only the
        observed scalability and, restart-aware, the measured change costs."""
        u = cfg.target_utilization
        ds2 = cfg.section(self.name)
        est = estimate(snapshot, u, ds2.catch_up_s, ds2.min_parallelism, ds2.max_parallelism,
                       task_overhead=ds2.task_overhead)
        current = len(snapshot.executors)
        current_cores = current * app.executor_cores

        explanation = [
            f"DS2 over {len(est.operators)} operators in topological order; target utilisation {num(u)}, "
            f"catch-up {num(ds2.catch_up_s)} s, parallelism in [{ds2.min_parallelism}, {ds2.max_parallelism}]"
        ]
        stall_s = 0.0
        if ds2.restart_aware:
            est, stall_s = _restart_aware(est, snapshot, history, ds2, u, current_cores, explanation)
        explanation += [_explain(n, op, u, ds2.catch_up_s, snapshot, stall_s) for n, op in enumerate(est.operators)]
        explanation.append(_spent(est, snapshot))

        actions = [Action.warn(reason, operator) for operator, reason in est.warnings]

        fits = est.cores_for_partitions
        if fits is None:
            cores = est.cores_needed
            explanation.append(
                f"partition-bound: the stages do not fit the window on their partitions with any core count; "
                f"sized for the repartition this plan asks: cores needed = ceil(Σ exact needs) = {cores}")
        else:
            cores = fits
            explanation.append(
                f"cores needed = {cores}: ceil(Σ exact needs over non-source operators) = {est.cores_needed}, "
                "raised until each query's stages fit the window one after another, each stage with at most its "
                "partitions' tasks at once")
        coeff = coefficient(history, snapshot.query if len(query_names(snapshot)) == 1 else None,
                            ds2.scalability_min_coefficient, ds2.scalability_min_observations)
        linear_cores = cores
        cores = scaled_cores(cores, current_cores, coeff)
        if coeff is not None:
            explanation.append(f"{coeff.explain()}: {linear_cores} cores at linear scaling -> {cores}")
        cores = _banded(cores, current_cores, est, fits, cfg, explanation)
        wanted = math.ceil(cores / app.executor_cores)
        executors = min(max(wanted, app.min_executors), app.max_executors)
        explanation.append(
            f"total: {cores} cores; executors needed = "
            f"ceil({cores} / {app.executor_cores} cores each) = {wanted}, within [{app.min_executors}, "
            f"{app.max_executors}] -> {executors}; current executors {current} ({snapshot.cores} cores)"
        )
        if wanted > app.max_executors:
            actions.append(Action.warn(
                f"the query needs {cores} cores but at most {app.max_executors * app.executor_cores} are allowed "
                f"(max_executors {app.max_executors} x {app.executor_cores} cores): it will not keep up"))
        unmeasured = [op.id for op in est.operators if not op.source and op.required is None]
        stages = [op for op in est.operators if not op.source]
        if not stages and executors != current:
            # No batch finished in the window (batches longer than it, e.g. a query far behind): no
            # stage, no true rate, and a need of 0 cores would scale down the query that needs most.
            explanation.append("executors unchanged: no stage of the query finished in this window")
        elif unmeasured and executors != current:
            # DS2 §3 rests on measured true rates; an operator that processed nothing in the window
            # (start-up, an idle source) gives none, and guessing its need made the first cycles of
            # a fresh query ask for every partition's core.
            explanation.append(f"executors unchanged: no true rate for {', '.join(unmeasured)} in this window")
        elif executors != current:
            direction = "up" if executors > current else "down"
            actions.append(Action.scale_executors(
                current, executors,
                f"scale {direction}: {cores} cores needed at utilisation {num(u)}, "
                f"{executors} executor(s) of {app.executor_cores} core(s)"))

        actions += _repartitions(est, query_names(snapshot), ds2, app, explanation)

        if ds2.payback_horizon_s is not None:
            actions = _paid_back(actions, est, snapshot, history, ds2, app.executor_cores, current, explanation)
        scale = next((a for a in actions if a.type == "scale_executors"), None)
        observation = Observation(query=snapshot.query, diagnosis=None, figures=_capacity_figures(est, current_cores))
        before = est.capacity_rps(current_cores)
        if scale is not None and scale.to is not None and before is not None:
            after_cores = scale.to * app.executor_cores
            after = est.capacity_rps(after_cores)
            diagnosis = "under_provisioning" if scale.to > current else "over_provisioning"
            if after is not None:
                # DS2's own expectation: the capacity its model gives the new cores (judged once they are registered).
                observation = observation.merged(diagnosis=diagnosis, expected=ExpectedOutcome(
                    diagnosis, "scale_executors", CAPACITY, before, after))

        return Plan(
            policy=self.name,
            app=snapshot.app,
            parallelism={op.id: op.optimal_parallelism for op in est.operators},
            actions=tuple(actions),
            explanation=tuple(explanation),
            observation=observation,
        )


def capacity_task_overhead(policy: PolicyConfig) -> bool:
    """Whether a capacity is measured with the per-task overhead fitted (ds2_model's `task_overhead`)
    by the outcome judge (outcomes.py `measured`) and placement (placement/build.py): as DS2 sized
    and computed its expectation, since the two models read different capacities from one window
    (the overhead model a higher one on overhead-heavy stages). Another policy deciding: true, the
    model's default."""
    if policy.name != Ds2Policy.name:
        return True
    ds2: Ds2Config = policy.section(Ds2Policy.name)
    return ds2.task_overhead


def _restart_aware(est: Ds2Estimate, snapshot: Snapshot, history: DecisionHistory, ds2: Ds2Config, u: float,
                   current_cores: int, explanation: list[str]) -> tuple[Ds2Estimate, float]:
    """The estimate again with the stall of the change `est` foresees (its measured cost), and that stall."""
    cost = change_cost(est, current_cores, history, _cost_defaults(ds2))
    if cost is None:
        explanation.append("restart-aware catch-up: no change foreseen, no stall counted")
        return est, 0.0
    explanation.append(f"restart-aware catch-up: {cost.explain()}; the records arriving meanwhile "
                       f"(arrival x {cost.seconds:g} s) are drained within {num(ds2.catch_up_s)} s too")
    return estimate(snapshot, u, ds2.catch_up_s, ds2.min_parallelism, ds2.max_parallelism, cost.seconds,
                    task_overhead=ds2.task_overhead), cost.seconds


def _cost_defaults(ds2: Ds2Config) -> dict[str, float]:
    return {EXECUTOR_ADD: ds2.executor_add_cost_default_s, EXECUTOR_REMOVE: ds2.executor_remove_cost_default_s,
            MIGRATION_PREFIX: ds2.restart_cost_default_s}


def _paid_back(actions: list[Action], est: Ds2Estimate, snapshot: Snapshot, history: DecisionHistory,
               ds2: Ds2Config, executor_cores: int, current: int, explanation: list[str]) -> list[Action]:
    """`actions` without their repartitions when these do not pay back their measured stall within
    `ds2.payback_horizon_s` on the planned cores (executor scaling then goes alone), saying why."""
    moves = [a for a in actions if a.type == "set_parallelism" and a.operator is not None and a.to is not None]
    if not moves or ds2.payback_horizon_s is None:
        return actions
    scale = next((a for a in actions if a.type == "scale_executors" and a.to is not None), None)
    cores = (scale.to if scale is not None and scale.to is not None else current) * executor_cores
    kind = migration_kind(history.migration_strategy) if history.migration_strategy else MIGRATION_PREFIX
    cost = cost_s(history, kind, _cost_defaults(ds2), ds2.restart_cost_default_s)
    partitions = {a.operator: a.to for a in moves if a.operator is not None and a.to is not None}
    balance = payback(est, snapshot, cores, partitions, ds2.payback_horizon_s, cost)
    explanation.append(balance.explain())
    if balance.pays:
        return actions
    explanation.append("migration dropped: " + ", ".join(a.summary() for a in moves)
                       + "; executor scaling alone")
    return [a for a in actions if a not in moves]


def _banded(cores: int, current_cores: int, est: Ds2Estimate, fits: int | None, cfg: PolicyConfig,
            explanation: list[str]) -> int:
    """`cores` through the utilisation band when one is configured (policies/band.py), saying why."""
    band = cfg.band()
    if band is None:
        return cores
    if fits is None or fits != est.cores_needed:
        explanation.append("utilisation band not applied: the cores were raised for the stages' partitions")
        return cores
    cores, why = UtilizationBand(*band).cores(cores, current_cores, est.busy_cores)
    explanation.append(why)
    return cores


def _repartitions(est: Ds2Estimate, names: tuple[str, ...], ds2: Ds2Config, app: AppConfig,
                  explanation: list[str]) -> list[Action]:
    """A `set_parallelism` for each partition-bound stage (partitions < π), saying why where none is made."""
    query_needs: dict[str, float] = {}
    for op in est.operators:
        if not op.source:
            query = _query_of(names, op.id)
            query_needs[query] = query_needs.get(query, 0.0) + (op.required or 0.0)
    most_cores = app.max_executors * app.executor_cores
    actions = []
    for op in est.operators:
        if op.source or op.required is None or op.parallelism >= op.optimal_parallelism:
            continue
        # Spark has one partition count per query and a stage uses at most that many cores: the
        # repartition gives at least the cores the query needs, as a count with many divisors.
        needed = ceiling(query_needs.get(_query_of(names, op.id), 0.0))
        to = max(op.optimal_parallelism, min(many_divisor_count(needed, ds2.max_parallelism), ds2.max_parallelism))
        if to > most_cores:
            # A stage runs one task per core at once: partitions beyond the most cores the app may
            # hold never run side by side, and the migration stalls the query for nothing (issue 33:
            # clicks-file went 4 -> 6 partitions on at most 4 cores, a restart as the load fell).
            if op.parallelism >= most_cores:
                explanation.append(
                    f"no repartition of {op.id}: its {op.parallelism} partitions already run on all {most_cores} "
                    f"cores the app may hold (max_executors {app.max_executors} x {app.executor_cores}); more "
                    "would not run at once")
                continue
            to = most_cores
        actions.append(Action.set_parallelism(
            op.id, op.parallelism, to,
            f"partition-bound: {op.parallelism} partitions < π = {op.optimal_parallelism} for "
            f"{num(op.target_input_rate)} rec/s at {num(op.sizing_rate)} rec/s per instance; its query "
            f"needs {needed} cores in all: {to} partitions"))
    return actions


def _query_of(names: tuple[str, ...], operator_id: str) -> str:
    return query_of(names, operator_id) or operator_id


def _capacity_figures(est: Ds2Estimate, cores: int) -> dict[str, float | None]:
    capacity = est.capacity_rps(cores)
    return {"capacity_rps": None if capacity is None else round(capacity, 6),
            "target_rps": round(est.source_target_rate, 6), "cores": cores}


def _spent(est: Ds2Estimate, snapshot: Snapshot) -> str:
    """The projection beside the work the window measured (issue 33). At the rates the window's
    sources read, DS2 gives back its stages' useful time (0.243 against 0.245 cores on the recorded
    clicks-file window), so what the projection adds is the rise to the target rates, by which it
    multiplies every second a stage spent, per-task fixed costs included where none was fitted."""
    work = stage_work(snapshot)
    return (f"busy cores projected at the target input rates ({num(est.source_target_rate)} rec/s): "
            f"{num(est.busy_cores)}; the window's stages ran {num(work.useful_s)} s of useful time, "
            f"{num(work.useful_s / snapshot.window_s)} cores over {num(snapshot.window_s)} s, for the "
            f"{num(work.source_records / snapshot.window_s)} rec/s their sources read")


def _brought_forward(extra: Mapping[str, object]) -> str:
    """How the source's backlog was brought forward to the snapshot's time (source_figures.py)."""
    age_s, stated = extra.get("backlog_age_s"), extra.get("backlog_stated_records")
    if not isinstance(age_s, int | float) or not isinstance(stated, int | float) or age_s <= 0:
        return ""
    return f" (stated {num(stated)} + what arrived in the {num(age_s)} s since it was measured)"


def _explain(n: int, op: OperatorEstimate, u: float, catch_up_s: float, snapshot: Snapshot,
             stall_s: float = 0.0) -> str:
    rates = (f"true processing rate {num(op.true_processing_rate)} rec/s, true output rate "
             f"{num(op.true_output_rate)} rec/s ({op.measured_instances} of {op.instances} instances measured), "
             f"selectivity {num(op.selectivity)}")
    if op.source:
        figures = snapshot.operator(op.id)
        arrival = num(figures.arrival_rate or 0)
        stall = f" + arrival {arrival} x stall {stall_s:g} s" if stall_s > 0 else ""
        if figures.backlog is not None:
            waiting = f"backlog {num(figures.backlog)}{_brought_forward(figures.extra)}"
            backlog = f"({waiting}{stall}) / {num(catch_up_s)} s" if stall else f"{waiting} / {num(catch_up_s)} s"
        else:
            backlog = (f"(backlog unknown{stall}) / {num(catch_up_s)} s" if stall
                       else "0 (backlog unknown: no catch-up)")
        return (f"[{n}] {op.id} (source): {rates}; target input rate = arrival {arrival} "
                f"+ {backlog} = {num(op.target_input_rate)} rec/s; "
                f"optimal output {num(op.optimal_output_rate)} rec/s; π = current parallelism "
                f"{op.parallelism} (sources are not scaled)")
    if op.required is None:
        pi = f"π not computed ({op.note}) = {op.optimal_parallelism}"
    elif op.overhead_s > 0:
        pi = (f"per-task overhead {num(op.overhead_s)} s fitted over {op.measured_instances} tasks "
              f"(time = f + records / rate): variable rate {num(op.variable_rate)} rec/s per instance, "
              f"fixed {num(op.fixed_cores)} cores; π = ceil({num(op.target_input_rate)} / ({num(u)} x "
              f"{num(op.variable_rate)}) + {num(op.fixed_cores)} / {num(u)}) = {ceiling(op.required)}"
              + (f", {op.note}" if op.note else ""))
    else:
        pi = (f"π = ceil({num(op.target_input_rate)} / ({num(u)} x {num(op.instance_rate)})) = "
              f"{ceiling(op.required)}" + (f", {op.note}" if op.note else "")
              + (f" (overhead not fitted: {op.overhead_why_not})" if op.overhead_why_not else ""))
    return (f"[{n}] {op.id}: {rates}; target input rate {num(op.target_input_rate)} rec/s; {pi}; "
            f"current parallelism {op.parallelism}; optimal output {num(op.optimal_output_rate)} rec/s")

