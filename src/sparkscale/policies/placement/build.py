"""The cluster as a placement policy sees it, built from one cycle's snapshots. Pure.

Every managed query's snapshot carries its app's share of the cluster view
(`extensions["cluster"]`: the ALIVE workers with their size and free room, and which of the app's
executors run on each) and the executors' figures over the window. Put together they give the
`ClusterModel`, so `sparkscale cluster-plan SNAPSHOTS` offline sees what the daemon saw.

- Worker load (`busy_share`): the managed executors' busy task-slot time on it (`task_time_fraction`
  x cores, Python workers' time included) over its cores, or over its host's CPUs where the
  operator says they are fewer (`placement.host_cpus`, an oversubscribed worker). Executors of apps sparkscale does not
  manage are invisible here (their cores count as used, not as load).
- Traffic CC_{e->e'} (OTD's input): Spark gives no per-pair figure, only each executor's shuffle
  bytes written and read in the window. A hash shuffle is all-to-all, so a gravity model spreads
  e's written bytes over the readers in proportion to what each read:
  CC_{e->e'} = W_e x R_e' / sum_x R_x (docs/internals.md, "Placement"). The measured remote share
  (`shuffle_remote_read_bytes`) is what it is checked against.
- Demand: arrival rate and the rate one executor sustains (DS2's capacity on one executor's cores,
  `Ds2Estimate.capacity_rps`, the figure a scale-up's outcome is judged by, with the per-task
  overhead model DS2 sizes by: `policy.ds2.task_overhead`, ds2.py `capacity_task_overhead`), state
  size from the progress reports' `memoryUsedBytes`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sparkscale.config import AppConfig
from sparkscale.model.placement import Placement, placement_of
from sparkscale.model.snapshot import Snapshot
from sparkscale.policies.ds2_model import estimate
from sparkscale.policies.figures import load_figures
from sparkscale.policies.placement.landing import landing_worker
from sparkscale.policies.placement.model import (
    AppDemand,
    ClusterModel,
    ExecutorKey,
    PlacedExecutor,
    Traffic,
    Worker,
)


def _num(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _workers(placements: Sequence[Placement]) -> dict[str, Worker]:
    """Every ALIVE worker any app's view lists; the last view read wins (they come from one cycle)."""
    out: dict[str, Worker] = {}
    for p in placements:
        for w in p.workers:
            cores = w.cores or w.cores_free
            memory = w.memory_mb or w.memory_free_mb
            out[w.id] = Worker(w.id, w.host, cores, memory, cores - w.cores_free, memory - w.memory_free_mb)
    return out


def _demand(app: AppConfig, snaps: Sequence[Snapshot], task_overhead: bool) -> AppDemand:
    arrival = 0.0
    rates: list[float] = []
    state = partitions = 0
    trigger = max((s.trigger_interval_s or app.trigger_interval_s for s in snaps), default=app.trigger_interval_s)
    for snap in snaps:
        figures = load_figures(snap, app)
        arrival += figures.arrival_rate
        # DS2's capacity model on one executor's cores: its stages' true rates, each stage capped
        # at its partitions; a source's time (waiting on its input) is not work an executor adds.
        capacity = estimate(snap, task_overhead=task_overhead).capacity_rps(app.executor_cores)
        if capacity:
            rates.append(capacity)
        progress = snap.extensions.get("progress") or {}
        state += int(_num(progress.get("state_memory_bytes")) or 0)
        partitions = max(partitions, int(_num(progress.get("state_partitions")) or 0))
    # Several queries share the app's executors: one executor serves them in turn, so its rate for
    # the app is the slowest query's (a conservative reading; one query per app is the usual case).
    return AppDemand(app.name, app.executor_cores, app.executor_memory_mb, app.min_executors, app.max_executors,
                     arrival, min(rates) if rates else None, state, partitions, trigger)


