"""The DS2 model (Kalavri et al., OSDI'18): the optimal parallelism of every operator, in one pass.
Pure arithmetic over a snapshot (`estimate`); the policy that turns it into a plan is ds2.py, and
outcomes.py judges a scale-up by the capacity it gives (`Ds2Estimate.capacity_rps`).

From each instance's *true* rates (records over useful time, i.e. as if it never waited), DS2
computes the rate every operator would see if all operators upstream of it kept up with the
sources, and from that the number of instances each operator needs. Citations in comments refer
to the elasticity-policies lecture that presents DS2 (part "Predictive Policy - DS2"; docs/policies.md).

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
  explanation says "backlog unknown". Restart-aware (`stall_s` > 0): the records that arrive while
  the coming change stalls the query count as backlog too (Flink's autoscaler: rate x restart time
  / catch-up time).
- Per-task overhead (`task_overhead`, issue 33; policies/task_overhead.py): a micro-batch task's
  useful time is f + v x records, and a higher rate makes batches bigger, not more numerous. Where f
  is fitted, W_u is taken net of it for the instance's rate, and the window's tasks x f / window_s
  cores are added as a fixed need that does not grow with the rate.
- Sources are not scaled (their parallelism is that of the input), and an operator without any
  measured instance keeps its parallelism (with a `warn` action).

Spark mapping: micro-batches run a query's stages one after another on the same
cores, so the sum of the operators' exact needs, rounded up once, is the number of cores the
query needs (Σ π would round every stage up to a whole core); an operator
whose partitions are fewer than its π is partition-bound and needs a repartition. The queries of
one app (a merged snapshot: model/snapshot_merge.py's `split_operator` names each operator's query)
share its cores but run their batches side by side, each on its own thread: their needs add up,
but only a query's own stages run one after another within the window (issue 33).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from sparkscale.model.snapshot import OperatorFigures, Snapshot
from sparkscale.model.snapshot_merge import query_names, split_operator
from sparkscale.policies.task_overhead import TaskOverhead, fit_task_overhead

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
    overhead_s: float = 0.0  # fitted per-task overhead f, s (0: none, plain DS2)
    fixed_cores: float = 0.0  # tasks x f / window_s: cores the overhead takes at any rate
    variable_rate: float = 0.0  # records/s of one instance with W_u net of f (0: no overhead)
    overhead_why_not: str = ""  # why no overhead was fitted (empty: fitted, or not asked for)

    @property
    def instance_rate(self) -> float:
        """Mean true processing rate of one instance, o_i[λp] / p_i."""
        return self.true_processing_rate / self.measured_instances if self.measured_instances else 0.0

    @property
    def sizing_rate(self) -> float:
        """The per-instance rate π is sized by: net of the overhead when one is fitted."""
        return self.variable_rate if self.overhead_s > 0 else self.instance_rate


@dataclass(frozen=True)
class Ds2Estimate:
    """The whole computation, operators in topological order."""

    adjacency: AdjacencyMatrix
    operators: tuple[OperatorEstimate, ...]
    warnings: tuple[tuple[str | None, str], ...] = field(default=())  # (operator or None, reason)
    target_utilization: float = 1.0
    queries: tuple[str, ...] = ()  # each operator's query, in topological order; () = all one query

    def query_parts(self) -> tuple[tuple[int, ...], ...]:
        """The indices of each query's operators, in topological order (one part: `queries` empty)."""
        if not self.queries:
            return (tuple(range(len(self.operators))),)
        groups: dict[str, list[int]] = {}
        for i, query in enumerate(self.queries):
            groups.setdefault(query, []).append(i)
        return tuple(tuple(g) for g in groups.values())

    @property
    def source_target_rate(self) -> float:
        """Records/s the sources must be taken in at: arrivals plus the backlog's catch-up."""
        return sum(op.target_input_rate for op in self.operators if op.source)

    def capacity_rps(self, cores: int, partitions: Mapping[str, int] | None = None) -> float | None:
        """Source records/s the stages can take in on `cores` cores, fully busy (None: an unmeasured
        stage, or no load to scale from): what a scale-up is judged by. With `partitions` (operator
        -> count), as if those operators had that many (a repartition). The bounds are those
        `cores_for_partitions` fits, each query's stages in turn and all queries' work on the app's
        cores: one sequence for all understated a multi-query app's capacity (issue 33)."""
        override = partitions or {}
        cores = max(1, cores)
        needs = self._stage_needs(override)
        if self.source_target_rate <= 0 or not needs or any(
                op.required is None for op in self.operators if not op.source):
            return None
        bounds = [(self._busy_fraction(self._stage_needs(override, part), cores),
                   self._fixed_busy(override, cores, part)) for part in self.query_parts()]
        if len(bounds) > 1:  # the queries' tasks share the cores: Σ work <= cores
            bounds.append((sum(n for n, _p in needs) / cores,
                           self._fixed_busy(override, cores, shared=True)))
        capacities = [self._bound_capacity(self.source_target_rate, busy * self.target_utilization, fixed)
                      for busy, fixed in bounds if busy > 0]
        if not capacities or any(c is None for c in capacities):
            return None
        return min(c for c in capacities if c is not None)

    @staticmethod
    def _bound_capacity(rate: float, busy: float, fixed: float) -> float | None:
        """The rate that makes a bound's busy share 1 (None: none does). busy(rate) = Σ (a_op x rate
        + b_op) / cores_op, b_op the fixed cores, which a higher rate does not raise (bigger batches,
        not more of them). Divided in this order, a subnormal rate still gives a finite figure."""
        if fixed <= 0:
            return rate / busy
        variable = busy - fixed
        if fixed >= 1 or variable <= 0:
            return None
        return rate * (1 - fixed) / variable

    def _fixed_busy(self, partitions: Mapping[str, int], cores: int, among: tuple[int, ...] | None = None,
                    shared: bool = False) -> float:
        """The share of a window the fixed (per-task overhead) cores of the operators at `among`
        (default all) take: each on the cores its partitions let it use, or (`shared`) the app's."""
        u = self.target_utilization
        share = 0.0
        for op in self.operators if among is None else (self.operators[i] for i in among):
            if op.source or op.required is None or op.fixed_cores <= 0:
                continue
            need = min(op.required, op.optimal_parallelism)
            width = cores if shared else min(cores, max(1, partitions.get(op.id, op.parallelism)))
            share += min(op.fixed_cores / u, need) * u / width
        return share

    def _stage_needs(self, partitions: Mapping[str, int] | None = None,
                     among: tuple[int, ...] | None = None) -> list[tuple[float, int]]:
        """(exact requirement, partitions) of the non-source operators at `among` (default all),
        those without an estimate at their parallelism; `partitions` overrides some counts."""
        override = partitions or {}
        needs = []
        for op in self.operators if among is None else (self.operators[i] for i in among):
            if op.source:
                continue
            need = op.optimal_parallelism if op.required is None else min(op.required, op.optimal_parallelism)
            needs.append((need, max(1, override.get(op.id, op.parallelism))))
        return needs

    @staticmethod
    def _busy_fraction(needs: list[tuple[float, int]], cores: int) -> float:
        """The share of a window the stages take on `cores` cores, one after another: a stage
        needing r instances runs r / min(cores, partitions) of it (at most `partitions` tasks at once)."""
        return sum(need / min(cores, partitions) for need, partitions in needs)

    @property
    def busy_cores(self) -> float:
        """Cores the load keeps fully busy: Σ exact requirement x the target utilisation it was sized at."""
        return sum(n for n, _p in self._stage_needs()) * self.target_utilization

    @property
    def cores_needed(self) -> int:
        """Cores the query needs with partitions enough: ceil(Σ exact requirement) over non-source
        operators (and those without an estimate at their parallelism). A micro-batch runs its
        stages one after another on the same cores, so fractional needs add up before rounding."""
        return max(1, ceiling(sum(n for n, _p in self._stage_needs())))

    @property
    def cores_for_partitions(self) -> int | None:
        """The fewest cores with which each query's stages, one after another, fit the window on
        the partitions they have; None when none does (`partition_bound`).

        A stage runs at most as many tasks at once as it has partitions, so cores beyond them do
        not shorten it, and the query's other stages must then fit in the time left: the count is
        searched from `cores_needed` (all queries' work together) up to the largest partition count
        (beyond it no stage gets faster). Queries are fitted apart (module docstring): summing
        the stages of two queries as one sequence raised 3 cores to 4 on clicks-file (issue 33)."""
        needs = self._stage_needs()
        if not needs:
            return 1
        queries = [q for q in (self._stage_needs(among=part) for part in self.query_parts()) if q]

        def fits(cores: int) -> bool:
            return all(self._busy_fraction(q, cores) <= 1 + _CEIL_SLACK for q in queries)

        cores = self.cores_needed
        widest = max(p for _n, p in needs)
        while cores < widest and not fits(cores):
            cores += 1
        return cores if fits(cores) else None

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
    stall_s: float = 0.0,
    *,
    task_overhead: bool = False,
) -> Ds2Estimate:
    """Run the DS2 model on a snapshot. Pure arithmetic; `Ds2Policy` turns it into a plan.
    `stall_s`: seconds the coming change stalls processing (restart-aware catch-up, Flink's
    autoscaler): the records arriving meanwhile are drained within `catch_up_s` too.
    `task_overhead`: separate each operator's per-task fixed cost from its per-record cost where
    its tasks allow a fit (module docstring); False is plain DS2."""
    if not 0 < target_utilization <= 1:
        raise ValueError(f"target_utilization must be in (0, 1], got {target_utilization}")
    if catch_up_s <= 0:
        raise ValueError(f"catch_up_s must be > 0, got {catch_up_s}")
    if stall_s < 0:
        raise ValueError(f"stall_s must be >= 0, got {stall_s}")
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
            arrival = op.arrival_rate or 0.0
            # Backlog (our extension, module docstring): drain it within catch_up_s on top of arrivals,
            # with what arrives while the change stalls the query (Flink: rate x restart time / catch-up).
            backlog = (op.backlog or 0.0) + arrival * stall_s
            target = arrival + backlog / catch_up_s
            # Lecture, "Recursively computed as", source case: o_j[λo]* = λ_src^j (times selectivity).
            optimal = target * selectivity
            note = "" if measured else "no instance with useful time > 0; selectivity from record counts"
            if not measured:
                warnings.append((op.id, f"source {op.id!r} has no instance with useful time > 0; "
                                        f"assuming {num(selectivity)} records out per record in"))
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

        overhead = fit_task_overhead(op.instances) if task_overhead else None
        overhead_s = fixed_cores = variable_rate = 0.0
        if overhead is not None and overhead.f_s > 0:
            overhead_s, variable_rate = overhead.f_s, overhead.variable_rate
            fixed_cores = overhead.tasks * overhead.f_s / snapshot.window_s
            required = _required_with_overhead(overhead, target, target_utilization, fixed_cores)
        else:
            instance_rate = processing / measured  # lecture, π_i formula: o_i[λp] / p_i
            # Lecture, π_i = ceil(Σ_j A_ji · o_j[λo]* · (o_i[λp] / p_i)^-1), each instance loaded to u.
            required = target / (target_utilization * instance_rate)
        pi = ceiling(required)
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
            target, optimal, required, clamped, note,
            overhead_s=overhead_s, fixed_cores=fixed_cores, variable_rate=variable_rate,
            overhead_why_not=overhead.why_not if overhead is not None else ""))

    names = query_names(snapshot)
    queries = tuple(split_operator(names, op_id)[0] for op_id in adjacency.order)
    return Ds2Estimate(adjacency, tuple(results), tuple(warnings), target_utilization, queries)


def _required_with_overhead(overhead: TaskOverhead, target: float, u: float, fixed_cores: float) -> float:
    """The exact requirement with a fitted per-task overhead f: lecture, π_i formula, with W_u taken
    net of f, o_i[λp] / p_i = Σ records / Σ (W_u - f) over the measured tasks, each loaded to u; plus
    the cores the window's tasks spend on f (`fixed_cores`), which a higher rate does not raise."""
    return target / (u * overhead.variable_rate) + fixed_cores / u


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


def ceiling(x: float) -> int:
    """ceil(x), forgiving float noise: 4.000000000001 is 4."""
    return max(0, math.ceil(x - _CEIL_SLACK * max(1.0, abs(x))))


def num(x: float) -> str:
    """A rate or ratio for people: at most 2 decimals, no trailing zeros."""
    text = f"{x:,.2f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text
