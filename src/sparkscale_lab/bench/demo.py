"""`sparkscale demo`: the embedded environment, `wordcount` under a low / high / low load, and the
daemon with DS2 in the foreground; at the end a summary (actions, convergence, records verified)
and a timeline plot.

The demo shortens the daemon's timings so that a few minutes give the daemon several chances to
act on each load step (`DEMO_TIMINGS`; a `--set` of the same key wins). Unless `--low`/`--high` say
otherwise, it sizes the load to the machine (`demo_rates`): one fixed pair could not serve both 2-core
machines it ran on. One executor carried 14,387 wordcount lines/s on the first (docs/results/
pipeline_throughput.md), where a high step of 8,000 needed no step up; 2,000-4,000 on the second,
where 20,000 left a backlog that 6 executors did not drain within the low phase, so no step down.
It leaves the environment running, so that `sparkscale status` / `actions` can be read afterwards;
`sparkscale cluster down` stops it.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import redis
import structlog

from sparkscale.apps.submit import running, stop, submit
from sparkscale.bounded import clip
from sparkscale.config import Config
from sparkscale.config.identities import OPERATOR
from sparkscale.daemon.action_log import ActionLog
from sparkscale.localenv import LocalEnvironment
from sparkscale.monitors.collector import read_progress
from sparkscale.monitors.progress_reports import ProgressReport
from sparkscale.monitors.spark_rest import SparkRestError, driver_rest
from sparkscale.protocol.keys import paused_key
from sparkscale.protocol.streams import read_source_status
from sparkscale.redisconn import connect_as
from sparkscale.store.redis_queries import read_queries
from sparkscale_lab.bench.daemon_process import DaemonProcess
from sparkscale_lab.bench.environment import queries_ran, wait_for
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
PROBE_LINES = 60_000  # the capacity probe's load: three of wordcount's largest batches (max_records_per_batch)
PROBE_RATE = 20_000  # ... written at this rate, lines/s
PROBE_LIMIT_S = 120.0  # how long the probe's lines may take to be processed before the demo goes on anyway
DEFAULT_LOW, DEFAULT_HIGH = 2000, 20000  # lines/s: the most the sized load asks, and the rates when unmeasured
LOW_SHARE, HIGH_SHARE = 0.25, 1.3  # of what one executor carries: low keeps one executor, high needs more
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
    sized: bool = False  # the rates are to be sized to the machine (`demo_rates`) after the warm-up

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
    echo(f"sparkscale demo: {spec.minutes:g} minutes, app {spec.app}, load "
         + (f"low/high/low sized to this machine after a warm-up ({spec.minutes * 60:g} s)" if spec.sized
            else spec.profile))
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
    if spec.sized:
        echo(f"measuring what one executor carries: {PROBE_LINES} lines at {PROBE_RATE}/s...")
        spec = sized_spec(spec, _probe_capacity(cfg, spec.app, spec.seed + 2), echo)
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
    """A managed app starts at its initial executors (apps/submit.py), but a driver whose own conf
    turns Spark's dynamic allocation off launches up to spark.cores.max first and the agent trims
    them (ControlAgent.start); load that meets the app mid-trim (JVMs starting on every core) would
    make the first step a start-up test. Waits for the initial count, then returns either way."""
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
    try:
        wait_for(lambda: queries_ran(client, cfg, app_name, batches), limit_s, "the warm-up's batches", poll_s=1.0)
    except TimeoutError:
        log.warning("demo.warm_up_limit", app=app_name, limit_s=limit_s, batches=batches)
    finally:
        stop_load.set()
        loader.join()
        client.close()


def demo_rates(lines_per_s: float | None) -> tuple[int, int]:
    """The low and high rates (lines/s) for a machine where one executor processed `lines_per_s`:
    low a quarter of it, so one executor stays enough after the fall; high 1.3x, so the step up
    needs more executors and its backlog drains early in the low phase (at 1.6x on a 2-core
    machine, where the load generator takes CPU from the executors, the step down came 15 s before
    the end). Neither above the defaults, which served a fast machine; the defaults where nothing
    was measured."""
    if lines_per_s is None or not lines_per_s > 0:
        return DEFAULT_LOW, DEFAULT_HIGH
    return (max(int(round(min(DEFAULT_LOW, LOW_SHARE * lines_per_s), -1)), 10),
            max(int(round(min(DEFAULT_HIGH, HIGH_SHARE * lines_per_s), -2)), 100))


def throughput(reports: list[ProgressReport]) -> float | None:
    """Lines per second of batch time over the batches with input, the last one left out (it
    takes the probe's tail, too few lines to pay for a batch's fixed costs); None under two."""
    batches = [r for r in reports if r.num_input_rows > 0 and r.batch_duration_ms and r.batch_duration_ms > 0]
    if len(batches) < 2:
        return None
    used = batches[:-1]
    return sum(r.num_input_rows for r in used) / (sum(r.batch_duration_ms or 0.0 for r in used) / 1000.0)


def sized_spec(spec: DemoSpec, lines_per_s: float | None, echo: Callable[[str], None]) -> DemoSpec:
    low, high = demo_rates(lines_per_s)
    measured = (f"one executor processed {lines_per_s:,.0f} lines/s" if lines_per_s
                else "the probe measured nothing (too few batches)")
    echo(f"{measured}: load {low} lines/s, then {high}, then {low} (--low/--high choose them)")
    return replace(spec, low_rate=low, high_rate=high, sized=False)


def _probe_capacity(cfg: Config, app_name: str, seed: int) -> float | None:
    """Pause the app's sources, write PROBE_LINES at PROBE_RATE, resume them and wait until the lines
    are processed (one executor, no daemon yet); the slowest query's `throughput` over the batches
    that took them. Written while paused: a load generator writing beside the batches takes CPU
    from them (one run measured 1,824 lines/s that way, another 4,812 on the same machine)."""
    client = connect_as(cfg, OPERATOR)
    prefix = cfg.redis.key_prefix
    try:
        queries = list(read_queries(client, prefix, app_name))
        client.set(paused_key(prefix, app_name), "1")
        try:
            if not _sources_paused(client, prefix, app_name, queries):
                return None
            run_loadgen(cfg, app_name, f"constant:{PROBE_RATE}", seed=seed, max_duration_s=PROBE_LINES / PROBE_RATE)
            since = time.time()
        finally:
            client.delete(paused_key(prefix, app_name))
        if _drain(client, cfg, app_name, PROBE_LIMIT_S):
            log.warning("demo.probe_not_drained", app=app_name, limit_s=PROBE_LIMIT_S)
        rates = [throughput(read_progress(client, prefix, app_name, name, since_s=since)) for name in queries]
    finally:
        client.close()
    known = [r for r in rates if r is not None]
    return min(known) if known and len(known) == len(rates) else None


def _sources_paused(client: redis.Redis, prefix: str, app_name: str, queries: list[str]) -> bool:
    """Wait until every query's source saw the pause (it writes paused=1 from a call that admitted
    nothing: its batches are done by then); False after PROBE_LIMIT_S."""
    try:
        wait_for(lambda: all(read_source_status(client, prefix, app_name, q).paused for q in queries),
                 PROBE_LIMIT_S, "the sources to pause")
    except TimeoutError:
        log.warning("demo.probe_not_paused", app=app_name, limit_s=PROBE_LIMIT_S)
        return False
    return True


def _drain(client: redis.Redis, cfg: Config, app_name: str, limit_s: float) -> int:
    """Wait until the app has processed all its input (or `limit_s`); the records left."""
    deadline = time.monotonic() + limit_s
    while True:
        left = unprocessed_records(client, cfg, cfg.app(app_name))
        if left == 0 or time.monotonic() > deadline:
            return left
        time.sleep(1)  # polling the backlog
