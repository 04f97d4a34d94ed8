"""`sparkscale bench placement`: Spark's own executor placement against OTD and EDRP (issue 20),
the same apps under the same load, one run each, on a cluster where the master is blind to load.

The set-up that makes placement matter on one machine: two workers on their own loopback
addresses (127.0.0.2, 127.0.0.3: shuffle between them is remote to Spark), each pinned to a CPU
of its own (`cluster.worker_cpus`, `taskset`), so a worker's load is its CPU's; and advertising
more cores than that one CPU, unevenly (`cluster.worker_cores`, default 7 and 4). The master
places a new executor on the worker with the most free cores (CORES_FREE_DESC), so it keeps
sending executors to the worker that advertises more, whatever its CPU already carries. Three
managed `wordcount` apps, each under the same constant load from its own load generator, with
the daemon (DS2, and `placement.name` = the run's policy; the spread rule off, so that
`spark-default` is the master's placement alone). After a warm-up, the window is measured
(bench.placement_measures); then the load stops, the apps drain, and the verifier counts lost
and duplicated records. Results: results.json (saved after every run), results.md and a plot
(bench.placement_report).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil
import structlog

from sparkscale.apps.submit import stop, submit
from sparkscale.config import Config
from sparkscale.config.identities import OPERATOR
from sparkscale.daemon.action_log import ActionLog
from sparkscale.localenv import LocalEnvironment
from sparkscale.monitors.cluster_view import fetch_cluster_view
from sparkscale.monitors.spark_master import SparkUnreachable
from sparkscale.monitors.spark_rest import SparkRestError, driver_rest
from sparkscale.redisconn import connect_as
from sparkscale_lab.bench.chaos import SteadyLoad
from sparkscale_lab.bench.daemon_process import DaemonProcess
from sparkscale_lab.bench.demo import _drain, _wait_settled
from sparkscale_lab.bench.environment import embedded_environment, wait_for
from sparkscale_lab.bench.measures import SloLimits
from sparkscale_lab.bench.placement_measures import (
    AppFigures,
    DoneAction,
    ProcessKey,
    StageBytes,
    WorkerSample,
    app_figures,
    busy_share,
    load_balance,
    measured_objective,
    moves_and_actions,
    parse_stage_bytes,
    shuffle_bytes,
)
from sparkscale_lab.bench.probes import StreamLatencyProbe
from sparkscale_lab.bench.scaling import DAEMON_YAML
from sparkscale_lab.bench.timeline import Recorder
from sparkscale_lab.pipelines.check import verify_app

log = structlog.get_logger(__name__)

PLACEMENTS = ("spark-default", "otd", "edrp")
WORKER_HOSTS = ("127.0.0.2", "127.0.0.3")
SETTLE_LIMIT_S = 180.0  # after a submit, for the app's executors to settle at the initial count
RUN_OVERHEAD_S = 420.0  # environment, three submits, drain, verify, down: a guess for this 2-core machine


@dataclass(frozen=True)
class PlacementSpec:
    placements: tuple[str, ...] = PLACEMENTS
    repeat: int = 1
    duration_s: float = 300.0  # the measured window, after the warm-up
    warmup_s: float = 60.0
    rate: int = 300  # lines/s into each app: one executor keeps up, three on one CPU still do
    apps: int = 3
    # Advertised, per worker. 7 and 4: the master puts the apps' first executors on worker 1 until
    # its free cores equal worker 2's, and DS2's start-up scale-ups and scale-ins shift them about,
    # so where the three single executors end up is the master's doing; 11 cores leave room for a
    # move's extra executor on either worker.
    worker_cores: tuple[int, ...] = (7, 4)
    worker_cpus: tuple[tuple[int, ...], ...] = ((0,), (1,))  # pinned, per worker
    min_executors: int = 1
    initial_executors: int = 1
    max_executors: int = 2
    sample_s: float = 1.0
    stage_poll_s: float = 30.0  # the driver's UI keeps 1000 stages: about 8 min of wordcount batches
    min_stall_s: float = 5.0  # a stretch without a finished batch shorter than this is no stall
    slo_backlog_s: float = 10.0
    slo_latency_s: float = 10.0
    drain_timeout_s: float = 300.0
    seed: int = 11

    def app_names(self) -> list[str]:
        return [f"placement-{i}" for i in range(1, self.apps + 1)]


def estimated_duration_s(spec: PlacementSpec) -> float:
    return (spec.warmup_s + spec.duration_s + RUN_OVERHEAD_S) * spec.repeat * len(spec.placements)


def apps_yaml(spec: PlacementSpec) -> str:
    """The `apps:` items: the same wordcount app `spec.apps` times, executors of one core."""
    return "".join(
        f"\n  - name: {name}\n    pipeline: wordcount\n    min_executors: {spec.min_executors}\n"
        f"    max_executors: {spec.max_executors}\n    initial_executors: {spec.initial_executors}\n"
        "    executor_cores: 1\n    executor_memory_mb: 512\n    source_partitions: 2\n"
        "    shuffle_partitions: 4\n    max_records_per_batch: 2000\n" for name in spec.app_names())


def bench_yaml(spec: PlacementSpec, placement: str) -> str:
    """The scaling benchmark's daemon timings, DS2, the run's placement policy, and the cluster."""
    cpus = ", ".join("[" + ", ".join(map(str, c)) + "]" for c in spec.worker_cpus)
    # Each worker advertises more cores than the CPU it is pinned to: its load is over that CPU.
    host_cpus = ", ".join(f"{h}: {len(c)}" for h, c in zip(WORKER_HOSTS, spec.worker_cpus, strict=False))
    return DAEMON_YAML + (
        f"policy: {{name: ds2}}\nplacement: {{name: {placement}, host_cpus: {{{host_cpus}}}}}\n"
        f"cluster:\n  workers: {len(WORKER_HOSTS)}\n  worker_hosts: [{', '.join(WORKER_HOSTS)}]\n"
        f"  worker_cores: [{', '.join(map(str, spec.worker_cores))}]\n  worker_cpus: [{cpus}]\n")


# -- sampling -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PinnedWorker:
    host: str
    pid: int
    cpus: int  # how many CPUs it is pinned to


def tree_cpu_s(pid: int) -> dict[ProcessKey, float] | None:
    """CPU seconds (user + system) of a process and everything below it; None: it is gone."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return None
    out: dict[ProcessKey, float] = {}
    for p in procs:
        try:
            with p.oneshot():
                times = p.cpu_times()
                out[(p.pid, p.create_time())] = times.user + times.system
        except psutil.Error:
            continue  # ended between the listing and the reading
    return out


