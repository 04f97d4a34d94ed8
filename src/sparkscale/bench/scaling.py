"""`sparkscale bench scaling`: the controllers side by side under the same load.

For each controller in turn, on a fresh embedded environment, the same workload under the same load
profile (same seed): `static` (the maximum executor count, fixed), `spark-dra` (Spark's dynamic
allocation with shuffle tracking, same min and max, no daemon), and `threshold`, `dhalion`, `ds2`
(the daemon with that policy). A Recorder samples the app every `sample_s`; after the profile the
app drains and the verifier counts lost and duplicated records. Before the runs, a calibration run
finds, for each rate of the profile, the smallest executor count that keeps up (for
over-provisioning). Results: `results.json`, `results.md` and a PNG timeline per run (`report`).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import structlog

from sparkscale.bench.daemon_process import DaemonProcess
from sparkscale.bench.environment import BenchEnv, embedded_environment
from sparkscale.bench.measures import (
    RunMeasures,
    ScalingAction,
    SloLimits,
    measure,
    needed_from_calibration,
    observed_actions,
    segments,
)
from sparkscale.bench.timeline import Recorder, Sample
from sparkscale.daemon.action_log import ActionLog
from sparkscale.pipeline.check import drained, verify_app
from sparkscale.pipeline.loadgen import run_loadgen
from sparkscale.pipeline.profiles import parse_profile
from sparkscale.pipeline.submit import stop, submit
from sparkscale.redisconn import connect

log = structlog.get_logger(__name__)

APP = "bench"
CONTROLLERS = ("static", "spark-dra", "threshold", "dhalion", "ds2")
POLICIES = ("threshold", "dhalion", "ds2")

# The app every controller runs. The dag operators sleep per record (no CPU), so executors beyond
# the machine's 2 cores still add capacity (docs/results/pipeline_throughput.md).
WORKLOADS: dict[str, str] = {
    "dag-linear": "{shape: linear, cost_ms_per_record: 5.0, selectivity: 1.0, key_space: 50}",
    "dag-diamond": "{shape: diamond, cost_ms_per_record: 5.0, selectivity: 1.0, key_space: 50}",
    "dag-star": "{shape: star, cost_ms_per_record: 5.0, selectivity: 1.0, key_space: 50}",
    "wordcount": "",
}

# The daemon's settings for every policy alike: a 5 s loop over 15 s windows, 20 s cooldown,
# scale-down after 30 s of lower recommendations. Spark's dynamic allocation gets the same 30 s as
# its idle timeout.
DAEMON_YAML = """loop: {interval_s: 5.0, window_s: 15.0, cooldown_s: 20.0, stabilization_s: 0.0}
guards: {scale_down_delay_s: 30.0}
outcomes: {evaluation_windows: 2}
actuator: {ack_timeout_s: 30.0, confirm_timeout_s: 90.0}
metrics: {port: 0}
zookeeper: {session_timeout_s: 6.0}
"""
SCALE_DOWN_DELAY_S = 30.0


@dataclass(frozen=True)
class BenchSpec:
    workload: str
    profile: str
    controllers: tuple[str, ...]
    repeat: int = 3
    seed: int = 7
    min_executors: int = 1
    max_executors: int = 4
    sample_s: float = 2.0
    slo_backlog_s: float = 10.0
    calibration_trial_s: float = 60.0

    def app_yaml(self, controller: str) -> str:
        """The `apps:` list for one controller's run."""
        if self.workload not in WORKLOADS:
            raise ValueError(f"unknown workload {self.workload!r} (expected one of {', '.join(WORKLOADS)})")
        pipeline = "wordcount" if self.workload == "wordcount" else "dag"
        initial = self.max_executors if controller == "static" else self.min_executors
        lines = [
            f"\n  - name: {APP}", f"    pipeline: {pipeline}", f"    min_executors: {self.min_executors}",
            f"    max_executors: {self.max_executors}", f"    initial_executors: {initial}",
            "    executor_memory_mb: 512", "    source_partitions: 4", "    shuffle_partitions: 4",
            "    max_records_per_batch: 2000",
        ]
        if pipeline == "dag":
            lines.append(f"    dag: {WORKLOADS[self.workload]}")
        if controller == "spark-dra":
            lines.append(f"    dynamic_allocation: {{enabled: true, executor_idle_timeout_s: {SCALE_DOWN_DELAY_S}}}")
        return "\n".join(lines) + "\n"


