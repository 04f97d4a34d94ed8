"""DS2 (Kalavri et al., OSDI'18): the optimal parallelism of every operator, in one pass.

From each instance's *true* rates (records over useful time, i.e. as if it never waited), DS2
computes the rate every operator would see if all operators upstream of it kept up with the
sources, and from that the number of instances each operator needs. Citations in comments refer
to the lecture (seeds/kalavri-elasticity-policies-lecture.txt, part "Predictive Policy - DS2").

Choices this implementation makes where the sources leave room (all documented in the plan's
explanation too):

- `p_i` in the formula is the number of instances whose rates were measured: `o_i[λp] / p_i` is
  then the mean true rate of one instance. In DS2 every instance reports, so this is the paper's
  p_i; in a snapshot an instance is a task slot over the window and some may not have run.
- Target utilisation `u` divides each instance's true rate: `π_i = ceil(target / (u · rate))`.
  With u = 1 this is the paper's formula.
- Backlog: a source with `backlog` records waiting gets `backlog / catch_up_s` records/s added to
  its arrival rate, so the backlog drains within `catch_up_s` while new records keep arriving.
  Once it is drained, the next decision sizes for the arrival rate alone (scale-down follows). A
  source whose backlog is unknown (None) is sized from its arrival rate alone, and the
  explanation says "backlog unknown".
- Sources are not scaled (their parallelism is that of the input), and an operator without any
  measured instance keeps its parallelism (with a `warn` action).

Spark mapping: micro-batches run a query's stages one after another on the same
cores, so the sum of the operators' exact needs, rounded up once, is the number of cores the
query needs (Σ π would round every stage up to a whole core); an operator
whose partitions are fewer than its π is partition-bound and needs a repartition.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import ClassVar

from pydantic import Field, model_validator

from sparkscale.config import AppConfig, ConfigSection, PolicyConfig
from sparkscale.model.plan import Action, ExpectedOutcome, Observation, Plan
from sparkscale.model.snapshot import OperatorFigures, Snapshot
from sparkscale.model.snapshot_merge import query_names, split_operator
from sparkscale.partitions import many_divisor_count
from sparkscale.policies.base import register_policy
from sparkscale.policies.history import DecisionHistory
from sparkscale.policies.outcomes import CAPACITY
from sparkscale.policies.scalability import coefficient, scaled_cores


class Ds2Config(ConfigSection):
    """`policy.ds2`: DS2's catch-up time and the bounds of an operator's parallelism."""

    # At least 1 s: the backlog is drained over it (backlog / catch_up_s), and a vanishing one makes
    # any backlog an infinite target rate.
    catch_up_s: float = Field(60.0, ge=1)
    min_parallelism: int = Field(1, ge=1)
    max_parallelism: int = Field(64, ge=1, le=100_000)
    # The observed scalability coefficient (policies/scalability.py): its lower bound, and how many
    # judged scale-ups it needs before it is used.
    scalability_min_coefficient: float = Field(0.5, gt=0, le=1)
    scalability_min_observations: int = Field(3, ge=1)

    @model_validator(mode="after")
    def _range(self) -> Ds2Config:
        if self.min_parallelism > self.max_parallelism:
            raise ValueError("min_parallelism is above max_parallelism")
        return self

# Relative slack before rounding up, so that 4.000000000001 (float noise) needs 4 instances, not 5.
_CEIL_SLACK = 1e-9


@dataclass(frozen=True)
class AdjacencyMatrix:
    """A over operators numbered in topological order: A[j, i] = 1 iff j is an upstream neighbour
    of i (lecture, "The DS2 model"). Stored by columns, as the indices j with A[j, i] = 1, since a
    1,000-operator query has a million entries and a few thousand ones."""

    order: tuple[str, ...]
    columns: tuple[tuple[int, ...], ...]  # columns[i] = (j, ...) with A[j, i] = 1, all j < i

    @classmethod
    def of(cls, snapshot: Snapshot) -> AdjacencyMatrix:
        order = snapshot.topological_order()
        index = {op_id: i for i, op_id in enumerate(order)}
        columns: list[list[int]] = [[] for _ in order]
        for up, down in snapshot.edges:
            columns[index[down]].append(index[up])
        return cls(order, tuple(tuple(sorted(c)) for c in columns))

    def __getitem__(self, ji: tuple[int, int]) -> int:
        j, i = ji
        return 1 if j in self.columns[i] else 0

    def upstream(self, i: int) -> tuple[int, ...]:
        return self.columns[i]

    def dense(self) -> list[list[int]]:
        size = len(self.order)
        return [[self[j, i] for i in range(size)] for j in range(size)]


@dataclass(frozen=True)
class OperatorEstimate:
    """DS2's figures for one operator (rates in records/s)."""

    id: str
    source: bool
    parallelism: int  # current partitions
    instances: int  # instances in the snapshot
    measured_instances: int  # instances with useful time > 0
    true_processing_rate: float  # o_i[λp]
    true_output_rate: float  # o_i[λo]
    selectivity: float  # o_i[λo] / o_i[λp]: records out per record in
    target_input_rate: float  # Σ_j A_ji · o_j[λo]* (sources: arrival + backlog / catch-up)
    optimal_output_rate: float  # o_i[λo]*
    required: float | None  # the exact ratio before rounding and clamping (None: not computed)
    optimal_parallelism: int  # π_i, clamped; sources and unmeasured operators keep `parallelism`
    note: str = ""  # why π was not computed or was clamped

    @property
    def instance_rate(self) -> float:
        """Mean true processing rate of one instance, o_i[λp] / p_i."""
        return self.true_processing_rate / self.measured_instances if self.measured_instances else 0.0