class WorkerSampler:
    """Every `sample_s`, each worker's busy share (its process tree's CPU time) and its executors."""

    def __init__(self, cfg: Config, workers: Sequence[PinnedWorker], sample_s: float, t0: float):
        self.cfg, self.workers, self.sample_s, self.t0 = cfg, list(workers), sample_s, t0
        self.samples: list[WorkerSample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="placement-workers", daemon=True)

    def start(self) -> WorkerSampler:
        self._thread.start()
        return self

    def stop(self) -> list[WorkerSample]:
        self._stop.set()
        self._thread.join()
        return list(self.samples)

    def executors(self) -> dict[str, int | None]:
        """Executors running on each worker (its own /json/), by host; None: unknown."""
        hosts = [w.host for w in self.workers]
        try:
            view = fetch_cluster_view(self.cfg.spark.master_web_url, 2.0)
        except SparkUnreachable as exc:
            log.warning("placement_bench.view_failed", error=str(exc))
            return dict.fromkeys(hosts)
        found: dict[str, int | None] = dict.fromkeys(hosts)
        for w in view.alive:
            if w.host in found and w.id not in view.unreachable:
                found[w.host] = (found[w.host] or 0) + len(view.executors.get(w.id, ()))
        return found

    def _run(self) -> None:
        last = {w.host: tree_cpu_s(w.pid) for w in self.workers}
        last_at = time.monotonic()
        next_at = last_at + self.sample_s
        while not self._stop.wait(max(next_at - time.monotonic(), 0)):  # a sampling period, not a condition
            now_at = time.monotonic()
            now = {w.host: tree_cpu_s(w.pid) for w in self.workers}
            shares = {w.host: busy_share(before, after, now_at - last_at, w.cpus)
                      if (before := last[w.host]) is not None and (after := now[w.host]) is not None else None
                      for w in self.workers}
            self.samples.append(WorkerSample(round(time.time() - self.t0, 3), shares, self.executors()))
            last, last_at = now, now_at
            next_at += self.sample_s


