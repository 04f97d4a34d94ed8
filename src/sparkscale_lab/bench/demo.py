"""`sparkscale demo`: the embedded environment, `wordcount` under a low / high / low load, and the
daemon with DS2 in the foreground; at the end a summary (actions, convergence, records verified)
and a timeline plot.

The demo shortens the daemon's timings so that a few minutes give the daemon several chances to
act on each load step (`DEMO_TIMINGS`; a `--set` of the same key wins). The high step (20,000 lines/s by
default) is above what one wordcount executor carries on a 2-core machine (14,387/s: docs/results/
pipeline_throughput.md); at 8,000 a quiet machine kept up on one executor and DS2 rightly did nothing.
It leaves the environment running, so that `sparkscale status` / `actions` can be read afterwards;
`sparkscale cluster down` stops it.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import redis
import structlog

from sparkscale.apps.submit import running, stop, submit
from sparkscale.bounded import clip
from sparkscale.config import Config
from sparkscale.config.identities import OPERATOR
from sparkscale.daemon.action_log import ActionLog
from sparkscale.localenv import LocalEnvironment
from sparkscale.monitors.spark_rest import SparkRestError, driver_rest
from sparkscale.redisconn import connect_as
from sparkscale_lab.bench.daemon_process import DaemonProcess
from sparkscale_lab.bench.environment import queries_ran
from sparkscale_lab.bench.measures import SloLimits, measure, segments
from sparkscale_lab.bench.scaling import logged_actions
from sparkscale_lab.bench.timeline import Recorder
from sparkscale_lab.pipelines.check import unprocessed_records, verify_app
from sparkscale_lab.pipelines.loadgen import run_loadgen
from sparkscale_lab.pipelines.profiles import parse_profile

log = structlog.get_logger(__name__)

SETTLE_LIMIT_S = 300.0  # after the submit, how long the app may take to settle at its initial executors
SETTLED_FOR_S = 5.0  # the initial count must hold this long: mid-trim it passes through it (1, 2, 4, 1, 5 ...)
WARMUP_LIMIT_S = 180.0  # how long the warm-up may load the app before the timed profile starts anyway
DRAIN_LIMIT_S = 600.0  # after the load, how long the app may take to process what is left
SUMMARY_WHY_CHARS = 90  # an action's reason in the summary; the whole of it: `sparkscale explain ID`
DEMO_TIMINGS = ["loop.interval_s=5", "loop.window_s=15", "loop.cooldown_s=20", "loop.stabilization_s=0",
                "guards.scale_down_delay_s=20", "outcomes.evaluation_windows=2"]


@dataclass(frozen=True)
class DemoSpec:
    app: str
    minutes: float
    low_rate: int
    high_rate: int
    out_dir: Path
    seed: int = 11

    @property
    def profile(self) -> str:
        """Low for a fifth of the time, high (the step up) for 30 %, low again for the other half:
        the step down needs the backlog drained and then guards.scale_down_delay_s of lower need."""
        total = self.minutes * 60
        low1, high = round(total * 0.20), round(total * 0.30)
        return f"steps:{self.low_rate}@{low1}s,{self.high_rate}@{high}s,{self.low_rate}@{round(total) - low1 - high}s"


def run_demo(cfg: Config, spec: DemoSpec, config_path: str | None, overrides: list[str],
             echo: Callable[[str], None] = print) -> int:
    """The whole demo; returns the exit code (0: every record verified exactly once)."""
    echo(f"sparkscale demo: {spec.minutes:g} minutes, app {spec.app}, load {spec.profile}")
    echo("starting the embedded environment (Spark standalone master and workers, Redis, ZooKeeper)...")
    LocalEnvironment(cfg).up()
    if running(cfg, spec.app):
        stop(cfg, spec.app)
    echo(f"forgetting {spec.app}'s earlier input, output, state and checkpoints (each demo judges its own run)...")
    forget_app(cfg, spec.app)
    echo(f"submitting {spec.app}...")
    submit(cfg, spec.app, config_path, overrides, wait_s=300)
    echo("waiting for its executors to settle at the initial count...")
    _wait_settled(cfg, spec.app, SETTLE_LIMIT_S)
    batches = cfg.guards.startup_grace_batches + 1
    echo(f"warming up at {spec.low_rate} lines/s until its queries ran {batches} batches with input...")
    _warm_up(cfg, spec.app, spec.low_rate, batches, WARMUP_LIMIT_S, spec.seed + 1)
    spec.out_dir.mkdir(parents=True, exist_ok=True)
    daemon_log = spec.out_dir / "daemon.jsonl"
    echo("running the daemon (DS2) in the foreground; its log follows. Ctrl-C ends the demo early.\n")
    daemon = DaemonProcess(config_path, overrides, daemon_log, "demo",
                           ["policy.name=ds2", "logging.level=info", "logging.stderr=true",
                            "logging.stderr_format=console"], inherit_stderr=True)
    t0 = time.time()
    recorder = Recorder(cfg, spec.app, 2.0, t0=t0).start()
    stop_load = threading.Event()
    loader = threading.Thread(target=run_loadgen, args=(cfg, spec.app, spec.profile),
                              kwargs={"seed": spec.seed, "stop": stop_load}, daemon=True)
    loader.start()
    interrupted = False
    try:
        loader.join()
    except KeyboardInterrupt:
        interrupted = True
        stop_load.set()
        loader.join()
    finally:
        daemon.stop()
    echo("\nthe load has ended; waiting for the app to process what is left...")
    client = connect_as(cfg, OPERATOR)
    left = _drain(client, cfg, spec.app, DRAIN_LIMIT_S)
    samples = recorder.stop()
    # The verifier compares the sink with all input: before the app has processed it all, what it
    # has not reached yet would count as lost. Say so instead.
    result = verify_app(cfg, spec.app) if left == 0 else None
    actions = logged_actions(ActionLog(client, cfg.redis.key_prefix), t0, spec.app)
    app = cfg.app(spec.app)
    segs = segments(parse_profile(spec.profile))
    if interrupted:
        end = samples[-1].t_s if samples else 0.0
        segs = [s for s in segs if s.start_s < end]
    measures = measure(samples, actions, segs, SloLimits(batch_limit_ms=app.trigger_interval_s * 1000))
    stop(cfg, spec.app)

    from sparkscale_lab.bench.plots import timeline

    plot = spec.out_dir / "demo-timeline.png"
    verdict = (f"verified {result.total_expected} records, lost {result.lost}, duplicated {result.duplicated}"
               if result else f"{left} records still unprocessed, not verified")
    title = f"sparkscale demo: {spec.app} with DS2, {len(actions)} actions; {verdict}"
    timeline(samples, [a.to_dict() for a in actions], title, plot, spec.profile)
    (spec.out_dir / "demo.json").write_text(json.dumps({
        "profile": spec.profile, "samples": [s.to_dict() for s in samples], "actions": [a.to_dict() for a in actions],
        "measures": measures.to_dict(), "unprocessed_records": left,
        "lost": result.lost if result else None, "duplicated": result.duplicated if result else None,
        "total_records": result.total_expected if result else None}, indent=1))

    echo("\n=== summary ===")
    echo(f"load: {spec.profile}{' (interrupted)' if interrupted else ''}")
    echo(f"actions taken by the daemon: {len(actions)}")
    for a in actions:
        echo(f"  t={a.t_s:6.1f} s  {a.kind} {a.from_} -> {a.to}  {'done' if a.done else 'FAILED'}"
             + (f"  ({clip(a.why, SUMMARY_WHY_CHARS)})" if a.why else ""))
    for seg, conv in zip(segs, measures.convergence_s, strict=True):
        echo(f"  load {seg.rate:g}/s from t={seg.start_s:g} s: "
             + (f"converged (stable, keeping up) after {conv:g} s" if conv is not None else "did not converge"))
    echo(f"peak backlog: {measures.peak_backlog_records} records; executor-core-seconds: {measures.executor_core_s:g}")
    if result is not None:
        echo(f"records verified: {result.total_expected} produced, lost {result.lost}, "
             f"duplicated {result.duplicated}")
    else:
        echo(f"NOT verified: {left} records were still unprocessed {DRAIN_LIMIT_S:g} s after the load "
             "(the machine could not keep up); `sparkscale verify --app " + spec.app + "` once it has")
    echo(f"timeline plot: {plot}")
    echo(f"the daemon's log: {daemon_log}; the action log: sparkscale actions --since 1h")
    echo("the environment is still up: `sparkscale cluster down` (or ./dev down) stops it")
    return 0 if result is not None and result.lost == 0 and result.duplicated == 0 else 1


def forget_app(cfg: Config, app_name: str) -> None:
    """Remove an app's Redis keys (streams, sink, progress, pause, shape) and its checkpoints."""
    import shutil

    from sparkscale.apps.submit import checkpoint_root

    client = connect_as(cfg, OPERATOR)
    try:
        for key in client.scan_iter(f"{cfg.redis.key_prefix}{app_name}:*"):
            client.delete(key)
    finally:
        client.close()
    shutil.rmtree(checkpoint_root(cfg, cfg.app(app_name)), ignore_errors=True)


