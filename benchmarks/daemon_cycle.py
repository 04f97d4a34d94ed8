"""How long one MAPE cycle takes, with 1 and with 10 managed queries, and the daemon's memory:
the cycle as it was ("before": a blocking 0.5 s CPU sample, every stage of the window fetched from
the driver each cycle) and as it is ("after": CPU as a delta between cycles, finished stages kept),
side by side on the same apps in the same run.

Method: an embedded environment runs N wordcount apps (one query each, one executor, a light
constant load so that every window has batches). `sparkscale run` manages them in a child process
with the DS2 policy in dry-run, once every app is past its first batches (10 batches with input:
10 drivers' first batches take a minute or more on 2 cores), once per variant (the whole cycle:
snapshot from Spark REST, Redis and psutil, policy, guards, action log; nothing is changed, so
every cycle does the same work), at
`--interval-s` (0.2 s: cycles run back to back, a stress; 10 s: the shipped interval, the apps'
cycles spread over it), until each app had its `--cycles` cycles (360, one hour at the default
10 s interval, for 1 query; 60 each for 10 queries, 600 cycles in all). Cycle durations
come from the daemon's own `cycle` log events (`duration_s`); the daemon's resident memory (RSS)
is sampled with psutil after the first cycles and at the end. Each cycle event also says how long
the reading of Spark, Redis and ZooKeeper took (`collect_s`) and the daemon's own CPU time (`cpu_s`, the
cycle thread's): with 10 drivers on 2 cores the rest is waiting. Prints a table and writes JSON;
figures, not assertions. `--keep-logs DIR` keeps each daemon's JSON log, whose `cycle` events
every figure comes from.

    .venv/bin/python benchmarks/daemon_cycle.py --out docs/results/daemon_cycle
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

from sparkscale.apps.submit import stop, submit
from sparkscale.redisconn import connect_as
from sparkscale_lab.bench.environment import embedded_environment, queries_ran, wait_for, write_results
from sparkscale_lab.pipelines.loadgen import run_loadgen


def apps_yaml(count: int) -> str:
    return "".join(f"""
  - name: wc{i}
    pipeline: wordcount
    min_executors: 1
    max_executors: 2
    initial_executors: 1
    executor_memory_mb: 512
    source_partitions: 2
    shuffle_partitions: 2
    max_records_per_batch: 2000
