"""`sparkscale simulate`: the real policies and guards against a simulated dataflow, at sizes no
local cluster reaches (1,000 operators, 100 applications), in simulated time.

The model is a Spark micro-batch query (as monitors/snapshot_builder.py sees one): input waits in
one source backlog; a batch takes what is waiting and runs the query's stages one after another
on the same cores, so the
query's capacity (records/s) is 1 / Σ_op λ_op / (μ_op · min(p_op, C)), where λ_op is the records
operator op sees per input record, μ_op one instance's true rate (records/s), p_op its partitions
and C the executors' cores. `--scaling sublinear` gives min(p, C)^alpha instead of min(p, C).
Every operator's output goes whole to each downstream operator (DS2's model); selectivity is
1/out-degree, so each layer carries the input rate once. True rates are drawn (seeded) around a
base that makes the peak of the profile need `--peak-cores` cores.

Each `--interval-s` the simulator builds a real Snapshot v1 per app (instances with records in,
records out and useful time = records / μ, the source's arrival rate and backlog, the batch
duration, executor CPU), runs the policy and the guards exactly as the daemon does, times that
(planning time), and applies the plan: more executors count after `--executor-start-s`, fewer at
once; a `set_parallelism` stops the query for `--restart-cost-s` (a migration) and then runs with
the new partitions. The run is judged with the benchmark's own measures (sparkscale_lab.bench.measures).
"""

from __future__ import annotations

import math
import random
import statistics
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import structlog

from sparkscale.config import AppConfig, Config
from sparkscale.model.plan import Plan
from sparkscale.model.snapshot import ExecutorFigures, InstanceFigures, OperatorFigures, Snapshot
from sparkscale.policies.history import DecisionHistory
from sparkscale.policies.planner import decide
from sparkscale_lab.bench.measures import RunMeasures, ScalingAction, SloLimits, measure, segments
from sparkscale_lab.bench.sim_graph import SOURCE, Graph, parse_graph
from sparkscale_lab.bench.timeline import Sample
from sparkscale_lab.pipelines.profiles import LoadProfile, parse_profile

log = structlog.get_logger(__name__)

HISTORY_S = 3600.0  # decisions kept, as the daemon does


# ---------------------------------------------------------------------------------------------
# One simulated application


