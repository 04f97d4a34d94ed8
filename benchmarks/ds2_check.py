"""DS2's recommendation against what actually keeps up: wordcount at three input rates.

For each rate, try executor counts 1, 2, 4 (fixed: min = max = initial) in turn: submit wordcount,
drive it at the rate for `--run-s` seconds, take a live snapshot (`collect_snapshot`) near the end,
ask DS2 (the configured target utilisation, and u = 1.0, the paper's formula) for the cores it
needs, and record whether the pipeline kept up (backlog at the end below `rate x 3 s`). Stops at the
first count that keeps up. Prints a table and writes JSON. Figures, not assertions.

    .venv/bin/python benchmarks/ds2_check.py --out docs/results/ds2_check
"""

from __future__ import annotations

import argparse
import threading
import time

from sparkscale.apps.submit import stop, submit
from sparkscale.monitors.collector import CollectOptions, collect_snapshot
from sparkscale.policies.ds2 import estimate
from sparkscale.redisconn import connect
from sparkscale_lab.bench.environment import embedded_environment, write_results
from sparkscale_lab.pipelines.check import unprocessed_records
from sparkscale_lab.pipelines.loadgen import run_loadgen


def app_yaml(name: str, executors: int) -> str:
    return f"""
  - name: {name}
    pipeline: wordcount
    min_executors: {executors}
    max_executors: {executors}
    initial_executors: {executors}
    executor_memory_mb: 768
    source_partitions: 4
    shuffle_partitions: 4
    max_records_per_batch: 40000
"""


def trial(cfg, config_path: str, overrides: list[str], name: str, rate: int, run_s: float, window_s: float) -> dict:
    app = cfg.app(name)
    submit(cfg, name, config_path, overrides)
    client = connect(cfg.redis)
    try:
        result: dict = {}
        loader = threading.Thread(target=lambda: result.update(
            summary=run_loadgen(cfg, name, f"constant:{rate}@{run_s:.0f}s", seed=rate)))
        loader.start()
        time.sleep(run_s - 2)  # the snapshot covers the last `window_s` of the run at this rate
        snap = collect_snapshot(cfg, name, CollectOptions(window_s=window_s))
        loader.join()
        backlog = unprocessed_records(client, cfg, app)
        policy = cfg.policy
        configured = estimate(snap, policy.target_utilization, policy.ds2.catch_up_s,
                              policy.ds2.min_parallelism, policy.ds2.max_parallelism)
        paper = estimate(snap, 1.0, policy.ds2.catch_up_s, policy.ds2.min_parallelism, policy.ds2.max_parallelism)
        return {
            "rate_per_s": rate,
            "executors": app.max_executors,
            "achieved_rate_per_s": round(result["summary"].records_sent / result["summary"].duration_s, 1),
            "backlog_at_end": backlog,
            "kept_up": backlog < rate * 3,
            "batch_duration_s": snap.batch_duration_s,
            "ds2_cores_u_configured": configured.cores_needed,
            "ds2_cores_u_1": paper.cores_needed,
            "target_utilization": policy.target_utilization,
        }
    finally:
        client.close()
        stop(cfg, name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rates", default="2000,6000,12000")
    parser.add_argument("--executors", default="1,2,4")
    parser.add_argument("--run-s", type=float, default=45.0)
    parser.add_argument("--window-s", type=float, default=20.0)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    rates = [int(r) for r in args.rates.split(",")]
    counts = [int(n) for n in args.executors.split(",")]

    rows = []
    with embedded_environment("sparkscale-ds2-", "".join(app_yaml(f"wc{n}", n) for n in counts)) as bench:
        for rate in rates:
            for n in counts:
                row = trial(bench.cfg, bench.config_path, bench.overrides, f"wc{n}", rate, args.run_s, args.window_s)
                print(row, flush=True)
                rows.append(row)
                if row["kept_up"]:
                    break

    lines = ["| input rate (lines/s) | executors tried | kept up | backlog at end | batch duration (s) | "
             "DS2 cores (u=configured) | DS2 cores (u=1) |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['rate_per_s']} | {r['executors']} | {'yes' if r['kept_up'] else 'no'} | "
                     f"{r['backlog_at_end']} | {r['batch_duration_s']} | {r['ds2_cores_u_configured']} | "
                     f"{r['ds2_cores_u_1']} |")
    table = "\n".join(lines)
    print(table)
    if args.out:
        command = "python benchmarks/ds2_check.py " + " ".join(
            f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if v is not None)
        write_results(args.out, table, {"command": command, "rows": rows})


if __name__ == "__main__":
    main()