""" for i in range(count))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


# Each variant: its `--set` overrides and environment. "before" restores the cycle's old costs;
# "round_in_cycle" is "after" with every cycle reading its own driver round (executors, jobs), not
# the one the stage prefetcher's last pass read for it (monitors/stage_prefetch.py, issue 33).
VARIANTS: dict[str, tuple[list[str], dict[str, str]]] = {
    "before": (["loop.host_cpu_sample_s=0.5"], {"SPARKSCALE_STAGE_CACHE": "off"}),
    "round_in_cycle": ([], {"SPARKSCALE_PREFETCH_ROUND": "off"}),
    "after": ([], {}),
}


def measure(queries: int, cycles: int, interval_s: float, variants: list[str],
            keep_logs: Path | None = None) -> list[dict]:
    with embedded_environment(f"sparkscale-cycle-{queries}-", apps_yaml(queries)) as env:
        names = [f"wc{i}" for i in range(queries)]
        for name in names:
            submit(env.cfg, name, env.config_path, env.overrides, wait_s=300)
        stop_load = threading.Event()
        loaders = [threading.Thread(target=run_loadgen, args=(env.cfg, name, "constant:20"),
                                    kwargs={"seed": i, "stop": stop_load}, daemon=True)
                   for i, name in enumerate(names)]
        for t in loaders:
            t.start()
        # Every app past its first batches before a daemon starts: 10 drivers' first batches take a minute
        # or more on 2 cores, the drivers then answer in seconds, and cycles over apps with no batch yet
        # would time nothing.
        wait_for(lambda: all_past_first_batches(env.cfg, names), timeout_s=1200,
                 what="every app past its first batches")
        try:
            return [run_daemon(env, queries, cycles, variant, interval_s, keep_logs) for variant in variants]
        finally:
            stop_load.set()
            for name in names:
                stop(env.cfg, name)


PAST_FIRST_BATCHES = 10  # batches with input an app has run before a daemon starts


def all_past_first_batches(cfg, names: list[str]) -> bool:
    """Every app's query (wordcount's one) has run PAST_FIRST_BATCHES batches with input (the
    agent's progress stream). With 10 apps on 2 cores the first ones take 30-80 s each, later ones 2-20 s."""
    client = connect_as(cfg)
    try:
        return all(queries_ran(client, cfg, name, PAST_FIRST_BATCHES) for name in names)
    finally:
        client.close()


def run_daemon(env, queries: int, cycles: int, variant: str, interval_s: float,
               keep_logs: Path | None = None) -> dict:
    """One `sparkscale run` over the apps until each had `cycles` cycles; its cycle durations and RSS."""
    sets, environ = VARIANTS[variant]
    log_path = Path(env.config_path).with_name(f"daemon-{queries}-{variant}.jsonl")
    argv = [sys.executable, "-m", "sparkscale", "run", "--config", env.config_path, "--max-cycles", str(cycles)]
    for s in [*env.overrides, "loop.dry_run=true", f"loop.interval_s={interval_s:g}", "loop.window_s=30",
              "metrics.enabled=false", f"logging.file={log_path}", "logging.stderr=false", "logging.level=info", *sets]:
        argv += ["--set", s]
    started = time.monotonic()
    proc = subprocess.Popen(argv, env={**os.environ, **environ})
    daemon = psutil.Process(proc.pid)
    rss_early = None
    rss_samples = []
    while proc.poll() is None:
        try:
            rss = daemon.memory_info().rss
        except psutil.NoSuchProcess:
            break
        if rss == 0:  # an exited process not yet reaped reads 0
            break
        rss_samples.append(rss)
        done = _count_cycles(log_path)
        if rss_early is None and done >= 10 * queries:
            rss_early = rss
        time.sleep(1.0)  # a sampling period for memory, not a wait for a condition
    wall_s = time.monotonic() - started
    if keep_logs is not None:  # the daemon's log beside the results: every figure traces back to its events
        keep_logs.mkdir(parents=True, exist_ok=True)
        shutil.copy(log_path, keep_logs / log_path.name)
    lines = log_path.read_text().splitlines()
    events = [json.loads(line) for line in lines if '"event": "cycle"' in line]
    # Snapshots built on the driver round the prefetcher read (`driver_round_age_s` set), of all.
    snaps = [json.loads(line) for line in lines if '"event": "monitor.snapshot"' in line]
    prefetched = [s["driver_round_age_s"] for s in snaps if s.get("driver_round_age_s") is not None]
    # The waits for a round a pass was still asking for, and why the other snapshots had none.
    waited = [s["driver_round_waited_s"] for s in snaps if s.get("driver_round_waited_s")]
    missed = collections.Counter(s["driver_round_missed"] for s in snaps if s.get("driver_round_missed"))
    timed = [e for e in events if e.get("event") == "cycle" and "duration_s" in e]
    durations = [e["duration_s"] for e in timed]
    # Each app's first cycle is the daemon's start (leadership, nothing kept yet): the p99 without it too.
    seen: set[str | None] = set()
    warm = []
    for e in timed:
        if e.get("app") in seen:
            warm.append(e["duration_s"])
        seen.add(e.get("app"))
    # Of each cycle: reading Spark, Redis and ZooKeeper (`collect_s`), and the daemon's own CPU time (`cpu_s`); the
    # rest of `duration_s` is waiting (on the drivers' answers, on the CPU, on other cycles' threads).
    parts = {name: [e[name] for e in timed if name in e] for name in ("collect_s", "cpu_s")}
    return {
        "variant": variant, "interval_s": interval_s, "queries": queries, "cycles_per_query": cycles,
        "cycles_measured": len(durations),
        "cycle_p50_s": round(statistics.median(durations), 4), "cycle_p99_s": round(percentile(durations, 0.99), 4),
        "cycle_p99_warm_s": round(percentile(warm, 0.99), 4) if warm else None,
        "cycle_max_s": round(max(durations), 4), "wall_s": round(wall_s, 1),
        **{f"{name[:-2]}_{q}_s": round(percentile(values, p), 4) if values else None
           for name, values in parts.items() for q, p in (("p50", 0.5), ("p99", 0.99))},
        "rss_after_10_cycles_mb": round((rss_early or rss_samples[0]) / 2**20, 1),
        "rss_end_mb": round(rss_samples[-1] / 2**20, 1), "rss_peak_mb": round(max(rss_samples) / 2**20, 1),
        # The collect's own split (driver, redis, stages, cluster, ...) and the rest of the cycle by
        # step (requests, history, plan, write): each part's p99.
        "collect_parts_p99_s": _parts_p99(timed, "collect_parts_s"),
        "decide_parts_p99_s": _parts_p99(timed, "decide_parts_s"),
        "snapshots": len(snaps), "snapshots_on_prefetched_round": len(prefetched),
        "prefetched_round_age_p99_s": round(percentile(prefetched, 0.99), 4) if prefetched else None,
        "snapshots_waiting_for_a_round": len(waited),
        "round_wait_p99_s": round(percentile(waited, 0.99), 4) if waited else None,
        "snapshots_without_a_round_by_reason": dict(sorted(missed.items())),
        "exit_code": proc.returncode,
    }


def _parts_p99(cycles: list[dict], key: str) -> dict[str, float]:
    """Each part's p99 over the cycles' `key` figures ({part: seconds} in each cycle line)."""
    split: dict[str, list[float]] = {}
    for e in cycles:
        for part, seconds in (e.get(key) or {}).items():
            split.setdefault(part, []).append(seconds)
    return {part: round(percentile(v, 0.99), 4) for part, v in sorted(split.items())}


def _ratio(row: dict, before: dict) -> str:
    """The row's p50 over the "before" variant's, with the same number of queries ("-": not run)."""
    base = before.get(row["queries"])
    return f"{row['cycle_p50_s'] / base['cycle_p50_s']:.3f}" if base else "-"


def _count_cycles(path: Path) -> int:
    try:
        return path.read_text().count('"event": "cycle"')
    except FileNotFoundError:
        return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", default="1,10", help="Comma-separated numbers of managed queries.")
    parser.add_argument("--cycles", default="360,60",
                        help="Cycles per query for each entry of --queries (360 = one hour at the 10 s default).")
    parser.add_argument("--interval-s", type=float, default=0.2,
                        help="loop.interval_s: 0.2 runs the cycles back to back (a stress: each driver asked about "
                             "5 times a second); 10 is the shipped config's interval, where the apps take turns.")
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help="Comma-separated: before, round_in_cycle, after.")
    parser.add_argument("--out", default="docs/results/daemon_cycle")
    parser.add_argument("--keep-logs", type=Path, default=None,
                        help="A directory to copy each daemon run's JSON log into (daemon-QUERIES-VARIANT.jsonl).")
    args = parser.parse_args()
    counts = [int(c) for c in args.cycles.split(",")]
    queries = [int(q) for q in args.queries.split(",")]
    counts += counts[-1:] * (len(queries) - len(counts))
    variants = [v for v in args.variants.split(",") if v]
    rows = [row for q, c in zip(queries, counts, strict=False)
            for row in measure(q, c, args.interval_s, variants, args.keep_logs)]
    before = {r["queries"]: r for r in rows if r["variant"] == "before"}
    table = "\n".join([
        "| managed queries | variant | interval (s) | cycles | cycle p50 (s) | cycle p99 (s) | "
        "p99 without each app's first (s) | max (s) | p50 after/before | "
        "collect p50 / p99 (s) | own CPU p50 / p99 (s) | "
        "RSS after 10 cycles (MB) | RSS at the end (MB) | peak RSS (MB) | "
        "snapshots on a prefetched round | its age p99 (s) | driver round p99 (s) | "
        "after the collect p99: requests / history / plan / write (s) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        *[f"| {r['queries']} | {r['variant']} | {r['interval_s']:g} | {r['cycles_measured']} | "
          f"{r['cycle_p50_s']} | {r['cycle_p99_s']} | {r['cycle_p99_warm_s']} | "
          f"{r['cycle_max_s']} | {_ratio(r, before)} | "
          f"{r['collect_p50_s']} / {r['collect_p99_s']} | {r['cpu_p50_s']} / {r['cpu_p99_s']} | "
          f"{r['rss_after_10_cycles_mb']} | {r['rss_end_mb']} | {r['rss_peak_mb']} | "
          f"{r['snapshots_on_prefetched_round']} of {r['snapshots']} | {r['prefetched_round_age_p99_s']} | "
          f"{r['collect_parts_p99_s'].get('driver')} | "
          + " / ".join(str(r["decide_parts_p99_s"].get(k)) for k in ("requests", "history", "plan", "write"))
          + " |" for r in rows],
    ])
    print(table)
    command = " ".join(["benchmarks/daemon_cycle.py", *sys.argv[1:]])
    write_results(args.out, table, {"command": command, "rows": rows})


if __name__ == "__main__":
    main()
