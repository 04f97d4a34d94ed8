"""How long EDRP and rEDRP take to plan a cluster: 100 apps on 20 workers, random but seeded.

Not a test: it prints figures (median and max over the seeds) for people to compare across changes,
and to set `placement.edrp.time_limit_s`. The paper's Table IV is the reference point: its CPLEX
EDRP took 3.7 s for 8 nodes and k = 2, and rEDRP 0.8 s.

    .venv/bin/python benchmarks/placement_planning.py [--apps 100] [--workers 20] [--seeds 5] [--landing]

Instances: workers with 8-32 cores (4 GB per core); apps with 1-4 cores per executor and 1-8
executors each. Executors are placed round-robin over the apps, each on a random worker under 3/4
full, so an app keeps fewer than it wants when the cluster runs out. mu is 100-1000 records/s per
executor and lambda 0.4-0.9 of what the current count serves, so every app is stable and within
R_max now; EDRP weighs adding (lower R) or removing (lower C) against the downtime. `--landing`
adds the master's predicted landing worker for each app (the most free cores, CORES_FREE_DESC):
the realisable Spark mode, one addition per call.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from sparkscale.policies.placement.edrp import solve
from sparkscale.policies.placement.edrp_model import EdrpSettings
from sparkscale.policies.placement.landing import landing_worker
from sparkscale.policies.placement.model import AppDemand, ClusterModel, ExecutorKey, PlacedExecutor, Worker


def synthetic_cluster(apps: int, workers: int, seed: int, landing: bool = False) -> ClusterModel:
    rng = random.Random(seed)
    cores = {f"worker-{k:02d}": rng.randint(8, 32) for k in range(workers)}
    used = dict.fromkeys(cores, 0)
    shape = {f"app-{k:03d}": (rng.randint(1, 4), rng.randint(1, 8)) for k in range(apps)}  # cores, executors
    placed = dict.fromkeys(shape, 0)
    execs: list[PlacedExecutor] = []
    for round_ in range(8):  # one executor per app per round, so every app gets one before any gets two
        for name, (c, want) in shape.items():
            room = [w for w in cores if 0.75 * cores[w] - used[w] >= c]  # start at most 3/4 full
            if round_ < want and room:
                w = rng.choice(room)
                used[w] += c
                placed[name] += 1
                execs.append(PlacedExecutor(ExecutorKey(name, str(placed[name])), w, c, c * 4096))
    demands: list[AppDemand] = []
    for name, (c, _want) in shape.items():
        mu = rng.uniform(100, 1000)
        lam = mu * max(placed[name], 1) * rng.uniform(0.4, 0.9)
        demands.append(AppDemand(name, c, c * 4096, 1, 8, arrival_rate=lam, rate_per_executor=mu,
                                 state_bytes=rng.choice([0, 10**8, 10**9])))
    ws = tuple(Worker(w, f"host-{w}", cores[w], cores[w] * 4096, used[w], used[w] * 4096) for w in cores)
    predicted: dict[str, str | None] = {}
    if landing:
        for a in demands:
            predicted[a.app] = landing_worker(ws, a.executor_cores, a.executor_memory_mb)
    return ClusterModel(ws, tuple(execs), tuple(demands), landing=predicted)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--apps", type=int, default=100)
    parser.add_argument("--workers", type=int, default=20)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--time-limit", type=float, default=60.0, help="HiGHS time limit per solve, s")
    parser.add_argument("--landing", action="store_true", help="restrict additions to the predicted landing worker")
    args = parser.parse_args()

    rows = []
    for label, reduced in (("EDRP", False), ("rEDRP", True)):
        settings = EdrpSettings(reduced=reduced, time_limit_s=args.time_limit)
        wall, highs, variables, constraints, outcomes = [], [], [], [], []
        for seed in range(1, args.seeds + 1):
            model = synthetic_cluster(args.apps, args.workers, seed, args.landing)
            started = time.perf_counter()
            plan = solve(model, settings).plan
            wall.append((time.perf_counter() - started) * 1000.0)
            highs.append(plan.figures.get("solve_ms", 0.0))
            variables.append(plan.figures["variables"])
            constraints.append(plan.figures["constraints"])
            outcomes.append(plan.warnings[0].kind if plan.warnings else
                            f"{len(plan.counts)} counts, {len(plan.moves)} moves")
        rows.append((label, statistics.median(variables), statistics.median(constraints),
                     statistics.median(wall), max(wall), statistics.median(highs), max(highs), outcomes))

    print(f"{args.apps} apps, {args.workers} workers, {args.seeds} seed(s), "
          f"landing {'on' if args.landing else 'off'}, time limit {args.time_limit:g} s")
    print()
    print("| variant | variables | constraints | plan ms median | plan ms max | HiGHS ms median | HiGHS ms max |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for label, nv, nc, wmed, wmax, hmed, hmax, _ in rows:
        print(f"| {label} | {nv:.0f} | {nc:.0f} | {wmed:.1f} | {wmax:.1f} | {hmed:.1f} | {hmax:.1f} |")
    print()
    for label, *_, outcomes in rows:
        print(f"{label} outcomes per seed: {'; '.join(outcomes)}")


if __name__ == "__main__":
    main()
