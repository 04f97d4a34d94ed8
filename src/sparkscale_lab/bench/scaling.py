"""`sparkscale bench scaling`: the controllers side by side under the same load, over a matrix of
cases (a workload under a load profile).

For each case and each controller in turn, on a fresh embedded environment, the same workload
under the same profile (same seed), after a short warm-up: `static` (the maximum executor count,
fixed), `spark-dra` (Spark's dynamic allocation with shuffle tracking, same min and max, no
daemon), and `threshold`, `dhalion`, `ds2-baseline`, `ds2` (the daemon with that policy;
ds2-baseline is DS2 without the stability settings, ds2 with those the benchmark chooses:
bench.scaling_controllers). A Recorder samples the app every `sample_s`; after the profile the app
drains and the workload's verifier counts lost and duplicated records; a memory case's runs also
count the executors the driver lost to an out-of-memory (bench.memory_state). Before a workload's
first case, a calibration finds, for each rate its profiles need (a sine's: evenly spaced levels),
the smallest executor count that keeps up (for over-provisioning; a memory case has none). The
workloads (bench.scaling_workloads): the shipped dag pipelines on Redis streams, `clicks-file`, an
operator's own script on a file source, and `memory-state`, the memory row (ds2-baseline and ds2
only). Results: `results.json` (saved after every run, with the DS2 targets per case),
`results.md` and the plots (`report`).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import structlog

from sparkscale.apps.submit import stop, submit
from sparkscale.config import Config
from sparkscale.config.identities import OPERATOR
from sparkscale.daemon.action_log import ActionLog
from sparkscale.monitors.spark_rest import SparkRestError, driver_rest
from sparkscale.redisconn import connect_as
from sparkscale_lab.bench.daemon_process import DaemonProcess
from sparkscale_lab.bench.environment import BenchEnv, embedded_environment, wait_for
from sparkscale_lab.bench.measures import (
    RunMeasures,
    ScalingAction,
    SloLimits,
    calibration_rates,
    measure,
    needed_from_calibration,
    observed_actions,
    segments,
)
from sparkscale_lab.bench.scaling_controllers import KNOWN, ORACLES, POLICY_OF, daemon_settings
from sparkscale_lab.bench.scaling_oracle import Oracle, oracle_schedule
from sparkscale_lab.bench.scaling_workloads import (
    APP,
    MEMORY_WORKLOADS,
    WORKLOAD_NAMES,
    AppShape,
    BenchWorkload,
    Case,
    MemoryStateWorkload,
    case_controllers,
    case_info,
    make_workload,
)
from sparkscale_lab.bench.timeline import Recorder, Sample
from sparkscale_lab.pipelines.profiles import parse_profile

log = structlog.get_logger(__name__)

WORKLOADS = WORKLOAD_NAMES

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
DRAIN_TIMEOUT_S = 300.0
# Seconds around a run's profile (environment up, submit, drain, verify, down), and around a
# calibration's trials: from the committed dag-linear run (about 290 s a run of a 225 s profile).
RUN_OVERHEAD_S = {"counted": 65.0, "stated": 90.0}
CALIBRATION_OVERHEAD_S = 120.0
TRIAL_OVERHEAD_S = 30.0
WARMUP_DRAIN_S = 30.0  # the warm-up's first batches take 20-30 s to start


@dataclass(frozen=True)
class BenchSpec:
    cases: tuple[Case, ...]
    controllers: tuple[str, ...]
    repeat: int = 3
    seed: int = 7
    min_executors: int = 1
    max_executors: int = 4
    sample_s: float = 2.0
    slo_backlog_s: float = 10.0
    slo_backlog_floor_records: int = 50
    slo_latency_s: float = 10.0
    calibration_trial_s: float = 60.0
    calibrate: bool = True
    sine_levels: int = 4  # calibrated rates of a profile that is not piecewise constant
    # Each run first loads its app at the profile's first rate for this long and lets it drain,
    # before the daemon starts and the clock runs: the first batches' start-up (20-30 s here, the
    # same for every controller) is then not counted as a controller's SLO violation. 0: none.
    warmup_s: float = 20.0

    def shape(self, controller: str) -> AppShape:
        initial = self.max_executors if controller == "static" else self.min_executors
        return AppShape(self.min_executors, self.max_executors, initial,
                        SCALE_DOWN_DELAY_S if controller == "spark-dra" else None)

    def limits(self, workload: BenchWorkload, trigger_s: float) -> SloLimits:
        return SloLimits(batch_limit_ms=trigger_s * 1000, backlog_s=self.slo_backlog_s,
                         backlog_floor_records=self.slo_backlog_floor_records,
                         latency_limit_ms=self.slo_latency_s * 1000, backlog_basis=workload.backlog_basis)

    def rates_of(self, workload: str) -> list[float]:
        """Every rate the workload's cases need calibrated; none for a memory case, whose state would
        run the calibration's single executor out of memory (its over-provisioning is unknown)."""
        if workload in MEMORY_WORKLOADS:
            return []
        return sorted({r for c in self.cases if c.workload == workload
                       for r in calibration_rates(parse_profile(c.profile), self.sine_levels)})


