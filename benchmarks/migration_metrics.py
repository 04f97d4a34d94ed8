"""The seed's migration metrics for DSM, DCR and CCR on the dag Star workload (Shukla & Simmhan §6),
scale-out (4 -> 8 state partitions) and scale-in (8 -> 4), median of `--repeat` runs each.

Method, per strategy: a fresh embedded environment runs the dag Star app (stateful hub, 2 source
partitions, 2 executors) under a constant load; `sparkscale migrate --json` moves it 4 -> 8 and
back 8 -> 4, `--repeat` times, each migration followed until its output rate is stable (within
`migration.stable_tolerance` of the input for `migration.stable_window_s`); then the load stops,
the app drains, and the verifier counts lost and duplicated records over the whole run. Prints a
table and writes JSON; figures, not assertions.

    .venv/bin/python benchmarks/migration_metrics.py --out docs/results/migration_metrics
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time

from _harness import embedded_environment, write_results  # benchmarks/ is on sys.path when run as a script

from sparkscale.pipeline.check import drained, verify_app
from sparkscale.pipeline.loadgen import run_loadgen
from sparkscale.pipeline.submit import stop, submit
from sparkscale.redisconn import connect

APP = """
  - name: star
    pipeline: dag
    max_executors: 2
    initial_executors: 2
    executor_memory_mb: 512
    source_partitions: 2
    shuffle_partitions: 4
    max_records_per_batch: 500
    dag: {shape: star, cost_ms_per_record: 0.5, selectivity: 1.0, key_space: 40}
"""
METRICS = ("restore_s", "drain_s", "capture_s", "rebalance_s", "catch_up_s", "recovery_s", "stabilization_s",
           "replayed_records", "captured_records")


def migrate(env, partitions: int, strategy: str, stable_window_s: float) -> dict:
    argv = [sys.executable, "-m", "sparkscale", "migrate", "--app", "star", "--partitions", str(partitions),
            "--strategy", strategy, "--json", "--config", env.config_path]
    for s in [*env.overrides, f"migration.stable_window_s={stable_window_s}", "migration.measure_timeout_s=90",
              "logging.stderr=false"]:
        argv += ["--set", s]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    lines = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not lines or not lines[-1].get("ok"):
        raise RuntimeError(f"migrate {strategy} -> {partitions} failed: {out.stdout[-2000:]} {out.stderr[-2000:]}")
    return lines[-1]["figures"]


def run_strategy(strategy: str, repeat: int, rate: int, stable_window_s: float) -> dict:
    with embedded_environment(f"sparkscale-mig-{strategy}-", APP) as env:
        cfg = env.cfg
        submit(cfg, "star", env.config_path, env.overrides, wait_s=300)
        stop_load = threading.Event()
        loader = threading.Thread(target=run_loadgen, args=(cfg, "star", f"constant:{rate}"),
                                  kwargs={"seed": 3, "stop": stop_load}, daemon=True)
        loader.start()
        time.sleep(30)  # warm-up: JIT, executors, the first batches (not measured)
        runs: dict[str, list[dict]] = {"scale-out": [], "scale-in": []}
        try:
            for _ in range(repeat):
                runs["scale-out"].append(migrate(env, 8, strategy, stable_window_s))
                runs["scale-in"].append(migrate(env, 4, strategy, stable_window_s))
        finally:
            stop_load.set()
            loader.join()
        client = connect(cfg.redis)
        deadline = time.monotonic() + 600
        while not drained(client, cfg, cfg.app("star")) and time.monotonic() < deadline:
            time.sleep(2)
        result = verify_app(cfg, "star")
        stop(cfg, "star")
        return {"strategy": strategy, "runs": runs, "lost": result.lost, "duplicated": result.duplicated,
                "total_expected": result.total_expected}


def median(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 2) if values else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strategies", default="dsm,dcr,ccr")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--rate", type=int, default=100, help="Input records/s (constant).")
    parser.add_argument("--stable-window-s", type=float, default=20.0)
    parser.add_argument("--out", default="docs/results/migration_metrics")
    args = parser.parse_args()
    results = [run_strategy(s, args.repeat, args.rate, args.stable_window_s) for s in args.strategies.split(",")]
    header = ["strategy", "direction", *METRICS, "lost (run)", "duplicated (run)"]
    rows = []
    for r in results:
        for direction, runs in r["runs"].items():
            rows.append([r["strategy"], direction, *[median([run.get(m) for run in runs]) for m in METRICS],
                         r["lost"], r["duplicated"]])
    table = "\n".join(["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
                       *["| " + " | ".join("-" if v is None else str(v) for v in row) + " |" for row in rows]])
    print(table)
    command = " ".join(["benchmarks/migration_metrics.py", *sys.argv[1:]])
    write_results(args.out, table, {"command": command, "rate": args.rate, "stable_window_s": args.stable_window_s,
                                    "results": results})


if __name__ == "__main__":
    main()