@dataclass
class SimApp:
    """A simulated app: its query's operators and the state that changes as it runs."""

    name: str
    graph: Graph
    load_per_record: dict[str, float]  # λ_op: records op sees per input record
    selectivity: dict[str, float]
    true_rate: dict[str, float]  # μ_op, records/s of one instance
    partitions: dict[str, int]
    executors: int
    executor_cores: int
    alpha: float  # 1 = linear scaling with parallelism
    backlog: float = 0.0
    arrived: float = 0.0
    processed: float = 0.0
    stopped_until: float = 0.0  # a migration's restart
    pending_executors: list[tuple[float, int]] = field(default_factory=list)  # (effective at, total)
    window: list[tuple[float, float, float]] = field(default_factory=list)  # (arrived, processed, busy) per s
    history: DecisionHistory = field(default_factory=DecisionHistory.empty)
    samples: list[Sample] = field(default_factory=list)
    actions: list[ScalingAction] = field(default_factory=list)
    _partitions_version: int = 0
    _capacity_key: tuple | None = None
    _capacity: float = 0.0

    @property
    def cores(self) -> int:
        return self.executors * self.executor_cores

    def capacity(self) -> float:
        """Records/s the query can process now (stages one after another on the same cores);
        cached until executors or partitions change."""
        key = (self.executors, id(self.partitions), self._partitions_version)
        if self._capacity_key != key:
            self._capacity = self._compute_capacity()
            self._capacity_key = key
        return self._capacity

    def _compute_capacity(self) -> float:
        seconds_per_record = 0.0
        for op, load in self.load_per_record.items():
            if op == SOURCE:
                continue
            parallel = min(self.partitions[op], self.cores)
            if parallel <= 0:
                return 0.0
            seconds_per_record += load / (self.true_rate[op] * parallel ** self.alpha)
        return 1.0 / seconds_per_record if seconds_per_record > 0 else math.inf

    def cores_needed(self, rate: float) -> float:
        """Exact cores that keep up with `rate` when every operator has enough partitions."""
        if rate <= 0:
            return 0.0
        per_core = sum(load / self.true_rate[op] for op, load in self.load_per_record.items() if op != SOURCE)
        return (rate * per_core) ** (1 / self.alpha) if self.alpha != 1 else rate * per_core

    def step(self, t: float, arrivals: float) -> None:
        """One simulated second."""
        for at, total in list(self.pending_executors):
            if at <= t:
                self.executors = total
                self.pending_executors.remove((at, total))
        self.arrived += arrivals
        capacity = 0.0 if t < self.stopped_until else self.capacity()
        done = min(self.backlog + arrivals, capacity)
        self.backlog += arrivals - done
        self.processed += done
        self.window.append((arrivals, done, done / capacity if capacity > 0 else 0.0))

    def snapshot(self, t: float, window_s: float, trigger_s: float, source_partitions: int) -> Snapshot:
        recent = self.window[-int(window_s):]
        span = max(len(recent), 1)
        arrived = sum(a for a, _d, _b in recent)
        done = sum(d for _a, d, _b in recent)
        busy = sum(b for _a, _d, b in recent) / span
        per_partition = done / source_partitions
        operators = [OperatorFigures(
            SOURCE, source_partitions,
            tuple(InstanceFigures(per_partition, per_partition * self.selectivity[SOURCE], float(span))
                  for _ in range(source_partitions)),
            source=True, arrival_rate=arrived / span, backlog=self.backlog)]
        for op in self.graph.operators[1:]:
            p = self.partitions[op]
            records = done * self.load_per_record[op] / p
            instances = (tuple(InstanceFigures(records, records * self.selectivity[op], records / self.true_rate[op],
                                               str(i % max(self.executors, 1))) for i in range(p))
                         if records > 0 else ())
            operators.append(OperatorFigures(op, p, instances))
        saturated = self.backlog > 0 and busy > 0.99
        batch_s = trigger_s * (min(1 + self.backlog / max(self.capacity() * trigger_s, 1e-9), 10.0) if saturated
                               else busy)
        return Snapshot(
            app=self.name, query="sim", taken_at=t, window_s=window_s,
            executors=tuple(ExecutorFigures(str(i), "sim", self.executor_cores) for i in range(self.executors)),
            operators=tuple(operators), edges=self.graph.edges, trigger_interval_s=trigger_s,
            batch_duration_s=batch_s, extensions={"app": {"cpu_fraction": min(busy, 1.0), "memory_fraction": 0.3}},
        )

    @property
    def shuffle_partitions(self) -> int:
        """The query's shuffle partitions: those of its stages after the source."""
        return max((p for op, p in self.partitions.items() if op != SOURCE), default=1)

    def apply(self, plan: Plan, t: float, executor_start_s: float, restart_cost_s: float) -> None:
        for a in plan.actions:
            if a.type == "scale_executors" and a.to is not None and a.to != self.executors:
                self.actions.append(ScalingAction(t, a.type, self.executors, a.to))
                if a.to > self.executors:
                    self.pending_executors.append((t + executor_start_s, a.to))
                else:
                    self.executors = a.to
            elif a.type == "set_parallelism" and a.to and a.from_ == self.shuffle_partitions:
                # A migration of the query: every shuffled stage gets the new count (Spark has one).
                self.actions.append(ScalingAction(t, a.type, a.from_, a.to))
                for op in self.partitions:
                    if op != SOURCE and self.partitions[op] == a.from_:
                        self.partitions[op] = a.to
                self._partitions_version += 1
                self.stopped_until = max(self.stopped_until, t + restart_cost_s)