@dataclass
class RunResult:
    case: Case
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
    executors_lost_oom: int | None = None  # a memory case's (None: not counted, or the driver did not answer)

    def to_dict(self) -> dict[str, Any]:
        return {"case": self.case.name, "workload": self.case.workload, "profile": self.case.profile,
                "controller": self.controller, "repeat": self.repeat, "started_at": self.started_at,
                "samples": [s.to_dict() for s in self.samples], "actions": [a.to_dict() for a in self.actions],
                "measures": self.measures.to_dict(), "lost": self.lost, "duplicated": self.duplicated,
                "total_records": self.total_records, "notes": self.notes,
                "executors_lost_oom": self.executors_lost_oom}


def estimated_duration_s(spec: BenchSpec) -> float:
    """A rough duration of the whole benchmark, from the timings of the committed run."""
    total = 0.0
    for workload in dict.fromkeys(c.workload for c in spec.cases):
        rates = spec.rates_of(workload)
        if spec.calibrate and rates:
            trials = len(rates) + 1  # one executor count per rate, plus about one more where it steps
            total += CALIBRATION_OVERHEAD_S + 20 + trials * (spec.calibration_trial_s + TRIAL_OVERHEAD_S)
    for case in spec.cases:
        basis = make_workload(case.workload, Path(".")).backlog_basis
        per_run = (parse_profile(case.profile).duration_s or 0.0) + RUN_OVERHEAD_S[basis] + (
            spec.warmup_s + WARMUP_DRAIN_S if spec.warmup_s > 0 else 0.0)
        total += per_run * spec.repeat * len(case_controllers(case, spec.controllers))
    return total


# ---------------------------------------------------------------------------------------------
# Calibration: the smallest executor count that keeps up at each rate


def calibrate(spec: BenchSpec, workload: str, work_dir: Path) -> dict[float, int | None]:
    """For each rate the workload's cases need (ascending), the smallest executor count in
    [min, max] that keeps up with it under a constant load for `calibration_trial_s` (None if none)."""
    rates = spec.rates_of(workload)
    found: dict[float, int | None] = {}
    if not rates:
        return found
    wl = make_workload(workload, work_dir / f"calibration-{workload}")
    shape = AppShape(spec.min_executors, spec.max_executors, spec.min_executors)
    with embedded_environment("sparkscale-calib-", wl.apps_yaml(shape), DAEMON_YAML) as env:
        submit(env.cfg, APP, env.config_path, env.overrides, wait_s=300)
        wl.load(env, f"constant:{rates[0]:g}@20s", spec.seed, "warmup")  # warm-up: JIT, the first batches
        _wait_drained(env, wl, 120)
        n = max(spec.min_executors, 1)
        for rate in rates:
            found[rate] = None
            while n <= spec.max_executors:
                if _keeps_up_with(env, wl, spec, rate, n):
                    found[rate] = n
                    break
                n += 1
            log.info("bench.calibrated", workload=workload, rate=rate, executors=found[rate])
        stop(env.cfg, APP)
    return found


def _keeps_up_with(env: BenchEnv, wl: BenchWorkload, spec: BenchSpec, rate: float, executors: int) -> bool:
    """Over the trial's second half, the backlog stays within twice the SLO and ends within it."""
    _scale_executors(env, executors)
    recorder = Recorder(env.cfg, APP, spec.sample_s, probe=wl.probe(env.cfg)).start()
    wl.load(env, f"constant:{rate:g}@{spec.calibration_trial_s:g}s", spec.seed, f"cal-{rate:g}-{executors}")
    samples = recorder.stop()
    _wait_drained(env, wl, DRAIN_TIMEOUT_S)
    limits = spec.limits(wl, env.cfg.app(APP).trigger_interval_s)
    tail = [limits.backlog_of(s) for s in samples if s.t_s >= spec.calibration_trial_s / 2]
    limit = limits.backlog_limit(rate)
    ok = bool(tail) and tail[-1] <= limit and max(tail) <= 2 * limit
    log.info("bench.calibration_trial", rate=rate, executors=executors, keeps_up=ok,
             backlog_end=tail[-1] if tail else None, limit=limit)
    return ok


