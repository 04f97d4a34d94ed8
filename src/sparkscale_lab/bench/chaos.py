"""`sparkscale bench chaos`: faults injected one at a time into a managed app under load, each timed
to recovery and verified.

Per fault (bench.chaos_faults): a fresh `wordcount` app (its own name, streams, checkpoints and
znodes) is submitted under its supervisor, the daemon runs as its own process with DS2 (for
daemon_kill a second one in standby), and a constant load runs that its two executors keep up
with. After a warm-up and a pre-fault phase the fault is injected; a Recorder samples the app all
along (bench.timeline, bench.probes), and the recovery time is read from its output rate
(bench.chaos_report). Then the load stops, the app drains, and the verifier counts lost and
duplicated records. The daemons' JSON logs tell what they did, and the recovery is split into
detection, replacement and the state reload (bench.chaos_breakdown). A fault that kills executors
runs once per variant (bench.chaos_variants: checkpoint settings, a spare executor), each on its own
app. Each run is on a fresh embedded environment, or with `shared_environment` (`--quick`) all on
one, with `cluster up` after each run to start again whatever a fault left stopped. Results:
results.json, results.md, a timeline per run.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import redis
import structlog

from sparkscale.apps.submit import stop, submit
from sparkscale.config import AppConfig, Config, load_config
from sparkscale.config.identities import OPERATOR
from sparkscale.daemon.action_log import ActionLog
from sparkscale.localenv import LocalEnvironment
from sparkscale.monitors.spark_rest import SparkRestClient, SparkRestError, driver_rest
from sparkscale.redisconn import connect_as
from sparkscale_lab.bench.chaos_breakdown import measure
from sparkscale_lab.bench.chaos_faults import FAULT_NAMES, FAULTS, Fault, FaultContext, get_fault
from sparkscale_lab.bench.chaos_report import (
    RECOVERY_FRACTION,
    acted_without_lead,
    daemon_actions,
    pre_fault_rate,
    recovery_time_s,
    reference_rate,
)
from sparkscale_lab.bench.chaos_variants import DEFAULT, Variant, get_variant, plan_runs, run_label
from sparkscale_lab.bench.daemon_process import DaemonProcess
from sparkscale_lab.bench.demo import _drain, _wait_settled
from sparkscale_lab.bench.environment import BenchEnv, embedded_environment, wait_for
from sparkscale_lab.bench.migration_faults import FAULT_HOLD_ENV
from sparkscale_lab.bench.probes import StreamLatencyProbe
from sparkscale_lab.bench.scaling import DAEMON_YAML, logged_actions
from sparkscale_lab.bench.timeline import Recorder, Sample, rates
from sparkscale_lab.pipelines.check import verify_app
from sparkscale_lab.pipelines.loadgen import run_loadgen

log = structlog.get_logger(__name__)

# The scaling benchmark's daemon timings (5 s loop, 6 s ZooKeeper session), DS2, and migrations that
# are followed only briefly after they are done.
CHAOS_YAML = DAEMON_YAML + """policy: {name: ds2}
migration: {phase_timeout_s: 120, stable_window_s: 5, measure_timeout_s: 15}
"""
SETTLE_LIMIT_S = 180.0  # after the submit, for the executors to settle at the initial count


@dataclass(frozen=True)
class ChaosSpec:
    faults: tuple[str, ...] = FAULT_NAMES
    variants: tuple[str, ...] = (DEFAULT,)  # each fault that kills executors runs under each
    rate: int = 1000  # lines/s: 2 wordcount executors keep up with it on 2 cores (14k/s with one)
    seed: int = 11
    warmup_s: float = 40.0
    pre_fault_s: float = 30.0  # the pre-fault throughput is the average over this span
    sample_s: float = 1.0
    rate_window_s: float = 10.0  # E-Storm's 10 s averages
    sustain_s: float = 20.0  # at >= 90 % this long to count as recovered
    recovery_timeout_s: float = 300.0
    drain_timeout_s: float = 300.0
    shared_environment: bool = False
    hold_phase: str = "repartitioned"  # daemon_kill: the leader dies right after this CCR step
    migrate_to: int = 8  # daemon_kill: from the app's 4 state partitions
    quick: bool = False

    @classmethod
    def quick_spec(cls, **kwargs: Any) -> ChaosSpec:
        """Shorter phases, every fault on one environment: the test suite's version."""
        return cls(**{"warmup_s": 20.0, "pre_fault_s": 20.0, "sustain_s": 10.0, "recovery_timeout_s": 180.0,
                      "drain_timeout_s": 180.0, "shared_environment": True, "quick": True, **kwargs})


