"""`sparkscale bench migration`: the migration metrics of DSM, DCR and CCR side by side (Shukla &
Simmhan §6), with a timeline of input and output rate across each migration (their figures 7, 9).

Method, per strategy: a fresh embedded environment runs the workload (default dag Star: a stateful
hub, 2 executors) under a constant load; `sparkscale migrate --json` moves its state 4 -> 8 and back
8 -> 4, `repeat` times, each migration followed here (`measure_after`: `migrate` returns once it is
done) until its output rate is stable (within `migration.stable_tolerance` of the input for
`stable_window_s`, the paper's 60 s by default); a Recorder samples the app all along. Then the
load stops, the app drains, and the verifier counts lost and duplicated records over the whole run.
Every figure is in seconds from the request, with the same definition for every strategy
(`actuators.migration.phase_metrics`, `monitors.migration_metrics`).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import structlog

from sparkscale.actuators.migration import registered_strategies
from sparkscale.apps.submit import stop, submit
from sparkscale.config.identities import OPERATOR
from sparkscale.monitors.migration_followup import FOLLOW_UP, PENDING
from sparkscale.monitors.migration_metrics import measure_after
from sparkscale.protocol.keys import progress_key
from sparkscale.redisconn import connect_as
from sparkscale_lab.bench.environment import BenchEnv, embedded_environment
from sparkscale_lab.bench.markdown import markdown_table
from sparkscale_lab.bench.timeline import Recorder, Sample
from sparkscale_lab.pipelines.check import drained, verify_app
from sparkscale_lab.pipelines.loadgen import run_loadgen

log = structlog.get_logger(__name__)

APP = "star"
STRATEGIES = registered_strategies()  # the built-ins (dsm, dcr, ccr), then any plug-in
SHAPES = {"dag-star": "star", "dag-linear": "linear", "dag-diamond": "diamond"}
METRICS = ("restore_s", "drain_s", "capture_s", "rebalance_s", "boundary_wait_s", "capture_positions_s",
           "catch_up_s", "recovery_s", "stabilization_s", "replayed_records", "captured_records")
MEASURE_MARGIN_S = 120.0  # followed after each migration at most the stable window plus this


@dataclass(frozen=True)
class MigrationSpec:
    workload: str = "dag-star"
    strategies: tuple[str, ...] = STRATEGIES
    repeat: int = 3
    rate: int = 100
    stable_window_s: float = 60.0  # Shukla & Simmhan §4 (6)
    warmup_s: float = 30.0
    seed: int = 3

    def app_yaml(self) -> str:
        if self.workload not in SHAPES:
            raise ValueError(f"unknown workload {self.workload!r} (expected one of {', '.join(SHAPES)})")
        return (f"\n  - name: {APP}\n    pipeline: dag\n    max_executors: 2\n    initial_executors: 2\n"
                "    executor_memory_mb: 512\n    source_partitions: 2\n    shuffle_partitions: 4\n"
                "    max_records_per_batch: 500\n"
                f"    dag: {{shape: {SHAPES[self.workload]}, cost_ms_per_record: 0.5, selectivity: 1.0, "
                "key_space: 40}\n")


def migrate(env: BenchEnv, partitions: int, strategy: str, stable_window_s: float, t0: float) -> dict[str, Any]:
    """One `sparkscale migrate --json`; its phases (seconds since `t0`) and figures."""
    argv = [sys.executable, "-m", "sparkscale", "migrate", "--app", APP, "--partitions", str(partitions),
            "--strategy", strategy, "--json", "--config", env.config_path]
    for s in [*env.overrides, f"migration.stable_window_s={stable_window_s}",
              f"migration.measure_timeout_s={stable_window_s + MEASURE_MARGIN_S:g}", "logging.stderr=false"]:
        argv += ["--set", s]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=900, check=False)
    lines = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not lines or not lines[-1].get("ok"):
        raise RuntimeError(f"migrate {strategy} -> {partitions} failed: {out.stdout[-2000:]} {out.stderr[-2000:]}")
    phases = {line["phase"]: round(line["at"] - t0, 2) for line in lines if "phase" in line}
    figures = lines[-1]["figures"]
    if figures.pop(FOLLOW_UP, None) == PENDING:  # `migrate` returns once done: the bench follows the query itself
        figures.update(follow_through(env, figures["migration"], stable_window_s))
    return {"to": partitions, "phases": phases, "figures": figures}


def follow_through(env: BenchEnv, migration_id: str, stable_window_s: float) -> dict[str, Any]:
    """The migration's follow-up figures, waited for (`measure_after`, at most the stable window plus
    `MEASURE_MARGIN_S` from now, just after `migrate` returned), as `migrate` waited before it
    returned once done: every run has them all, and the next migration starts after."""
    from sparkscale import zkconn
    from sparkscale.actuators.migration import JournalStore

    mcfg = env.cfg.migration.model_copy(update={"stable_window_s": stable_window_s,
                                                "measure_timeout_s": stable_window_s + MEASURE_MARGIN_S})
    cfg = env.cfg.model_copy(update={"migration": mcfg})
    zk = zkconn.client_as(cfg, OPERATOR)
    zk.start(timeout=30)
    try:
        journal = JournalStore(zk, cfg.zookeeper.root, APP).read()
    finally:
        zk.stop()
        zk.close()
    if journal is None or journal.id != migration_id:
        raise RuntimeError(f"migration {migration_id}: the journal holds {journal.id if journal else 'none'}")
    return measure_after(cfg, cfg.app(APP), connect_as(cfg, OPERATOR), journal)


def run_strategy(spec: MigrationSpec, strategy: str) -> dict[str, Any]:
    with embedded_environment(f"sparkscale-mig-{strategy}-", spec.app_yaml()) as env:
        cfg = env.cfg
        submit(cfg, APP, env.config_path, env.overrides, wait_s=300)
        stop_load = threading.Event()
        loader = threading.Thread(target=run_loadgen, args=(cfg, APP, f"constant:{spec.rate}"),
                                  kwargs={"seed": spec.seed, "stop": stop_load}, daemon=True)
        t0 = time.time()
        recorder = Recorder(cfg, APP, 1.0, t0=t0).start()
        loader.start()
        # A checkpoint without a committed batch has no state to repartition (Spark refuses it):
        # wait for the first batch, then warm up (JIT, executors; not measured).
        progress = progress_key(cfg.redis.key_prefix, APP, "dag")
        client = connect_as(cfg, OPERATOR)
        deadline = time.monotonic() + 300
        while not client.hget(progress, "state_partitions") and time.monotonic() < deadline:
            time.sleep(1)  # polling for the first finished batch
        time.sleep(spec.warmup_s)
        migrations: list[dict[str, Any]] = []
        try:
            for _ in range(spec.repeat):
                for direction, partitions in (("scale-out", 8), ("scale-in", 4)):
                    m = migrate(env, partitions, strategy, spec.stable_window_s, t0)
                    migrations.append({"direction": direction, **m})
                    log.info("bench.migrated", strategy=strategy, direction=direction,
                             **{k: m["figures"].get(k) for k in METRICS})
        finally:
            stop_load.set()
            loader.join()
        deadline = time.monotonic() + 600
        while not drained(client, cfg, cfg.app(APP)) and time.monotonic() < deadline:
            time.sleep(2)  # polling the backlog
        samples = recorder.stop()
        result = verify_app(cfg, APP)
        stop(cfg, APP)
        return {"strategy": strategy, "migrations": migrations, "samples": [s.to_dict() for s in samples],
                "lost": result.lost, "duplicated": result.duplicated, "total_expected": result.total_expected}


def run_migration_bench(spec: MigrationSpec, out_dir: Path, command: str) -> dict[str, Any]:
    out_dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"kind": "migration", "command": command, "spec": asdict(spec), "strategies": []}
    for strategy in spec.strategies:
        results["strategies"].append(run_strategy(spec, strategy))
        (out_dir / "results.json").write_text(json.dumps(results, indent=1))
    return results


def _median(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 2) if values else None


def migration_table(results: dict[str, Any]) -> str:
    header = ["strategy", "direction", "runs", *METRICS, "lost (run)", "duplicated (run)"]
    rows = []
    for r in results["strategies"]:
        for direction in ("scale-out", "scale-in"):
            runs = [m["figures"] for m in r["migrations"] if m["direction"] == direction]
            rows.append([r["strategy"], direction, len(runs), *[_median([run.get(k) for run in runs]) for k in METRICS],
                         r["lost"], r["duplicated"]])
    spec = results["spec"]
    return "\n".join([
        markdown_table(header, [["-" if v is None else str(v) for v in row] for row in rows]),
        "", f"Workload `{spec['workload']}` at a constant {spec['rate']} records/s; scale-out 4 -> 8 state partitions, "
            "scale-in 8 -> 4; medians over the runs; times in seconds from the request; lost and duplicated over "
            "each strategy's whole run (verifier)."])


def render_migration(results_dir: Path, results: dict[str, Any]) -> str:
    from sparkscale_lab.bench.plots import timeline

    table = migration_table(results)
    (results_dir / "results.md").write_text(f"{table}\n\nCommand: `{results['command']}`\n")
    for r in results["strategies"]:
        samples = [Sample.from_dict(s) for s in r["samples"]]
        shaded = []
        for m in r["migrations"]:
            phases = m["phases"]
            start = phases.get("requested", min(phases.values(), default=0))
            end = phases.get("done", max(phases.values(), default=start))
            shaded.append((start, end, f"{m['direction']} → {m['to']}"))
        title = (f"{r['strategy'].upper()}: input and output rate across {len(shaded)} migrations "
                 f"(shaded: request to done); lost {r['lost']}, duplicated {r['duplicated']}")
        timeline(samples, [], title, results_dir / f"timeline-{r['strategy']}.png", shaded=shaded)
    return table