def _scale_executors(env: BenchEnv, to: int) -> None:
    argv = [sys.executable, "-m", "sparkscale", "scale-executors", "--app", APP, "--to", str(to),
            "--config", env.config_path]
    for s in [*env.overrides, "logging.stderr=false"]:
        argv += ["--set", s]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"scale-executors --to {to} failed: {out.stdout} {out.stderr}")


def _wait_drained(env: BenchEnv, wl: BenchWorkload, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not wl.drained(env):
        if time.monotonic() > deadline:
            return False
        time.sleep(1)  # polling the backlog: the condition itself
    return True


# ---------------------------------------------------------------------------------------------
# One run


def run_controller(spec: BenchSpec, case: Case, controller: str, repeat: int,
                   calibration: dict[float, int | None], work_dir: Path) -> RunResult:
    """The case's workload under its profile with one controller, on a fresh embedded environment."""
    if controller not in KNOWN:
        raise ValueError(f"unknown controller {controller!r} (expected one of {', '.join(KNOWN)})")
    profile = parse_profile(case.profile)
    run_dir = work_dir / f"{case.name}-{controller}-{repeat}"
    run_dir.mkdir(parents=True, exist_ok=True)
    wl = make_workload(case.workload, run_dir)
    notes: list[str] = []
    with embedded_environment(f"sparkscale-bench-{controller}-", wl.apps_yaml(spec.shape(controller)),
                              DAEMON_YAML) as env:
        cfg = env.cfg
        submit(cfg, APP, env.config_path, env.overrides, wait_s=300)
        if spec.warmup_s > 0 and profile.rate_at(0) > 0:
            wl.load(env, f"constant:{profile.rate_at(0):g}@{spec.warmup_s:g}s", spec.seed, "warmup")
            if not _wait_drained(env, wl, DRAIN_TIMEOUT_S):
                notes.append("the warm-up load did not drain: the run starts behind")
        daemon = None
        if controller in POLICY_OF:
            daemon = DaemonProcess(env.config_path, env.overrides, run_dir / "daemon.jsonl", f"bench-{controller}",
                                   [*daemon_settings(controller, spec.slo_backlog_s), "logging.level=info"])
            wait_for(lambda: daemon.events("cycle", app=APP), 120, "the daemon's first cycle")
        t0 = time.time()
        recorder = Recorder(cfg, APP, spec.sample_s, t0=t0, probe=wl.probe(cfg)).start()
        oracle = (Oracle(env, oracle_schedule(profile, needed_from_calibration(calibration), spec.max_executors,
                                              spare=ORACLES[controller]), t0, _scale_executors).start()
                  if controller in ORACLES else None)
        try:
            log.info("bench.run_start", case=case.name, controller=controller, repeat=repeat, profile=case.profile)
            wl.load(env, case.profile, spec.seed, "run")
            if not _wait_drained(env, wl, DRAIN_TIMEOUT_S):
                notes.append(f"did not drain within {DRAIN_TIMEOUT_S:g} s after the load")
        finally:
            samples = recorder.stop()
            if daemon is not None:
                daemon.stop()
            if oracle is not None:
                oracle.stop()
                notes += oracle.failures
        if daemon is not None:
            actions = logged_actions(ActionLog(connect_as(cfg, OPERATOR), cfg.redis.key_prefix), t0)
            failed = [a for a in actions if not a.done]
            if failed:
                notes.append(f"{len(failed)} action(s) not carried out")
        else:
            actions = observed_actions(samples)
        verified = wl.verify(env)
        notes += verified.notes
        oom = _oom_losses(wl, cfg)
        if oom:
            notes.append(f"{oom} executor(s) lost to an out-of-memory (the driver's removeReason)")
        stop(cfg, APP)
    app = cfg.app(APP)
    measures = measure(samples, actions, segments(profile), spec.limits(wl, app.trigger_interval_s),
                       needed_from_calibration(calibration), app.executor_cores, load_at=profile.rate_at)
    if not any(s.latency_ms is not None for s in samples):
        notes.append("no latency sampled: slo_latency_s is unknown (null)")
    log.info("bench.run_done", case=case.name, controller=controller, repeat=repeat, **measures.to_dict(),
             lost=verified.lost, duplicated=verified.duplicated)
    if verified.lost == 0 and verified.duplicated == 0 and not verified.notes:
        for data in ("in", "out", "chk"):  # a file job's input, output and checkpoints: only kept when wrong
            shutil.rmtree(run_dir / data, ignore_errors=True)
    return RunResult(case, controller, repeat, t0, samples, actions, measures, verified.lost, verified.duplicated,
                     verified.total_records, notes, oom)


def _oom_losses(wl: BenchWorkload, cfg: Config) -> int | None:
    """A memory case's executors lost to an out-of-memory: what its watch saw during the run, and the
    driver's list once more at its end; None for any other case."""
    if not isinstance(wl, MemoryStateWorkload):
        return None
    watch = wl.probe(cfg)
    with contextlib.suppress(SparkRestError):  # the driver is gone: what the watch saw while it lived stands
        watch.read(driver_rest(cfg, cfg.app(APP), timeout_s=5, retries=1))
    return watch.oom_losses()


def logged_actions(action_log: ActionLog, t0: float, app: str = APP) -> list[ScalingAction]:
    """The daemon's carried-out (or failed) scaling actions from the action log, times from `t0`."""
    out: list[ScalingAction] = []
    for d in action_log.read(app, since=t0):
        for r in d.results or ():
            a = r.action
            if (a.type in ("scale_executors", "set_parallelism") and r.status in ("done", "failed")
                    and a.from_ is not None and a.to is not None):  # both types always carry them
                out.append(ScalingAction(round(d.decision.decided_at - t0, 1), a.type, a.from_, a.to,
                                         r.status == "done", a.reason or ""))
    return out



# ---------------------------------------------------------------------------------------------
# The whole benchmark


def check_resume(spec: BenchSpec, out_dir: Path) -> dict[str, Any] | None:
    """The earlier results in `out_dir` to resume from (None: there are none); ValueError when they
    were made with another spec."""
    path = out_dir / "results.json"
    if not path.exists():
        return None
    old = json.loads(path.read_text())
    if json.loads(json.dumps(old.get("spec"))) != json.loads(json.dumps(asdict(spec))):
        raise ValueError(f"{path} holds another benchmark's results: give the same options to resume, or "
                         "another --out")
    return old


def run_bench(spec: BenchSpec, out_dir: Path, command: str, resume: bool = False) -> dict[str, Any]:
    """Each case in turn: calibrate its workload (once per workload), then run every controller
    `repeat` times (controllers interleaved per repeat, so that a drift of the machine hits all
    alike); `results.json` (with the targets) is saved after each run. A run that fails is recorded
    under `failed_runs` and the benchmark goes on. With `resume`, the calibrations and runs of an
    earlier `results.json` of the same spec are kept and only the missing runs are made."""
    from sparkscale_lab.bench.report import targets_block

    out_dir.mkdir(parents=True, exist_ok=True)
    work = out_dir / "work"
    work.mkdir(exist_ok=True)
    path = out_dir / "results.json"
    results: dict[str, Any] = {"command": command, "spec": asdict(spec),
                               "cases": [case_info(c, work) for c in spec.cases], "calibration": {},
                               "runs": [], "failed_runs": [], "targets": []}
    old = check_resume(spec, out_dir) if resume else None
    if old is not None:
        results.update(calibration=old.get("calibration", {}), runs=old.get("runs", []))
    done = {(r["case"], r["controller"], r["repeat"]) for r in results["runs"]}
    log.info("bench.plan", cases=[c.name for c in spec.cases], controllers=list(spec.controllers),
             repeat=spec.repeat,
             runs_left=sum(len(case_controllers(c, spec.controllers)) for c in spec.cases) * spec.repeat - len(done),
             estimated_min=round(estimated_duration_s(spec) / 60))

    def save() -> None:
        results["targets"] = targets_block(results)
        path.write_text(json.dumps(results, indent=1))

    save()
    for case in spec.cases:
        if case.workload not in results["calibration"]:
            found = calibrate(spec, case.workload, work) if spec.calibrate else {}
            results["calibration"][case.workload] = {f"{r:g}": n for r, n in found.items()}
            save()
        calibration = {float(r): n for r, n in results["calibration"][case.workload].items()}
        for repeat in range(1, spec.repeat + 1):
            for controller in case_controllers(case, spec.controllers):
                if (case.name, controller, repeat) in done:
                    continue
                try:
                    run = run_controller(spec, case, controller, repeat, calibration, work)
                    results["runs"].append(run.to_dict())
                except Exception as exc:  # one failed run must not end hours of benchmark
                    log.exception("bench.run_failed", case=case.name, controller=controller, repeat=repeat)
                    results["failed_runs"].append({"case": case.name, "controller": controller, "repeat": repeat,
                                                   "error": repr(exc)})
                save()
    return results