class StageCollector:
    """Every `poll_s`, each app's completed stages with their shuffle bytes (kept by attempt, so
    that stages the driver's UI drops later are still counted)."""

    def __init__(self, cfg: Config, apps: Sequence[str], poll_s: float):
        self.cfg, self.apps, self.poll_s = cfg, list(apps), poll_s
        self.stages: dict[tuple[str, int, int], StageBytes] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="placement-stages", daemon=True)

    def start(self) -> StageCollector:
        self._thread.start()
        return self

    def stop(self) -> list[StageBytes]:
        """Stops polling after one last poll (the first call)."""
        if not self._stop.is_set():
            self._stop.set()
            self._thread.join()
            self.poll()
        return list(self.stages.values())

    def poll(self) -> None:
        for app in self.apps:
            try:
                rest = driver_rest(self.cfg, self.cfg.app(app), timeout_s=10, retries=1)
                data = rest.get_json(f"applications/{rest.application(app).id}/stages", {"status": "complete"})
            except SparkRestError as exc:
                log.warning("placement_bench.stages_failed", app=app, error=str(exc))
                continue
            for stage in parse_stage_bytes(app, data):
                self.stages[stage.key] = stage

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):  # a polling period
            self.poll()


def pinned_workers(cfg: Config) -> list[PinnedWorker]:
    """The running workers (pids from the environment's records), with their CPU counts."""
    found = []
    for status in LocalEnvironment(cfg).status():
        if status.name.startswith("spark-worker-") and status.pid is not None:
            number = int(status.name.rsplit("-", 1)[1])
            found.append(PinnedWorker(status.host, status.pid, max(len(cfg.cluster.cpus_of(number)), 1)))
    return found


def done_actions(action_log: ActionLog, app: str, t0: float) -> list[DoneAction]:
    """The daemon's actions for `app` carried out since `t0` (warnings are no action)."""
    return [DoneAction(app, round(d.decision.decided_at - t0, 1), r.action.type, r.action.summary())
            for d in action_log.read(app, since=t0) for r in d.results or ()
            if r.status == "done" and r.action.type != "warn"]


# -- one run --------------------------------------------------------------------------------------


def run_placement(spec: PlacementSpec, placement: str, repeat: int, work: Path) -> dict[str, Any]:
    """One run of `placement` on a fresh embedded environment (module docstring)."""
    run_dir = work / f"{placement}-{repeat}"
    run_dir.mkdir(parents=True, exist_ok=True)
    names = spec.app_names()
    notes: list[str] = []
    environment = embedded_environment(f"sparkscale-placement-{placement}-", apps_yaml(spec),
                                       bench_yaml(spec, placement))
    with environment as env, ExitStack() as cleanup:
        cfg = env.cfg
        for name in names:
            cleanup.callback(stop, cfg, name)
            submit(cfg, name, env.config_path, env.overrides, wait_s=300)
            _wait_settled(cfg, name, SETTLE_LIMIT_S)
        daemon = DaemonProcess(env.config_path, env.overrides, run_dir / "daemon.jsonl", f"placement-{placement}",
                               ["logging.level=info", "guards.spread_executors=false"])
        cleanup.callback(daemon.stop)
        wait_for(lambda: all(daemon.events("cycle", app=n) for n in names), 180, "the daemon's first cycles")
        workers = pinned_workers(cfg)
        t0 = time.time()
        loads = [SteadyLoad(cfg, name, spec.rate, spec.seed + i).start() for i, name in enumerate(names)]
        for load in loads:
            cleanup.callback(load.stop)
        recorders = {n: Recorder(cfg, n, spec.sample_s, t0=t0, probe=StreamLatencyProbe(cfg, cfg.app(n))).start()
                     for n in names}
        sampler = WorkerSampler(cfg, workers, spec.sample_s, t0).start()
        stages = StageCollector(cfg, names, spec.stage_poll_s).start()
        threads: list[Recorder | WorkerSampler | StageCollector] = [*recorders.values(), sampler, stages]
        for thread in threads:
            cleanup.callback(thread.stop)  # a run that fails leaves no sampler behind (stop is idempotent)
        log.info("placement_bench.run_start", placement=placement, repeat=repeat, apps=names, rate=spec.rate,
                 workers=[asdict(w) for w in workers])
        time.sleep(spec.warmup_s + spec.duration_s)  # the run's phases: warm-up, then the measured window
        window_end = time.time()
        collected = stages.stop()
        worker_samples = sampler.stop()
        for load in loads:
            load.stop()
        client = connect_as(cfg, OPERATOR)
        for name in names:
            if left := _drain(client, cfg, name, spec.drain_timeout_s):
                notes.append(f"{name}: {left} records unprocessed {spec.drain_timeout_s:g} s after the load")
        samples = {n: r.stop() for n, r in recorders.items()}
        daemon.stop()
        action_log = ActionLog(client, cfg.redis.key_prefix)
        actions = [a for n in names for a in done_actions(action_log, n, t0)]
        verified = {n: verify_app(cfg, n) for n in names}
        client.close()
        notes += [f"{n}: {note}" for n, v in verified.items() for note in v.notes]
        edrp = cfg.placement.section("edrp")
        trigger_s = cfg.app(names[0]).trigger_interval_s
    window = (spec.warmup_s, window_end - t0)
    limits = SloLimits(batch_limit_ms=trigger_s * 1000, backlog_s=spec.slo_backlog_s,
                       latency_limit_ms=spec.slo_latency_s * 1000)
    per_app = {n: app_figures(samples[n], *window, spec.rate, limits, spec.min_stall_s) for n in names}
    balance = load_balance(worker_samples, *window)
    remote, local = shuffle_bytes(collected, t0 + window[0], t0 + window[1])
    moves, acted = moves_and_actions(actions, 0.0, window[1])
    known = [f.mean_latency_s for f in per_app.values() if f.mean_latency_s is not None]
    longest = max((s for f in per_app.values() for s in f.stalls_s), default=0.0)
    objective = measured_objective(edrp, max(known) if known else None, sum(f.mean_cores for f in per_app.values()),
                                   longest, sum(spec.worker_cores))
    if len(known) < len(per_app):
        notes.append("an app had no latency sampled: R is the worst of the others'" if known else
                     "no latency sampled: the objective is unknown")
    run = summary(placement, repeat, t0, window, per_app, balance.imbalance, remote, local, objective.objective)
    run.update(worker_load_imbalance_per_sample=balance.imbalance_per_sample,
               worker_busy_share=balance.mean_busy_share, longest_stall_s=longest, moves=moves, actions=acted,
               lost=sum(v.lost for v in verified.values()), duplicated=sum(v.duplicated for v in verified.values()),
               unexpected=sum(v.unexpected for v in verified.values()), objective_terms=objective.to_dict(),
               edrp_settings=edrp.model_dump(mode="json"),
               notes=notes, actions_done=[asdict(a) for a in actions],
               worker_samples=[s.to_dict() for s in worker_samples],
               samples={n: [s.to_dict() for s in samples[n]] for n in names})
    log.info("placement_bench.run_done", **{k: v for k, v in run.items() if not isinstance(v, (list, dict))})
    return run