def app_name(fault: str, variant: str = DEFAULT) -> str:
    return "chaos-" + run_label(fault, variant).replace("_", "-")


def app_yaml(app: str, variant: str = DEFAULT) -> str:
    """Two executors (at most three) of one core, plus the variant's extra ones and spark_conf; 4
    state partitions (daemon_kill migrates to 8)."""
    v: Variant = get_variant(variant)
    low, high = 2 + v.extra_executors, 3 + v.extra_executors
    conf = "".join(f"      {json.dumps(k)}: {json.dumps(val)}\n" for k, val in v.spark_conf.items())
    return (f"\n  - name: {app}\n    pipeline: wordcount\n    min_executors: {low}\n    max_executors: {high}\n"
            f"    initial_executors: {low}\n    executor_memory_mb: 512\n    source_partitions: 2\n"
            "    shuffle_partitions: 4\n    max_records_per_batch: 2000\n"
            + ("    spark_conf:\n" + conf if conf else ""))


def fault_env(env: BenchEnv, app: str, directory: Path, variant: str = DEFAULT) -> BenchEnv:
    """A config naming only this run's app, on the environment's ports (its overrides)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{app}.yaml"
    path.write_text("apps:" + app_yaml(app, variant) + "logging:\n  level: warning\n" + CHAOS_YAML)
    return BenchEnv(load_config(path, env.overrides), str(path), env.overrides)


class SteadyLoad:
    """A constant load that outlives a Redis restart: a load generator run ends at a Redis error (what
    it sent is in the streams, which the verifier reads) and a new run starts once Redis answers."""

    def __init__(self, cfg: Config, app: str, rate: float, seed: int):
        self.cfg, self.app, self.rate, self.seed = cfg, app, rate, seed
        self.interruptions = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"load-{app}", daemon=True)

    def start(self) -> SteadyLoad:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=60)

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            try:
                run_loadgen(self.cfg, self.app, f"constant:{self.rate:g}", seed=self.seed + n, stop=self._stop)
            except (redis.RedisError, OSError) as exc:
                self.interruptions += 1
                log.warning("chaos.load_interrupted", app=self.app, error=str(exc), retry_in_s=0.5)
                self._stop.wait(0.5)  # until Redis answers again
            n += 1


class FollowingProbe:
    """The shipped pipeline's probe, with a REST client that follows the driver: one the supervisor
    restarted has a new UI port, which its agent publishes again."""

    def __init__(self, cfg: Config, app: AppConfig):
        self.cfg, self.app = cfg, app
        self.inner = StreamLatencyProbe(cfg, app)
        self.rest: SparkRestClient | None = None

    def look(self, client: redis.Redis, rest: SparkRestClient, t0: float) -> Sample:
        sample = self.inner.look(client, self.rest or rest, t0)
        if sample.executors is None:
            with contextlib.suppress(SparkRestError):  # not registered again yet: the next look tries
                self.rest = driver_rest(self.cfg, self.app, timeout_s=2, retries=0)
        return sample



def start_daemons(env: BenchEnv, work: Path, app: str, fault: Fault, spec: ChaosSpec) -> list[DaemonProcess]:
    """The leader (with the migration hold for daemon_kill), then a standby if the fault needs one."""
    sets = ["logging.level=info"]
    hold = {FAULT_HOLD_ENV: spec.hold_phase} if fault.holds_migration else None
    leader = DaemonProcess(env.config_path, env.overrides, work / "daemon-1.jsonl", f"{app}-1", sets, env=hold)
    daemons = [leader]
    try:
        wait_for(lambda: leader.events("leader.elected", app=app), 120, "the daemon to lead")
        if fault.standby:
            standby = DaemonProcess(env.config_path, env.overrides, work / "daemon-2.jsonl", f"{app}-2", sets)
            daemons.append(standby)
            wait_for(lambda: standby.events("cycle", app=app), 120, "the standby daemon's first cycle")
    except Exception:
        for d in daemons:
            d.stop()
        raise
    return daemons


def watch(recorder: Recorder, t0: float, fault_at: float, pre_rps: float | None, spec: ChaosSpec,
          settled: Callable[[], bool] | None) -> tuple[float | None, bool]:
    """(recovery seconds or None, whether the fault's daemon story ended): polls the samples until
    both, or `recovery_timeout_s` after the fault."""
    recovery: float | None = None
    deadline = fault_at + spec.recovery_timeout_s
    while True:
        if recovery is None:
            points = rates(list(recorder.samples), spec.rate_window_s)
            recovery = recovery_time_s(points, fault_at - t0, pre_rps, spec.sustain_s)
        done = settled is None or settled()
        if (recovery is not None and done) or time.time() > deadline:
            return recovery, done
        time.sleep(spec.sample_s)  # the next sample


def run_fault(spec: ChaosSpec, fault: Fault, env: BenchEnv, work: Path, variant: str = DEFAULT) -> dict[str, Any]:
    """One fault on its own app in `env` under `variant`: load, pre-fault phase, the fault, recovery
    (and its breakdown), drain, verify."""
    app = app_name(fault.name, variant)
    fenv = fault_env(env, app, work, variant)
    cfg = fenv.cfg
    notes: list[str] = []
    with ExitStack() as cleanup:
        cleanup.callback(stop, cfg, app)  # also a driver that did not start its queries in time
        submit(cfg, app, fenv.config_path, fenv.overrides, wait_s=300)
        _wait_settled(cfg, app, SETTLE_LIMIT_S)
        daemons = start_daemons(fenv, work, app, fault, spec)

        def stop_daemons() -> None:
            for d in daemons:
                d.stop()

        cleanup.callback(stop_daemons)
        load = SteadyLoad(cfg, app, spec.rate, spec.seed).start()
        cleanup.callback(load.stop)
        t0 = time.time()
        recorder = Recorder(cfg, app, spec.sample_s, t0=t0, probe=FollowingProbe(cfg, cfg.app(app))).start()
        cleanup.callback(recorder.stop)
        time.sleep(spec.warmup_s + spec.pre_fault_s)  # the run's phases: warm-up, then pre-fault load
        began = time.time()
        so_far = list(recorder.samples)
        pre_rps = pre_fault_rate(so_far, began - t0, spec.pre_fault_s)
        input_rps = pre_fault_rate(so_far, began - t0, spec.pre_fault_s, arrived=True)
        if pre_rps is None or input_rps is None or pre_rps < RECOVERY_FRACTION * input_rps:
            notes.append(f"the app was not keeping up before the fault: {pre_rps} of {input_rps} records/s")
        reference_rps = reference_rate(pre_rps, input_rps)
        ctx = FaultContext(cfg, app, daemons, hold_phase=spec.hold_phase, migrate_to=spec.migrate_to)
        log.info("chaos.inject", fault=fault.name, app=app, pre_fault_rps=pre_rps)
        fault_at = fault.inject(ctx)
        check = fault.settled
        settled = (lambda: check(ctx, fault_at)) if check is not None else None
        recovery, story_ended = watch(recorder, t0, fault_at, reference_rps, spec, settled)
        watched_until = time.time()
        log.info("chaos.recovery", fault=fault.name, variant=variant, recovery_s=recovery,
                 daemon_story_ended=story_ended)
        until = watched_until if recovery is None else fault_at + recovery
        parts = measure(cfg, app, list(recorder.samples), t0, fault_at, until, fault.loses_executors)
        notes += ctx.notes
        if not story_ended:
            notes.append(f"the daemon had not ended its reaction {spec.recovery_timeout_s:g} s after the fault")
        load.stop()
        if load.interruptions:
            notes.append(f"the load generator was interrupted {load.interruptions} time(s) (Redis unreachable) "
                         "and started again: no load while Redis was down")
        client = connect_as(cfg, OPERATOR)
        left = _drain(client, cfg, app, spec.drain_timeout_s)
        if left:
            notes.append(f"{left} records unprocessed {spec.drain_timeout_s:g} s after the load: counted as lost")
        samples = recorder.stop()
        for d in daemons:
            d.stop()
        events = {d.name: d.events() for d in daemons}
        for name, evs in events.items():
            if wrong := acted_without_lead(evs):
                notes.append(f"{name} ACTED WHILE NOT LEADING: {'; '.join(wrong)}")
            elif any(e.get("event") in ("leader.lost", "leader.suspended") for e in evs):
                notes.append(f"{name} lost (or was suspended from) its lead and took no action until it led again")
        actions = logged_actions(ActionLog(client, cfg.redis.key_prefix), t0, app)
        verified = verify_app(cfg, app)
        client.close()
    before = [s.executors for s in samples if s.t_s <= fault_at - t0 and s.executors is not None]
    return {
        "fault": fault.name, "variant": variant, "app": app, "what": fault.what, "started_at": t0,
        "recovery_s": recovery, "recovered": recovery is not None,
        "lost": verified.lost, "duplicated": verified.duplicated, "unexpected": verified.unexpected,
        "total_expected": verified.total_expected, "drained": left == 0,
        "pre_fault_rps": None if pre_rps is None else round(pre_rps, 1),
        "input_rps": None if input_rps is None else round(input_rps, 1),
        "reference_rps": None if reference_rps is None else round(reference_rps, 1),
        "fault_at_s": round(fault_at - t0, 2),
        "recovered_at_s": None if recovery is None else round(fault_at - t0 + recovery, 2),
        "executors_before": before[-1] if before else None, **parts.to_dict(),
        "daemon_actions": daemon_actions(events, began, watched_until, fault_at),
        "notes": notes, "actions": [a.to_dict() for a in actions], "samples": [s.to_dict() for s in samples],
    }


def _attempt(spec: ChaosSpec, name: str, variant: str, env: BenchEnv, work: Path, results: dict[str, Any]) -> None:
    """One run; a failure is recorded under `failed_runs` and the bench goes on with the next."""
    try:
        results["runs"].append(run_fault(spec, get_fault(name), env, work / run_label(name, variant), variant))
    except Exception as exc:  # one failed fault must not end the others
        log.exception("chaos.fault_failed", fault=name, variant=variant)
        results["failed_runs"].append({"fault": name, "variant": variant, "error": repr(exc)})


def planned_runs(spec: ChaosSpec) -> list[tuple[str, str]]:
    """(fault, variant) of each run; an unknown fault or variant fails before anything starts."""
    for name in spec.faults:
        get_fault(name)
    for variant in spec.variants:
        get_variant(variant)
    return plan_runs(spec.faults, spec.variants, {n: f.loses_executors for n, f in FAULTS.items()})


def run_chaos(spec: ChaosSpec, out_dir: Path, command: str) -> dict[str, Any]:
    """Every run of `spec` in turn; results.json is saved after each."""
    runs = planned_runs(spec)
    out_dir.mkdir(parents=True, exist_ok=True)
    work = out_dir / "work"
    path = out_dir / "results.json"
    results: dict[str, Any] = {"kind": "chaos", "command": command, "spec": asdict(spec), "runs": [],
                               "failed_runs": []}

    def save() -> None:
        path.write_text(json.dumps(results, indent=1))

    save()
    if spec.shared_environment:
        first = app_yaml(app_name(*runs[0]), runs[0][1])
        with embedded_environment("sparkscale-chaos-", first, CHAOS_YAML) as env:
            for name, variant in runs:
                _attempt(spec, name, variant, env, work, results)
                save()
                LocalEnvironment(env.cfg).up()  # what the fault left stopped (a killed worker) runs again
    else:
        for name, variant in runs:
            label = run_label(name, variant)
            try:
                with embedded_environment(f"sparkscale-chaos-{label}-", app_yaml(app_name(name, variant), variant),
                                          CHAOS_YAML) as env:
                    _attempt(spec, name, variant, env, work, results)
            except Exception as exc:  # an environment that did not start: the next one may
                log.exception("chaos.environment_failed", fault=name, variant=variant)
                results["failed_runs"].append({"fault": name, "variant": variant, "error": repr(exc)})
            save()
    return results


def passed(results: dict[str, Any]) -> bool:
    """Every fault ran, recovered, and nothing was lost, duplicated or unexpected."""
    return not results["failed_runs"] and all(
        r["recovered"] and r["lost"] == 0 and r["duplicated"] == 0 and r["unexpected"] == 0 for r in results["runs"])