@dataclass
class RunResult:
    controller: str
    repeat: int
    started_at: float
    samples: list[Sample]
    actions: list[ScalingAction]
    measures: RunMeasures
    lost: int
    duplicated: int
    total_records: int
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"controller": self.controller, "repeat": self.repeat, "started_at": self.started_at,
                "samples": [s.to_dict() for s in self.samples], "actions": [a.to_dict() for a in self.actions],
                "measures": self.measures.to_dict(), "lost": self.lost, "duplicated": self.duplicated,
                "total_records": self.total_records, "notes": self.notes}


# ---------------------------------------------------------------------------------------------
# Calibration: the smallest executor count that keeps up at each rate


def calibrate(spec: BenchSpec) -> dict[float, int | None]:
    """For each rate of the profile (ascending), the smallest executor count in [min, max] that
    keeps up with it under a constant load for `calibration_trial_s` (None if none does)."""
    rates = sorted({s.rate for s in segments(parse_profile(spec.profile)) if s.rate > 0})
    found: dict[float, int | None] = {}
    with embedded_environment("sparkscale-calib-", spec.app_yaml("calibration"), DAEMON_YAML) as env:
        submit(env.cfg, APP, env.config_path, env.overrides, wait_s=300)
        _load(env, f"constant:{rates[0]}@20s", spec.seed)  # warm-up: JIT, the first batches
        _wait_drained(env, 120)
        n = max(spec.min_executors, 1)
        for rate in rates:
            found[rate] = None
            while n <= spec.max_executors:
                if _keeps_up_with(env, spec, rate, n):
                    found[rate] = n
                    break
                n += 1
            log.info("bench.calibrated", rate=rate, executors=found[rate])
        stop(env.cfg, APP)
    return found


def _keeps_up_with(env: BenchEnv, spec: BenchSpec, rate: float, executors: int) -> bool:
    _scale_executors(env, executors)
    recorder = Recorder(env.cfg, APP, spec.sample_s).start()
    _load(env, f"constant:{rate:g}@{spec.calibration_trial_s:g}s", spec.seed)
    samples = recorder.stop()
    _wait_drained(env, 300)
    tail = [s for s in samples if s.t_s >= spec.calibration_trial_s / 2]
    limit = SloLimits(batch_limit_ms=float("inf"), backlog_s=spec.slo_backlog_s).backlog_limit(rate)
    ok = bool(tail) and tail[-1].backlog_records <= limit and max(s.backlog_records for s in tail) <= 2 * limit
    log.info("bench.calibration_trial", rate=rate, executors=executors, keeps_up=ok,
             backlog_end=tail[-1].backlog_records if tail else None, limit=limit)
    return ok


def _scale_executors(env: BenchEnv, to: int) -> None:
    argv = [sys.executable, "-m", "sparkscale", "scale-executors", "--app", APP, "--to", str(to),
            "--config", env.config_path]
    for s in [*env.overrides, "logging.stderr=false"]:
        argv += ["--set", s]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise RuntimeError(f"scale-executors --to {to} failed: {out.stdout} {out.stderr}")


def _load(env: BenchEnv, profile: str, seed: int) -> None:
    run_loadgen(env.cfg, APP, profile, seed=seed)


def _wait_drained(env: BenchEnv, timeout_s: float) -> bool:
    client = connect(env.cfg.redis)
    deadline = time.monotonic() + timeout_s
    try:
        while not drained(client, env.cfg, env.cfg.app(APP)):
            if time.monotonic() > deadline:
                return False
            time.sleep(1)  # polling the backlog: the condition itself
        return True
    finally:
        client.close()


# ---------------------------------------------------------------------------------------------
# One run