@dataclass(frozen=True)
class Ds2Estimate:
    """The whole computation, operators in topological order."""

    adjacency: AdjacencyMatrix
    operators: tuple[OperatorEstimate, ...]
    warnings: tuple[tuple[str | None, str], ...] = field(default=())  # (operator or None, reason)
    target_utilization: float = 1.0

    @property
    def source_target_rate(self) -> float:
        """Records/s the sources must be taken in at: arrivals plus the backlog's catch-up."""
        return sum(op.target_input_rate for op in self.operators if op.source)

    def capacity_rps(self, cores: int) -> float | None:
        """Source records/s the stages can take in on `cores` cores, fully busy: the target rate
        over the share of the window it keeps them busy (None: an unmeasured stage, or no load to
        scale from). What a scale-up is expected to raise, and what is measured after it."""
        needs = self._stage_needs()
        if not needs or self.source_target_rate <= 0 or any(
                op.required is None for op in self.operators if not op.source):
            return None
        busy = self._busy_fraction(needs, max(1, cores)) * self.target_utilization
        return self.source_target_rate / busy if busy > 0 else None

    def _stage_needs(self) -> list[tuple[float, int]]:
        """(exact requirement, partitions) of every non-source operator; operators without an
        estimate count with their parallelism, as if fully busy."""
        needs = []
        for op in self.operators:
            if op.source:
                continue
            need = op.optimal_parallelism if op.required is None else min(op.required, op.optimal_parallelism)
            needs.append((need, max(1, op.parallelism)))
        return needs

    @staticmethod
    def _busy_fraction(needs: list[tuple[float, int]], cores: int) -> float:
        """The share of a window the stages take on `cores` cores, one after another: a stage needing
        r instances runs r / min(cores, partitions) of the time (it runs at most `partitions` tasks
        at once)."""
        return sum(need / min(cores, partitions) for need, partitions in needs)

    @property
    def cores_needed(self) -> int:
        """Cores the query needs with partitions enough: ceil(Σ exact requirement) over non-source
        operators.

        A micro-batch runs its stages one after another on the same cores, so their
        fractional needs add up before rounding: two stages needing 0.3 cores each need 1 core, not
        the 2 that Σ π would give. Operators without an estimate count with their parallelism."""
        return max(1, _ceil(sum(n for n, _p in self._stage_needs())))

    @property
    def cores_for_partitions(self) -> int | None:
        """The fewest cores with which the stages, one after another, fit the window on the
        partitions they have; None when none does (`partition_bound`).

        A stage runs at most as many tasks at once as it has partitions, so cores beyond them do
        not shorten it, and the other stages must then fit in the time left: the count is searched
        from `cores_needed` up to the largest partition count (beyond it no stage gets faster)."""
        needs = self._stage_needs()
        if not needs:
            return 1
        cores = self.cores_needed
        widest = max(p for _n, p in needs)
        while cores < widest and self._busy_fraction(needs, cores) > 1 + _CEIL_SLACK:
            cores += 1
        return cores if self._busy_fraction(needs, cores) <= 1 + _CEIL_SLACK else None

    @property
    def partition_bound(self) -> bool:
        """True when no core count lets the stages fit the window: some stage's partitions are too
        few for its load, and only a repartition helps."""
        return self.cores_for_partitions is None

    def __iter__(self) -> Iterator[OperatorEstimate]:
        return iter(self.operators)

    def __getitem__(self, operator_id: str) -> OperatorEstimate:
        for op in self.operators:
            if op.id == operator_id:
                return op
        raise KeyError(operator_id)