def _gravity(keys: Sequence[ExecutorKey], written: Mapping[ExecutorKey, float],
             read: Mapping[ExecutorKey, float]) -> list[Traffic]:
    total_read = sum(read.values())
    if total_read <= 0:
        return []
    return [Traffic(src, dst, written[src] * read[dst] / total_read)
            for src in keys for dst in keys
            if src != dst and written.get(src, 0) > 0 and read.get(dst, 0) > 0]


def cluster_model(snapshots: Sequence[Snapshot], apps: Mapping[str, AppConfig],
                  selection_policy: str = "CORES_FREE_DESC",
                  host_cpus: Mapping[str, int] | None = None, task_overhead: bool = True) -> ClusterModel:
    """The model of the managed apps in `snapshots` (those without a cluster view are left out);
    `host_cpus`: a worker host's CPUs where fewer than its worker's cores (`placement.host_cpus`);
    `task_overhead`: an executor's rate measured with the per-task overhead fitted (ds2_model's)."""
    by_app: dict[str, list[Snapshot]] = {}
    for snap in snapshots:
        if snap.app in apps:
            by_app.setdefault(snap.app, []).append(snap)
    placements: dict[str, Placement] = {}
    for name, snaps in by_app.items():
        found = [p for s in snaps if (p := placement_of(s.extensions)) is not None and p.error is None]
        if found:
            placements[name] = found[-1]
    workers = _workers(list(placements.values()))
    executors: list[PlacedExecutor] = []
    traffic: list[Traffic] = []
    busy_cores: dict[str, float] = {}
    for name, placement in sorted(placements.items()):
        app = apps[name]
        where = placement.worker_of()
        busy: dict[str, float] = {}
        written: dict[ExecutorKey, float] = {}
        read: dict[ExecutorKey, float] = {}
        cores: dict[str, int] = {}
        for snap in by_app[name]:
            for e in snap.executors:
                cores[e.id] = e.cores
                share = _num(e.extra.get("task_time_fraction"))
                if share is not None:
                    busy[e.id] = busy.get(e.id, 0.0) + share  # several queries' tasks on one executor
                key = ExecutorKey(name, e.id)
                window = snap.window_s or 1.0
                written[key] = written.get(key, 0.0) + (_num(e.extra.get("shuffle_write_bytes")) or 0.0) / window
                read[key] = read.get(key, 0.0) + ((_num(e.extra.get("shuffle_remote_read_bytes")) or 0.0)
                                                  + (_num(e.extra.get("shuffle_local_read_bytes")) or 0.0)) / window
        keys: list[ExecutorKey] = []
        for executor_id, worker_id in sorted(where.items()):
            if worker_id not in workers:
                continue
            n_cores = cores.get(executor_id, app.executor_cores)
            share = None if executor_id not in busy else min(busy[executor_id], 1.0)
            key = ExecutorKey(name, executor_id)
            keys.append(key)
            executors.append(PlacedExecutor(key, worker_id, n_cores,
                                            placement.executor_memory_mb or app.executor_memory_mb, share))
            busy_cores[worker_id] = busy_cores.get(worker_id, 0.0) + (share or 0.0) * n_cores
        traffic += _gravity(keys, written, read)
    cpus = host_cpus or {}
    loaded = {wid: Worker(w.id, w.host, w.cores, w.memory_mb, w.cores_used, w.memory_used_mb,
                          min(busy_cores.get(wid, 0.0) / min(w.cores, cpus.get(w.host, w.cores)), 1.0)
                          if w.cores else None)
              for wid, w in workers.items()}
    demands = tuple(_demand(apps[name], by_app[name], task_overhead) for name in sorted(placements))
    landing = {d.app: landing_worker(loaded.values(), d.executor_cores, d.executor_memory_mb, selection_policy)
               for d in demands}
    return ClusterModel(tuple(loaded[w] for w in sorted(loaded)), tuple(executors), demands, tuple(traffic), landing)
