"""What a placement policy sees and what it returns. Pure data, no I/O.

A placement policy (OTD, EDRP, Spark's own) decides for the whole cluster at once, not for one app:
which worker each managed app's executors should sit on and, for EDRP, how many each app gets. Its
input is a `ClusterModel` (built by the monitors from the master's and workers' `/json/`, the
drivers' `/executors` and the snapshots; docs/internals.md), its output a `PlacementPlan` that the
daemon arbitrates and the actuators carry out (`replace_executor` for a move, `set_executors` for a
count).

Spark terms for the seeds' (docs/internals.md, "Placement"): node = worker host, worker = standalone
worker, executor = replica, CC = shuffle bytes per second between two executors of one app.
Executor ids are unique only within an app, so an executor is named by `ExecutorKey` (app, id).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pydantic import JsonValue

from sparkscale.model.placement import FreeRoom


@dataclass(frozen=True, order=True)
class ExecutorKey:
    app: str
    id: str

    def __str__(self) -> str:
        return f"{self.app}/{self.id}"


@dataclass(frozen=True)
class Worker(FreeRoom):
    """One ALIVE standalone worker. `cores_used` / `memory_used_mb` count every app's executors,
    managed or not (the master's `coresused`, `memoryused`)."""

    id: str
    host: str
    cores: int
    memory_mb: int
    cores_used: int = 0
    memory_used_mb: int = 0
    busy_share: float | None = None  # load: busy core-seconds of its executors / (window_s * cores), 0..1



@dataclass(frozen=True)
class PlacedExecutor:
    """One executor of a managed app and the worker it runs on."""

    key: ExecutorKey
    worker: str
    cores: int
    memory_mb: int
    busy_share: float | None = None  # of its own cores over the window, 0..1


@dataclass(frozen=True)
class AppDemand:
    """One managed app: its executor shape, bounds and load (the DS2 figures of its snapshot)."""

    app: str
    executor_cores: int
    executor_memory_mb: int
    min_executors: int
    max_executors: int
    arrival_rate: float = 0.0  # lambda: records/s arriving (sum over the app's queries' sources)
    rate_per_executor: float | None = None  # mu: records/s one executor processes (DS2 true rate, scaled)
    state_bytes: int = 0  # I_S: the app's state (sum of its stateful operators' memoryUsedBytes)
    state_partitions: int = 0  # 0: stateless
    trigger_s: float = 1.0  # the queries' trigger interval (EDRP's micro-batch response model)


@dataclass(frozen=True)
class Traffic:
    """CC_{src->dst}: shuffle bytes per second from `src`'s map output to `dst`'s reduce tasks."""

    src: ExecutorKey
    dst: ExecutorKey
    bytes_per_s: float


@dataclass(frozen=True)
class ClusterModel:
    workers: tuple[Worker, ...]
    executors: tuple[PlacedExecutor, ...] = ()
    apps: tuple[AppDemand, ...] = ()
    traffic: tuple[Traffic, ...] = ()
    # app -> the worker the master would put that app's next executor on (its spreadOut and
    # workerSelectionPolicy over free cores and memory); None: no worker has room; an app absent
    # from the mapping: not predicted, so a target is limited by room alone
    landing: Mapping[str, str | None] = field(default_factory=dict)

    def worker(self, worker_id: str) -> Worker:
        for w in self.workers:
            if w.id == worker_id:
                return w
        raise KeyError(f"no worker {worker_id!r}")

    def app(self, name: str) -> AppDemand:
        for a in self.apps:
            if a.app == name:
                return a
        raise KeyError(f"no app {name!r}")

    def executors_on(self, worker_id: str) -> tuple[PlacedExecutor, ...]:
        return tuple(e for e in self.executors if e.worker == worker_id)

    def executors_of(self, app: str) -> tuple[PlacedExecutor, ...]:
        return tuple(e for e in self.executors if e.key.app == app)

    def host_of(self) -> dict[str, str]:
        """Worker id -> its host (the seeds' node)."""
        return {w.id: w.host for w in self.workers}

    def shuffle_bytes_per_s(self) -> tuple[float, float]:
        """(between hosts, within a host) of the traffic (CC) between the managed executors."""
        host = self.host_of()
        where = {e.key: host.get(e.worker) for e in self.executors}
        remote = sum(t.bytes_per_s for t in self.traffic if where.get(t.src) != where.get(t.dst))
        return remote, sum(t.bytes_per_s for t in self.traffic) - remote

    def to_table(self) -> str:
        """The cluster as `sparkscale cluster-plan` shows it: workers, then apps."""
        lines = [f"{'worker':<34} {'host':<15} {'cores used':>10} {'busy':>6}  executors (app/id)"]
        for w in self.workers:
            mine = " ".join(str(e.key) for e in self.executors_on(w.id)) or "-"
            busy = "-" if w.busy_share is None else f"{w.busy_share:.2f}"
            lines.append(f"{w.id:<34} {w.host:<15} {f'{w.cores_used}/{w.cores}':>10} {busy:>6}  {mine}")
        lines.append("")
        lines.append(f"{'app':<16} {'executors':>9} {'shape':>12} {'arrival/s':>10} {'rate/executor':>13} "
                     f"{'state MB':>9}  lands on")
        for a in self.apps:
            rate = "-" if a.rate_per_executor is None else f"{a.rate_per_executor:.1f}"
            lines.append(f"{a.app:<16} {len(self.executors_of(a.app)):>9} "
                         f"{f'{a.executor_cores}c/{a.executor_memory_mb}MB':>12} {a.arrival_rate:>10.1f} {rate:>13} "
                         f"{a.state_bytes / 1e6:>9.1f}  {self.landing.get(a.app) or '-'}")
        remote, local = self.shuffle_bytes_per_s()
        lines.append(f"shuffle between managed executors: {remote:.0f} B/s between hosts, {local:.0f} B/s within one")
        return "\n".join(lines)


@dataclass(frozen=True)
class Move:
    """Move one executor: `replace_executor` (one more lands on `target`, then `key` is decommissioned)."""

    key: ExecutorKey
    source: str  # worker id
    target: str  # worker id
    score: float  # OTD: ASC of the move (eq. 5); EDRP: 0
    reason: str


@dataclass(frozen=True)
class CountChange:
    """Set an app's executor count: adds land where the master puts them, removals are chosen."""

    app: str
    executors_now: int
    executors_target: int
    remove: tuple[ExecutorKey, ...] = ()  # which executors to decommission (scale-in, EDRP's q)
    reason: str = ""


@dataclass(frozen=True)
class PlacementWarning:
    """The cluster cannot hold what the apps need (OTD Case 2, an infeasible EDRP)."""

    kind: str  # "short_of_resources", "infeasible", "solver_limit"
    message: str
    figures: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class PlacementPlan:
    policy: str
    moves: tuple[Move, ...] = ()
    counts: tuple[CountChange, ...] = ()
    warnings: tuple[PlacementWarning, ...] = ()
    objective: float | None = None  # EDRP's F of the chosen deployment
    figures: Mapping[str, float] = field(default_factory=dict)  # what the decision rests on
    reason: str = ""
    # Apps whose executor count this plan decides, changed or kept (EDRP: those with a measured
    # rate): their scaling policy's count is replaced, so the two never undo each other.
    sized: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.moves and not self.counts

    def to_table(self) -> str:
        lines = [f"placement {self.policy}: {self.reason or ('no change' if self.empty else '')}".rstrip()]
        lines += [f"  move {m.key} {m.source} -> {m.target} (score {m.score:.4g}): {m.reason}" for m in self.moves]
        lines += [f"  set {c.app} executors {c.executors_now} -> {c.executors_target}"
                  + (f", decommission {', '.join(str(k) for k in c.remove)}" if c.remove else "")
                  + (f": {c.reason}" if c.reason else "") for c in self.counts]
        lines += [f"  WARNING {w.kind}: {w.message}" for w in self.warnings]
        if self.objective is not None:
            lines.append(f"  objective {self.objective:.4f}")
        lines += [f"  {k} = {v:.4g}" if isinstance(v, float) else f"  {k} = {v}" for k, v in self.figures.items()]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, JsonValue]:
        return {
            "policy": self.policy,
            "moves": [{"executor": str(m.key), "app": m.key.app, "executor_id": m.key.id, "source": m.source,
                       "target": m.target, "score": m.score, "reason": m.reason} for m in self.moves],
            "counts": [{"app": c.app, "executors_now": c.executors_now, "executors_target": c.executors_target,
                        "remove": [str(k) for k in c.remove], "reason": c.reason} for c in self.counts],
            "warnings": [{"kind": w.kind, "message": w.message, "figures": dict(w.figures)} for w in self.warnings],
            "objective": self.objective,
            "figures": dict(self.figures),
            "reason": self.reason,
            "sized": list(self.sized),
        }