def run_controller(spec: BenchSpec, controller: str, repeat: int, calibration: dict[float, int | None],
                   work_dir: Path) -> RunResult:
    """The workload under the profile with one controller, on a fresh embedded environment."""
    if controller not in CONTROLLERS:
        raise ValueError(f"unknown controller {controller!r} (expected one of {', '.join(CONTROLLERS)})")
    profile = parse_profile(spec.profile)
    segs = segments(profile)
    notes: list[str] = []
    with embedded_environment(f"sparkscale-bench-{controller}-", spec.app_yaml(controller), DAEMON_YAML) as env:
        cfg = env.cfg
        submit(cfg, APP, env.config_path, env.overrides, wait_s=300)
        daemon = None
        if controller in POLICIES:
            daemon = DaemonProcess(env.config_path, env.overrides, work_dir / f"daemon-{controller}-{repeat}.jsonl",
                                   f"bench-{controller}", [f"policy.name={controller}", "logging.level=info"])
            _wait_for(lambda: daemon.events("cycle", app=APP), 120, "the daemon's first cycle")
        t0 = time.time()
        recorder = Recorder(cfg, APP, spec.sample_s, t0=t0).start()
        try:
            log.info("bench.run_start", controller=controller, repeat=repeat, profile=spec.profile)
            _load(env, spec.profile, spec.seed)
            if not _wait_drained(env, 300):
                notes.append("did not drain within 300 s after the load")
        finally:
            samples = recorder.stop()
            if daemon is not None:
                daemon.stop()
        if daemon is not None:
            actions = logged_actions(ActionLog(connect(cfg.redis), cfg.redis.key_prefix), t0)
            failed = [a for a in actions if not a.done]
            if failed:
                notes.append(f"{len(failed)} action(s) not carried out")
        else:
            actions = observed_actions(samples)
        result = verify_app(cfg, APP)
        stop(cfg, APP)
    app = cfg.app(APP)
    limits = SloLimits(batch_limit_ms=app.trigger_interval_s * 1000, backlog_s=spec.slo_backlog_s)
    measures = measure(samples, actions, segs, limits, needed_from_calibration(calibration), app.executor_cores)
    log.info("bench.run_done", controller=controller, repeat=repeat, **measures.to_dict(), lost=result.lost,
             duplicated=result.duplicated)
    return RunResult(controller, repeat, t0, samples, actions, measures, result.lost, result.duplicated,
                     result.total_expected, notes)


def logged_actions(action_log: ActionLog, t0: float, app: str = APP) -> list[ScalingAction]:
    """The daemon's carried-out (or failed) scaling actions from the action log, times from `t0`."""
    out: list[ScalingAction] = []
    for d in action_log.read(app, since=t0):
        for r in d.results or ():
            a = r.action
            if a.type in ("scale_executors", "set_parallelism") and r.status in ("done", "failed"):
                out.append(ScalingAction(round(d.decision.decided_at - t0, 1), a.type, a.from_, a.to,
                                         r.status == "done"))
    return out


def _wait_for(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(0.5)  # polling the condition


# ---------------------------------------------------------------------------------------------
# The whole benchmark


def run_bench(spec: BenchSpec, out_dir: Path, command: str) -> dict[str, Any]:
    """Calibrate, run every controller `repeat` times (controllers interleaved per repeat, so that a
    drift of the machine hits all alike), and save `results.json` after each run."""
    out_dir.mkdir(parents=True, exist_ok=True)
    work = out_dir / "work"
    work.mkdir(exist_ok=True)
    results: dict[str, Any] = {"command": command, "spec": asdict(spec), "calibration": {}, "runs": []}
    path = out_dir / "results.json"
    calibration = calibrate(spec)
    results["calibration"] = {f"{r:g}": n for r, n in calibration.items()}
    path.write_text(json.dumps(results, indent=1))
    for repeat in range(1, spec.repeat + 1):
        for controller in spec.controllers:
            run = run_controller(spec, controller, repeat, calibration, work)
            results["runs"].append(run.to_dict())
            path.write_text(json.dumps(results, indent=1))
    return results