def build_app(name: str, graph: Graph, peak_rate: float, peak_cores: float, partitions: int, executors: int,
              executor_cores: int, alpha: float, seed: int) -> SimApp:
    """True rates drawn around the base that makes `peak_rate` need `peak_cores` cores."""
    rng = random.Random(seed)
    out_degree = graph.out_degree()
    selectivity = {op: 1.0 / max(out_degree[op], 1) for op in graph.operators}
    load = dict.fromkeys(graph.operators, 0.0)
    load[SOURCE] = 1.0
    up = graph.upstream()
    for op in graph.operators[1:]:
        # DS2's model: each upstream operator's whole output reaches this one.
        load[op] = sum(load[u] * selectivity[u] for u in up[op])
    spread = {op: rng.uniform(0.5, 1.5) for op in graph.operators[1:]}
    # Σ load/μ = peak_cores / peak_rate with μ_op = base · spread_op.
    base = peak_rate * sum(load[op] / spread[op] for op in spread) / peak_cores
    rates = {op: base * spread[op] for op in spread}
    return SimApp(name, graph, load, selectivity, rates, dict.fromkeys(graph.operators[1:], partitions), executors,
                  executor_cores, alpha)


# ---------------------------------------------------------------------------------------------
# The run


@dataclass(frozen=True)
class SimSpec:
    graph: str
    profile: str
    policy: str
    apps: int = 1
    interval_s: float = 10.0
    window_s: float = 30.0
    scaling: str = "linear"
    alpha: float = 0.9
    peak_cores: float = 12.0
    partitions: int = 16
    executor_start_s: float = 5.0
    restart_cost_s: float = 10.0
    seed: int = 1


@dataclass
class SimResult:
    spec: SimSpec
    measures: list[RunMeasures]
    planning_s: list[float]  # one per decision (policy + guards)
    cycle_planning_s: list[float]  # per cycle, all apps
    wall_s: float
    operators: int
    app_actions: list[list[ScalingAction]] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        def conv(i: int) -> list[float | None]:
            return [m.convergence_s[i] for m in self.measures]

        segs = len(self.measures[0].convergence_s) if self.measures else 0
        return {
            "spec": asdict(self.spec), "operators_per_app": self.operators, "apps": len(self.measures),
            "wall_s": round(self.wall_s, 1),
            "planning_ms": {"p50": _ms(_pct(self.planning_s, 50)), "p99": _ms(_pct(self.planning_s, 99)),
                            "max": _ms(max(self.planning_s, default=0.0))},
            "cycle_planning_s": {"p50": round(_pct(self.cycle_planning_s, 50), 3),
                                 "max": round(max(self.cycle_planning_s, default=0.0), 3)},
            "convergence_s": [{"median": _median(conv(i)), "worst": _worst(conv(i)),
                               "never": sum(1 for c in conv(i) if c is None)} for i in range(segs)],
            "scaling_actions": {"median": _median([m.scaling_actions for m in self.measures]),
                                "max": max((m.scaling_actions for m in self.measures), default=0)},
            "direction_changes": {"median": _median([m.direction_changes for m in self.measures]),
                                  "max": max((m.direction_changes for m in self.measures), default=0)},
            "slo_violation_s": {"median": _median([m.slo_violation_s for m in self.measures]),
                                "max": max((m.slo_violation_s for m in self.measures), default=0)},
            "over_provisioning": {"median": _median([m.over_provisioning for m in self.measures])},
            "peak_backlog_records": {"median": _median([m.peak_backlog_records for m in self.measures])},
        }


def _pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


def _median(values: list) -> float | None:
    known = [v for v in values if v is not None]
    return round(statistics.median(known), 2) if known else None