def summary(placement: str, repeat: int, t0: float, window: tuple[float, float], per_app: dict[str, AppFigures],
            imbalance: float | None, remote: int, local: int, objective: float | None) -> dict[str, Any]:
    """The run's headline figures (results.json's `runs[]` keys), the apps' summed."""
    return {"placement": placement, "repeat": repeat, "started_at": t0,
            "window_s": [round(window[0], 1), round(window[1], 1)], "worker_load_imbalance": imbalance,
            "remote_shuffle_bytes": remote, "local_shuffle_bytes": local,
            "remote_shuffle_share": round(remote / (remote + local), 4) if remote + local else None,
            "slo_backlog_s": round(sum(f.slo_backlog_s for f in per_app.values()), 1),
            "downtime_s": round(sum(f.downtime_s for f in per_app.values()), 1),
            "objective": objective, "mean_executor_cores": round(sum(f.mean_cores for f in per_app.values()), 2),
            "per_app": {n: f.to_dict() for n, f in per_app.items()}}


# -- the whole benchmark --------------------------------------------------------------------------


def run_placement_bench(spec: PlacementSpec, out_dir: Path, command: str) -> dict[str, Any]:
    """Every placement `repeat` times (interleaved per repeat, so that a drift of the machine hits
    all alike); results.json is saved after each run, a failed run recorded under `failed_runs`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    work = out_dir / "work"
    path = out_dir / "results.json"
    results: dict[str, Any] = {"kind": "placement", "command": command, "spec": asdict(spec), "runs": [],
                               "failed_runs": []}

    def save() -> None:
        path.write_text(json.dumps(results, indent=1))

    save()
    log.info("placement_bench.plan", placements=list(spec.placements), repeat=spec.repeat,
             estimated_min=round(estimated_duration_s(spec) / 60))
    for repeat in range(1, spec.repeat + 1):
        for placement in spec.placements:
            try:
                results["runs"].append(run_placement(spec, placement, repeat, work))
            except Exception as exc:  # one failed run must not end the others
                log.exception("placement_bench.run_failed", placement=placement, repeat=repeat)
                results["failed_runs"].append({"placement": placement, "repeat": repeat, "error": repr(exc)})
            save()
    return results