def estimate(
    snapshot: Snapshot,
    target_utilization: float = 1.0,
    catch_up_s: float = 60.0,
    min_parallelism: int = 1,
    max_parallelism: int = 64,
) -> Ds2Estimate:
    """Run the DS2 model on a snapshot. Pure arithmetic; `Ds2Policy` turns it into a plan."""
    if not 0 < target_utilization <= 1:
        raise ValueError(f"target_utilization must be in (0, 1], got {target_utilization}")
    if catch_up_s <= 0:
        raise ValueError(f"catch_up_s must be > 0, got {catch_up_s}")
    if not 1 <= min_parallelism <= max_parallelism:
        raise ValueError(f"need 1 <= min_parallelism <= max_parallelism, got {min_parallelism}, {max_parallelism}")

    adjacency = AdjacencyMatrix.of(snapshot)
    by_id = {op.id: op for op in snapshot.operators}
    optimal_out: list[float] = []  # o_j[λo]*, indexed in topological order
    results: list[OperatorEstimate] = []
    warnings: list[tuple[str | None, str]] = []

    for i, op_id in enumerate(adjacency.order):
        op = by_id[op_id]
        processing, output, measured = _true_rates(op)
        # Lecture, "Recursively computed as": selectivity o_j[λo] / o_j[λp] (raw counts if unmeasured).
        selectivity = output / processing if processing > 0 else _fallback_selectivity(op)

        if op.source:
            backlog = op.backlog or 0.0
            # Backlog (our extension, module docstring): drain it within catch_up_s on top of arrivals.
            target = (op.arrival_rate or 0.0) + backlog / catch_up_s
            # Lecture, "Recursively computed as", source case: o_j[λo]* = λ_src^j (times selectivity).
            optimal = target * selectivity
            note = "" if measured else "no instance with useful time > 0; selectivity from record counts"
            if not measured:
                warnings.append((op.id, f"source {op.id!r} has no instance with useful time > 0; "
                                        f"assuming {_num(selectivity)} records out per record in"))
            results.append(OperatorEstimate(
                op.id, True, op.parallelism, len(op.instances), measured, processing, output, selectivity,
                target, optimal, None, op.parallelism, note))
            optimal_out.append(optimal)
            continue

        # Lecture, π_i formula: Σ_{j<i} A_ji · o_j[λo]*, the rate operator i must take in.
        target = sum(optimal_out[j] for j in adjacency.upstream(i))
        # Lecture, "Recursively computed as": o_j[λo]* = o_j[λo] / o_j[λp] · Σ_{u<j} A_uj · o_u[λo]*.
        optimal = selectivity * target
        optimal_out.append(optimal)
        if not adjacency.upstream(i):
            warnings.append((op.id, f"{op.id!r} is not a source and has no upstream operator: "
                                    "its input rate is taken as 0"))

        if processing <= 0:
            why = ("no instance with useful time > 0" if not measured
                   else "its measured instances processed no records")
            warnings.append((op.id, f"cannot estimate the capacity of {op.id!r}: {why}; "
                                    f"it keeps its parallelism {op.parallelism}"))
            results.append(OperatorEstimate(
                op.id, False, op.parallelism, len(op.instances), measured, processing, output, selectivity,
                target, optimal, None, op.parallelism, f"{why}; keeps its parallelism"))
            continue

        instance_rate = processing / measured  # lecture, π_i formula: o_i[λp] / p_i
        # Lecture, π_i = ceil(Σ_j A_ji · o_j[λo]* · (o_i[λp] / p_i)^-1), each instance loaded to u.
        required = target / (target_utilization * instance_rate)
        pi = _ceil(required)
        clamped = min(max(pi, min_parallelism), max_parallelism)
        note = ""
        if clamped != pi:
            bound = "ds2.max_parallelism" if clamped < pi else "ds2.min_parallelism"
            note = f"clamped from {pi} to {bound} = {clamped}"
            if clamped < pi:
                warnings.append((op.id, f"{op.id!r} needs {pi} instances but ds2.max_parallelism is "
                                        f"{max_parallelism}: it will not keep up"))
        results.append(OperatorEstimate(
            op.id, False, op.parallelism, len(op.instances), measured, processing, output, selectivity,
            target, optimal, required, clamped, note))

    return Ds2Estimate(adjacency, tuple(results), tuple(warnings), target_utilization)