def _worst(values: list) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def simulate(spec: SimSpec, cfg: Config) -> SimResult:
    profile: LoadProfile = parse_profile(spec.profile)
    segs = segments(profile)
    peak = max(s.rate for s in segs)
    graph0 = parse_graph(spec.graph, spec.seed)
    app_cfg = AppConfig(name="sim", min_executors=1, max_executors=max(4 * math.ceil(spec.peak_cores), 8),
                        initial_executors=1, shuffle_partitions=spec.partitions)
    cfg = cfg.model_copy(update={"policy": cfg.policy.model_copy(update={"name": spec.policy})})
    alpha = spec.alpha if spec.scaling == "sublinear" else 1.0
    apps = [build_app(f"app{i}", parse_graph(spec.graph, spec.seed + i) if spec.graph.startswith("layered")
                      else graph0, peak, spec.peak_cores, spec.partitions, app_cfg.initial_executors,
                      app_cfg.executor_cores, alpha, spec.seed + i) for i in range(spec.apps)]
    for app in apps:
        # Each app starts sized for the first load (its steady state), so convergence is about changes.
        app.executors = max(1, math.ceil(app.cores_needed(segs[0].rate) / app.executor_cores - 1e-9))
    planning: list[float] = []
    per_cycle: list[float] = []
    started = time.perf_counter()
    duration = int(profile.duration_s or 0)
    next_cycle = spec.interval_s
    for second in range(duration):
        arrivals = profile.records_by(second + 1) - profile.records_by(second)
        for app in apps:
            app.step(float(second), arrivals)
        t = float(second + 1)
        for app in apps:
            app.samples.append(Sample(t, int(app.arrived), int(app.processed), None, app.executors, app.cores,
                                      max(app.partitions.values(), default=None)))
        if t + 1e-9 < next_cycle:
            continue
        next_cycle += spec.interval_s
        cycle_s = 0.0
        for app in apps:
            snap = app.snapshot(t, spec.window_s, app_cfg.trigger_interval_s, 4)
            t0 = time.perf_counter()
            # The daemon's own decide path; the simulated query has one shuffle partition count.
            history = replace(app.history, partitions={snap.query: app.shuffle_partitions})
            guarded = decide(snap, history, cfg, app_cfg)
            spent = time.perf_counter() - t0
            planning.append(spent)
            cycle_s += spent
            app.history = app.history.with_decision(t, guarded).trimmed(t - HISTORY_S)
            app.apply(guarded, t, spec.executor_start_s, spec.restart_cost_s)
        per_cycle.append(cycle_s)
    limits = SloLimits(batch_limit_ms=app_cfg.trigger_interval_s * 1000)
    measures = []
    for app in apps:
        def needed(rate: float, app: SimApp = app) -> int:
            return math.ceil(app.cores_needed(rate) / app.executor_cores - 1e-9)

        measures.append(measure(app.samples, app.actions, segs, limits, needed, app.executor_cores))
    return SimResult(spec, measures, planning, per_cycle, time.perf_counter() - started,
                     len(graph0.operators) - 1, [app.actions for app in apps])


def render(result: SimResult) -> str:
    s = result.summary()
    segs = segments(parse_profile(result.spec.profile))
    lines = [f"simulate {result.spec.policy}: {s['apps']} app(s) x {s['operators_per_app']} operators, "
             f"graph {result.spec.graph}, profile {result.spec.profile}, {result.spec.scaling} scaling "
             f"({s['wall_s']} s of wall time)",
             f"planning time per decision (policy + guards): p50 {s['planning_ms']['p50']} ms, "
             f"p99 {s['planning_ms']['p99']} ms, max {s['planning_ms']['max']} ms; per cycle over all apps: "
             f"p50 {s['cycle_planning_s']['p50']} s, max {s['cycle_planning_s']['max']} s"]
    for seg, conv in zip(segs, s["convergence_s"], strict=True):
        if conv["median"] is None:
            lines.append(f"  load {seg.rate:g}/s from t={seg.start_s:g} s: converged in no app")
            continue
        lines.append(f"  load {seg.rate:g}/s from t={seg.start_s:g} s: converged after median {conv['median']} s, "
                     f"worst {conv['worst']} s, never in {conv['never']} app(s)")
    lines.append(f"  scaling actions median {s['scaling_actions']['median']} (max {s['scaling_actions']['max']}), "
                 f"direction changes median {s['direction_changes']['median']} "
                 f"(max {s['direction_changes']['max']}), SLO violation median {s['slo_violation_s']['median']} s, "
                 f"over-provisioning median {s['over_provisioning']['median']}x, "
                 f"peak backlog median {s['peak_backlog_records']['median']}")
    return "\n".join(lines)

