"""The highest rate each workload sustains on the embedded environment, with 1 and with N executors.

Method, per workload and executor count: submit the app with its executor count fixed (min = max =
initial), then, once to warm up (executors registering, JIT; not counted) and `--repeat` times:
pause its sources through the control agent, write a backlog with the load generator, resume, and
time how long the pipeline takes to process all of it. The records per batch are capped so that a
batch lasts about 1-10 s (a single huge batch would say nothing about batch duration). The
saturated processing rate (backlog / drain time) is the highest input rate it can sustain; the
median batch duration during the drain (from the agent's progress reports) is its batch duration
at that rate. Prints a table and writes JSON (figures, not assertions: this is not a test).

    .venv/bin/python benchmarks/pipeline_throughput.py --out docs/results/pipeline_throughput
"""

from __future__ import annotations

import argparse
import statistics
import time

from sparkscale import zkconn
from sparkscale.apps.submit import stop, submit
from sparkscale.daemon.leader import LeaderElection
from sparkscale.protocol.commands import send_command, wait_ack
from sparkscale.redisconn import connect
from sparkscale_lab.bench.environment import embedded_environment, write_results
from sparkscale_lab.pipelines.check import unprocessed_records
from sparkscale_lab.pipelines.loadgen import run_loadgen
from sparkscale_lab.pipelines.workloads import workload

# Backlog per run: large enough for tens of batches at the expected rate, small enough to write fast.
BACKLOG = {"wordcount": 150000, "dag": 1500, "taxi_top_routes": 40000}
WRITE_RATE = {"wordcount": 30000, "dag": 3000, "taxi_top_routes": 8000}
BATCH_CAP = {"wordcount": 20000, "dag": 400, "taxi_top_routes": 10000}


def app_yaml(pipeline: str, executors: int) -> str:
    name = f"{pipeline.replace('_', '-')}-{executors}"
    return f"""
  - name: {name}
    pipeline: {pipeline}
    min_executors: {executors}
    max_executors: {executors}
    initial_executors: {executors}
    executor_cores: 1
    executor_memory_mb: 768
    source_partitions: 4
    shuffle_partitions: 4
    max_records_per_batch: {BATCH_CAP[pipeline]}
"""


def measure(cfg, app_name: str, pipeline: str, repeat: int) -> list[dict]:
    app = cfg.app(app_name)
    query = workload(pipeline).query
    client = connect(cfg.redis)
    history = f"{cfg.redis.key_prefix}{app_name}:progress:{query}:history"
    zk = zkconn.client(cfg.zookeeper)
    zk.start(timeout=15)
    # The agent runs commands only from the holder of the app's leader lock, at its epoch.
    election = LeaderElection(zk, cfg.zookeeper.root, app_name, "benchmark:pipeline_throughput")
    if not election.acquire(timeout_s=30.0) or election.epoch is None:
        raise RuntimeError(f"could not take the leader lock of {app_name}")
    epoch = election.epoch
    runs = []
    try:
        for i in range(repeat + 1):  # run 0 warms up
            ack = wait_ack(zk, cfg.zookeeper.root, app_name,
                           send_command(zk, cfg.zookeeper.root, app_name, "pause_sources", {}, epoch=epoch), 60)
            assert ack.ok, ack.detail
            _wait(lambda: unprocessed_records(client, cfg, app) == 0, 600)
            rate = WRITE_RATE[pipeline]
            summary = run_loadgen(cfg, app_name, f"constant:{rate}@{BACKLOG[pipeline] / rate:.2f}s", seed=100 + i)
            last_entry = client.xrevrange(history, count=1)
            since = last_entry[0][0] if last_entry else "0-0"
            started = time.monotonic()
            ack = wait_ack(zk, cfg.zookeeper.root, app_name,
                           send_command(zk, cfg.zookeeper.root, app_name, "resume_sources", {}, epoch=epoch), 60)
            assert ack.ok, ack.detail
            _wait(lambda: unprocessed_records(client, cfg, app) == 0, 900)
            drain_s = time.monotonic() - started

            def batches_since(since: str = since) -> list[dict]:
                return [f for _, f in client.xrange(history, min=f"({since}", max="+")
                        if int(f.get("num_input_rows", 0)) > 0]

            # Progress events reach Redis through an asynchronous listener: wait until they account
            # for every record (or a bounded time) before reading batch durations.
            sent = summary.records_sent
            _wait(lambda sent=sent: sum(int(f["num_input_rows"]) for f in batches_since()) >= sent, 60)
            batches = batches_since()
            durations = [float(f["batch_duration_ms"]) / 1000 for f in batches if "batch_duration_ms" in f]
            run = {
                "records": summary.records_sent,
                "drain_s": round(drain_s, 2),
                "rate_per_s": round(summary.records_sent / drain_s, 1),
                "batches": len(batches),
                "median_batch_duration_s": round(statistics.median(durations), 2) if durations else None,
            }
            print(f"  {app_name} run {i}{' (warm-up)' if i == 0 else ''}: {run}", flush=True)
            if i > 0:
                runs.append(run)
    finally:
        election.release()
        zk.stop()
        zk.close()
        client.close()
    return runs


def _wait(condition, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not reached")
        time.sleep(0.25)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", default="wordcount,dag,taxi_top_routes")
    parser.add_argument("--executors", default="1,4")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", default=None, help="Write OUT.json and OUT.md")
    args = parser.parse_args()
    pipelines = args.workloads.split(",")
    counts = [int(n) for n in args.executors.split(",")]

    results = []
    with embedded_environment("sparkscale-bench-", "".join(app_yaml(p, n) for p in pipelines for n in counts)) as bench:
        cfg = bench.cfg
        for pipeline in pipelines:
            for n in counts:
                name = f"{pipeline.replace('_', '-')}-{n}"
                submit(cfg, name, bench.config_path, bench.overrides)
                try:
                    runs = measure(cfg, name, pipeline, args.repeat)
                finally:
                    stop(cfg, name)
                results.append({
                    "workload": pipeline, "executors": n, "runs": runs,
                    "median_rate_per_s": statistics.median(r["rate_per_s"] for r in runs),
                    "median_batch_duration_s": statistics.median(
                        r["median_batch_duration_s"] for r in runs if r["median_batch_duration_s"] is not None),
                })

    lines = ["| workload | executors | sustained rate (records/s, median of runs) | batch duration at it (s) |",
             "|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['workload']} | {r['executors']} | {r['median_rate_per_s']:.0f} | "
                     f"{r['median_batch_duration_s']:.2f} |")
    table = "\n".join(lines)
    print(table)
    if args.out:
        command = "python benchmarks/pipeline_throughput.py " + " ".join(
            f"--{k} {v}" for k, v in vars(args).items() if v is not None)
        write_results(args.out, table, {"command": command, "taken_at": time.time(), "results": results})


if __name__ == "__main__":
    main()