def _true_rates(op: OperatorFigures) -> tuple[float, float, int]:
    """(o[λp], o[λo], instances measured). Instances with no useful time contribute nothing."""
    processing = output = 0.0
    measured = 0
    for inst in op.instances:
        if inst.useful_time_s <= 0:
            continue
        processing += inst.records_in / inst.useful_time_s  # lecture, "True processing rates": λp = R_prc / W_u
        output += inst.records_out / inst.useful_time_s  # lecture, "True output rates": λo = R_psd / W_u
        measured += 1
    # Lecture, "Aggregated true processing / output rates": o_i[λp] = Σ_k λp^k, o_i[λo] = Σ_k λo^k.
    return processing, output, measured


def _fallback_selectivity(op: OperatorFigures) -> float:
    """Records out per record in when no true rate is known: from the raw counts, else 1."""
    records_in = sum(inst.records_in for inst in op.instances)
    return sum(inst.records_out for inst in op.instances) / records_in if records_in > 0 else 1.0


def _ceil(x: float) -> int:
    return max(0, math.ceil(x - _CEIL_SLACK * max(1.0, abs(x))))


def _num(x: float) -> str:
    """A rate or ratio for people: at most 2 decimals, no trailing zeros."""
    text = f"{x:,.2f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


@register_policy
class Ds2Policy:
    """DS2 as a sparkscale policy: executors for the cores needed, repartitions where partitions < π."""

    name: ClassVar[str] = "ds2"
    config_model: ClassVar[type[Ds2Config]] = Ds2Config

    def decide(self, snapshot: Snapshot, history: DecisionHistory, cfg: PolicyConfig, app: AppConfig) -> Plan:
        """DS2 needs no history: each decision is computed afresh from the window's true rates."""
        u = cfg.target_utilization
        ds2 = cfg.section(self.name)
        est = estimate(snapshot, u, ds2.catch_up_s, ds2.min_parallelism, ds2.max_parallelism)

        explanation = [
            f"DS2 over {len(est.operators)} operators in topological order; target utilisation {_num(u)}, "
            f"catch-up {_num(ds2.catch_up_s)} s, parallelism in [{ds2.min_parallelism}, {ds2.max_parallelism}]"
        ]
        explanation += [_explain(n, op, u, ds2.catch_up_s, snapshot) for n, op in enumerate(est.operators)]

        actions = [Action.warn(reason, operator) for operator, reason in est.warnings]

        current = len(snapshot.executors)
        current_cores = current * app.executor_cores
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
                "raised until every stage fits the window with at most its partitions' tasks at once")
        coeff = coefficient(history, snapshot.query if len(query_names(snapshot)) == 1 else None,
                            ds2.scalability_min_coefficient, ds2.scalability_min_observations)
        linear_cores = cores
        cores = scaled_cores(cores, current_cores, coeff)
        if coeff is not None:
            explanation.append(f"{coeff.explain()}: {linear_cores} cores at linear scaling -> {cores}")
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
                f"scale {direction}: {cores} cores needed at utilisation {_num(u)}, "
                f"{executors} executor(s) of {app.executor_cores} core(s)"))

        names = query_names(snapshot)
        query_needs: dict[str, float] = {}
        for op in est.operators:
            if not op.source:
                query = _query_of(names, op.id)
                query_needs[query] = query_needs.get(query, 0.0) + (op.required or 0.0)
        for op in est.operators:
            if op.source or op.required is None or op.parallelism >= op.optimal_parallelism:
                continue
            # Spark has one partition count per query and a stage uses at most that many cores: the
            # repartition gives at least the cores the query needs, as a count with many divisors.
            needed = _ceil(query_needs.get(_query_of(names, op.id), 0.0))
            to = max(op.optimal_parallelism, min(many_divisor_count(needed, ds2.max_parallelism), ds2.max_parallelism))
            actions.append(Action.set_parallelism(
                op.id, op.parallelism, to,
                f"partition-bound: {op.parallelism} partitions < π = {op.optimal_parallelism} for "
                f"{_num(op.target_input_rate)} rec/s at {_num(op.instance_rate)} rec/s per instance; its query "
                f"needs {needed} cores in all: {to} partitions"))

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