def _wait_settled(cfg: Config, app_name: str, limit_s: float) -> None:
    """Standalone mode launches executors up to spark.cores.max before the agent's initial target
    trims them (ControlAgent.start); load that meets the app mid-trim (JVMs starting on every core)
    would make the first step a start-up test. Waits for the initial count, then returns either way."""
    app = cfg.app(app_name)
    deadline = time.monotonic() + limit_s
    since: float | None = None  # when the count last became the initial one
    while time.monotonic() < deadline:
        try:
            rest = driver_rest(cfg, app, timeout_s=2, retries=0)
            active = [e for e in rest.executors(rest.application(app.name).id) if e.active]
            if len(active) != app.initial_executors:
                since = None
            elif since is None:
                since = time.monotonic()
            elif time.monotonic() - since >= SETTLED_FOR_S:
                return
        except SparkRestError:
            since = None  # the UI is not up yet (or its URL not registered)
        time.sleep(1.0)  # polling the REST API for the trim
    log.warning("demo.not_settled", app=app_name, limit_s=limit_s)


def _warm_up(cfg: Config, app_name: str, rate: int, batches: int, limit_s: float, seed: int) -> None:
    """Load the app at `rate` until each of its queries ran `batches` batches with input (or
    `limit_s`), before the timed profile and the daemon start: on a slow machine a cold query's
    first batches took 30 s each, the daemon's start-up grace rightly held its decisions on them,
    and the step up came after the high load had ended (the bench's warm-up, for the same reason)."""
    stop_load = threading.Event()
    loader = threading.Thread(target=run_loadgen, args=(cfg, app_name, f"constant:{rate}"),
                              kwargs={"seed": seed, "stop": stop_load}, daemon=True)
    loader.start()
    client = connect_as(cfg, OPERATOR)
    deadline = time.monotonic() + limit_s
    try:
        while time.monotonic() < deadline and not queries_ran(client, cfg, app_name, batches):
            time.sleep(1.0)  # polling the agent's progress reports
        if time.monotonic() >= deadline:
            log.warning("demo.warm_up_limit", app=app_name, limit_s=limit_s, batches=batches)
    finally:
        stop_load.set()
        loader.join()
        client.close()


def _drain(client: redis.Redis, cfg: Config, app_name: str, limit_s: float) -> int:
    """Wait until the app has processed all its input (or `limit_s`); the records left."""
    deadline = time.monotonic() + limit_s
    while True:
        left = unprocessed_records(client, cfg, cfg.app(app_name))
        if left == 0 or time.monotonic() > deadline:
            return left
        time.sleep(1)  # polling the backlog
