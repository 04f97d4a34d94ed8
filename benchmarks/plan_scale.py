"""How long DS2 takes on a large query: 1,000 operators, 10,000 instances, a layered DAG.

Not a test: it prints figures (median of 5 runs) for people to compare across changes.

    .venv/bin/python benchmarks/plan_scale.py [--operators 1000] [--instances 10000] [--layers 10]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

from sparkscale.config import AppConfig, PolicyConfig
from sparkscale.model.snapshot import Snapshot
from sparkscale.policies.base import DecisionHistory
from sparkscale.policies.ds2 import Ds2Policy


def synthetic_snapshot(operators: int, instances: int, layers: int, seed: int = 1) -> dict[str, Any]:
    """A layered DAG as snapshot JSON: layer 0 are sources, each operator of layer L+1 reads from
    1 to 3 operators of layer L, and instances are spread evenly over the operators."""
    rng = random.Random(seed)
    per_layer = operators // layers
    per_op = instances // operators
    ids = [[f"op{layer}_{k}" for k in range(per_layer)] for layer in range(layers)]
    ops: list[dict[str, Any]] = []
    edges: list[list[str]] = []
    for layer, names in enumerate(ids):
        for name in names:
            insts = []
            for _ in range(per_op):
                useful_s = rng.uniform(1.0, 10.0)
                records_in = rng.randint(1_000, 100_000)
                insts.append({"records_in": records_in, "records_out": int(records_in * rng.uniform(0.5, 1.5)),
                              "useful_time_s": useful_s, "executor": str(rng.randint(1, 64))})
            op: dict[str, Any] = {"id": name, "parallelism": per_op, "instances": insts}
            if layer == 0:
                op.update(source=True, arrival_rate=rng.uniform(100, 10_000), backlog=rng.randint(0, 100_000))
            else:
                for up in rng.sample(ids[layer - 1], rng.randint(1, 3)):
                    edges.append([up, name])
            ops.append(op)
    rng.shuffle(ops)  # the snapshot's operator order is not topological
    return {
        "version": 1, "app": "bench", "query": "q", "taken_at": 0.0, "window_s": 30.0,
        "executors": [{"id": str(k), "host": "10.0.0.1", "cores": 4} for k in range(1, 65)],
        "operators": ops, "edges": edges,
    }


def median_s(fn: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--operators", type=int, default=1000)
    parser.add_argument("--instances", type=int, default=10_000)
    parser.add_argument("--layers", type=int, default=10)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()

    raw = synthetic_snapshot(args.operators, args.instances, args.layers)
    snap = Snapshot.from_dict(raw)
    policy, history = Ds2Policy(), DecisionHistory.empty()
    cfg, app = PolicyConfig(), AppConfig(name="bench", max_executors=10_000)
    plan = policy.decide(snap, history, cfg, app)

    rows = [
        ("Snapshot.from_dict (validate)", median_s(lambda: Snapshot.from_dict(raw), args.runs)),
        ("Ds2Policy.decide", median_s(lambda: policy.decide(snap, history, cfg, app), args.runs)),
        ("Plan.to_dict", median_s(plan.to_dict, args.runs)),
    ]
    print(f"{len(snap.operators)} operators, {sum(len(o.instances) for o in snap.operators)} instances, "
          f"{len(snap.edges)} edges, {args.layers} layers; {len(plan.actions)} actions; median of {args.runs} runs")
    width = max(len(name) for name, _ in rows)
    print(f"{'step'.ljust(width)}  median ms")
    print(f"{'-' * width}  ---------")
    for name, seconds in rows:
        print(f"{name.ljust(width)}  {seconds * 1000:9.1f}")


if __name__ == "__main__":
    main()