def _query_of(names: tuple[str, ...], operator_id: str) -> str:
    try:
        return split_operator(names, operator_id)[0]
    except KeyError:
        return operator_id


def _capacity_figures(est: Ds2Estimate, cores: int) -> dict[str, float | None]:
    capacity = est.capacity_rps(cores)
    return {"capacity_rps": None if capacity is None else round(capacity, 6),
            "target_rps": round(est.source_target_rate, 6), "cores": cores}


def _explain(n: int, op: OperatorEstimate, u: float, catch_up_s: float, snapshot: Snapshot) -> str:
    rates = (f"true processing rate {_num(op.true_processing_rate)} rec/s, true output rate "
             f"{_num(op.true_output_rate)} rec/s ({op.measured_instances} of {op.instances} instances measured), "
             f"selectivity {_num(op.selectivity)}")
    if op.source:
        figures = snapshot.operator(op.id)
        backlog = (f"backlog {_num(figures.backlog)} / {_num(catch_up_s)} s" if figures.backlog is not None
                   else "0 (backlog unknown: no catch-up)")
        return (f"[{n}] {op.id} (source): {rates}; target input rate = arrival {_num(figures.arrival_rate or 0)} "
                f"+ {backlog} = {_num(op.target_input_rate)} rec/s; "
                f"optimal output {_num(op.optimal_output_rate)} rec/s; π = current parallelism "
                f"{op.parallelism} (sources are not scaled)")
    if op.required is None:
        pi = f"π not computed ({op.note}) = {op.optimal_parallelism}"
    else:
        pi = (f"π = ceil({_num(op.target_input_rate)} / ({_num(u)} x {_num(op.instance_rate)})) = "
              f"{_ceil(op.required)}" + (f", {op.note}" if op.note else ""))
    return (f"[{n}] {op.id}: {rates}; target input rate {_num(op.target_input_rate)} rec/s; {pi}; "
            f"current parallelism {op.parallelism}; optimal output {_num(op.optimal_output_rate)} rec/s")

