"""`sparkscale bench scaling|migration|userjob|chaos|placement`, `report DIR` and `demo`.

The benchmarks bring up their own embedded environments on free ports in temp dirs; they read no
config file (the user's environment is left alone). The demo drives one app under a steps load
with the daemon in the foreground."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import click

from sparkscale.cli.common import EXIT_ENVIRONMENT, config_options, load_or_exit, require_app
from sparkscale.config import Config, load_config
from sparkscale.logsetup import configure_logging

QUICK_PROFILE = "steps:15@30s,60@60s,15@45s"  # 135 s: one step up, one down


def _command_line() -> str:
    return "sparkscale " + " ".join(shlex.quote(a) for a in sys.argv[1:])


def _logging() -> None:
    configure_logging(load_config(None, ["logging.level=info"]).logging)


def _names(value: str, known: tuple[str, ...], what: str) -> tuple[str, ...]:
    names = tuple(v.strip() for v in value.split(",") if v.strip())
    unknown = [n for n in names if n not in known]
    if not names or unknown:
        raise click.BadParameter(f"unknown {what} {', '.join(unknown) or '(none given)'}; expected some of "
                                 f"{','.join(known)}")
    return names


@click.group("bench")
def bench() -> None:
    """Benchmarks on fresh embedded environments; results, tables and plots under --out."""


@bench.command("scaling")
@click.option("--workload", "workloads", multiple=True,
              help="Repeatable: dag-linear | dag-diamond | dag-star | wordcount | clicks-file (the clickstream "
                   "fixture script on a file source) | memory-state (the memory row: state that outgrows a "
                   "scaled-down executor's memory; ds2-baseline and ds2 only). Default: dag-linear and clicks-file.")
@click.option("--profile", "profiles", multiple=True,
              help="Repeatable load profile (sparkscale loadgen's syntax; must end), run with every workload. "
                   "Default: each workload's own (dag-linear: steps:15@45s,60@90s,15@90s; clicks-file: that and "
                   "sine:37.5,22.5,120s@240s; memory-state: steps:60@100s,10@120s).")
@click.option("--case", "cases", multiple=True, metavar="WORKLOAD=PROFILE",
              help="Repeatable, instead of --workload/--profile: exactly these cases.")
@click.option("--controllers", default=None,
              help="Default: static,spark-dra,threshold,dhalion,ds2-baseline,ds2 (--quick: ds2). ds2-baseline: DS2 "
                   "without the stability settings, the baseline ds2's scaling actions are compared with. Also known: "
                   "ds2-restart-aware (ds2 with policy.ds2.restart_aware on); oracle (no daemon: the calibration's "
                   "executor count for the load of the next 15 s, set ahead), oracle-spare (one executor more).")
@click.option("--repeat", type=click.IntRange(min=1), default=None, help="Default 3 (--quick: 1).")
@click.option("--seed", type=int, default=7, show_default=True)
@click.option("--max-executors", type=click.IntRange(min=1), default=4, show_default=True)
@click.option("--calibration-trial-s", type=float, default=None,
              help="How long each calibration trial (one rate, one executor count) loads the app. Default 60.")
@click.option("--no-calibration", is_flag=True, help="Skip the calibration (over-provisioning is then unknown).")
@click.option("--slo-backlog-s", type=click.FloatRange(min=0, min_open=True), default=10.0, show_default=True,
              help="The freshness SLO: at most this many seconds of input waiting.")
@click.option("--slo-latency-s", type=click.FloatRange(min=0, min_open=True), default=10.0, show_default=True,
              help="The end-to-end latency limit.")
@click.option("--warmup-s", type=click.FloatRange(min=0), default=20.0, show_default=True,
              help="Before each run's clock starts (and its daemon): load at the profile's first rate this long "
                   "and drain, so that the first batches' start-up counts for no controller. 0: none.")
@click.option("--quick", is_flag=True,
              help=f"A smoke test: dag-linear under {QUICK_PROFILE}, ds2 only, once, no calibration unless "
                   "--calibration-trial-s (each can still be given).")
@click.option("--resume", is_flag=True, help="Keep the calibrations and runs of OUT/results.json (same options).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default="bench-results/scaling",
              show_default=True)
def bench_scaling(workloads: tuple[str, ...], profiles: tuple[str, ...], cases: tuple[str, ...],
                  controllers: str | None, repeat: int | None, seed: int, max_executors: int,
                  calibration_trial_s: float | None, no_calibration: bool, slo_backlog_s: float, slo_latency_s: float,
                  warmup_s: float, quick: bool, resume: bool, out_dir: str) -> None:
    """Static provisioning, Spark's dynamic allocation and the daemon's policies, side by side, for
    each case (a workload under a load profile)."""
    from sparkscale_lab.bench.report import render
    from sparkscale_lab.bench.scaling import WORKLOADS, BenchSpec, check_resume, estimated_duration_s, run_bench
    from sparkscale_lab.bench.scaling_controllers import CONTROLLERS, KNOWN, ORACLES
    from sparkscale_lab.bench.scaling_workloads import make_cases, matrix
    from sparkscale_lab.pipelines.profiles import parse_profile

    for name in workloads:
        if name not in WORKLOADS:
            raise click.BadParameter(f"{name!r}: expected one of {', '.join(WORKLOADS)}", param_hint="--workload")
    pairs = []
    for item in cases:
        name, sep, prof = item.partition("=")
        if not sep or name not in WORKLOADS:
            raise click.BadParameter(f"{item!r}: expected WORKLOAD=PROFILE, WORKLOAD one of {', '.join(WORKLOADS)}",
                                     param_hint="--case")
        pairs.append((name, prof))
    if pairs and (workloads or profiles):
        raise click.BadParameter("give --case, or --workload/--profile, not both", param_hint="--case")
    for prof in [*profiles, *(p for _, p in pairs)]:
        try:
            if parse_profile(prof).duration_s is None:
                raise ValueError("the profile must end (give every step a duration)")
        except ValueError as exc:
            raise click.BadParameter(f"{prof}: {exc}", param_hint="--profile") from None
    if quick:
        workloads = workloads or ("dag-linear",)
        profiles = profiles or (QUICK_PROFILE,)
    spec = BenchSpec(
        cases=make_cases(pairs) if pairs else matrix(workloads or ("dag-linear", "clicks-file"), profiles),
        controllers=_names(controllers or ("ds2" if quick else ",".join(CONTROLLERS)), KNOWN, "controller"),
        repeat=repeat or (1 if quick else 3), seed=seed, max_executors=max_executors,
        slo_backlog_s=slo_backlog_s, slo_latency_s=slo_latency_s, warmup_s=warmup_s,
        calibration_trial_s=calibration_trial_s or (30.0 if quick else 60.0),
        calibrate=not (no_calibration or (quick and calibration_trial_s is None)))
    if set(ORACLES) & set(spec.controllers) and not spec.calibrate:
        raise click.BadParameter("the oracle sets the calibration's executor counts: it needs the calibration",
                                 param_hint="--controllers")
    _logging()
    click.echo(f"{len(spec.cases)} case(s) x {len(spec.controllers)} controller(s) x {spec.repeat} repeat(s): "
               f"{', '.join(c.name for c in spec.cases)}; about {estimated_duration_s(spec) / 60:.0f} min", err=True)
    if resume:
        try:
            check_resume(spec, Path(out_dir))
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--resume") from None
    run_bench(spec, Path(out_dir), _command_line(), resume=resume)
    click.echo(render(Path(out_dir)))


@click.command("report")
@click.argument("results_dir", type=click.Path(file_okay=False, exists=True))
def report_command(results_dir: str) -> None:
    """Re-render the tables and plots of saved benchmark results (RESULTS_DIR/results.json)."""
    from sparkscale_lab.bench.report import ReportError, render

    try:
        click.echo(render(Path(results_dir)))
    except ReportError as exc:
        click.echo(f"cannot report {results_dir}: {exc}", err=True)
        sys.exit(2)


@bench.command("migration")
@click.option("--workload", default="dag-star", show_default=True, help="dag-star | dag-linear | dag-diamond.")
@click.option("--strategies", default="dsm,dcr,ccr", show_default=True)
@click.option("--repeat", type=click.IntRange(min=1), default=3, show_default=True,
              help="Migrations per direction (scale-out 4 -> 8, scale-in 8 -> 4) and strategy.")
@click.option("--rate", type=click.IntRange(min=1), default=100, show_default=True, help="Input records/s.")
@click.option("--stable-window-s", type=float, default=60.0, show_default=True,
              help="How long the output must stay within tolerance of the input to count as stable.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default="bench-results/migration",
              show_default=True)
def bench_migration(workload: str, strategies: str, repeat: int, rate: int, stable_window_s: float,
                    out_dir: str) -> None:
    """DSM, DCR and CCR migrations under a constant load: the seed's metrics and rate timelines."""
    from sparkscale_lab.bench.migration import SHAPES, STRATEGIES, MigrationSpec, run_migration_bench
    from sparkscale_lab.bench.report import render

    if workload not in SHAPES:
        raise click.BadParameter(f"expected one of {', '.join(SHAPES)}", param_hint="--workload")
    _logging()
    spec = MigrationSpec(workload=workload, strategies=_names(strategies, STRATEGIES, "strategy"), repeat=repeat,
                         rate=rate, stable_window_s=stable_window_s)
    run_migration_bench(spec, Path(out_dir), _command_line())
    click.echo(render(Path(out_dir)))


@bench.command("chaos")
@click.option("--faults", default=None,
              help="Comma-separated, in this order (default: all): executor_kill, worker_kill, driver_kill, "
                   "daemon_kill, redis_restart, zookeeper_restart, zookeeper_expiry.")
@click.option("--variants", default="default", show_default=True,
              help="Comma-separated configurations the faults that kill executors (executor_kill, worker_kill) "
                   "run under, one run each, side by side in results.md: default; changelog (RocksDB changelog "
                   "checkpointing on); spare (one executor more than the daemon's target). Other faults run "
                   "once, under the default.")
@click.option("--rate", type=click.IntRange(min=1), default=1000, show_default=True,
              help="Input lines/s of the wordcount app, constant (its executors keep up with it).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default="bench-results/chaos",
              show_default=True)
@click.option("--quick", is_flag=True,
              help="Shorter phases (20 s warm-up, 20 s pre-fault, 10 s sustain, 180 s recovery timeout) and every "
                   "fault on one embedded environment: the test suite's version.")
def bench_chaos(faults: str | None, variants: str, rate: int, out_dir: str, quick: bool) -> None:
    """Faults injected one at a time into a managed app under load, with the daemon running: recovery
    time (to 90 % of the pre-fault throughput) and its breakdown (detection, replacement, state
    reload), lost and duplicated records, what the daemon did. Exit 1 when a fault did not recover
    or anything was lost or duplicated."""
    from sparkscale_lab.bench.chaos import ChaosSpec, passed, run_chaos
    from sparkscale_lab.bench.chaos_faults import FAULT_NAMES
    from sparkscale_lab.bench.chaos_variants import VARIANT_NAMES
    from sparkscale_lab.bench.report import render

    names = _names(faults, FAULT_NAMES, "fault") if faults is not None else FAULT_NAMES
    chosen = _names(variants, VARIANT_NAMES, "variant")
    spec = (ChaosSpec.quick_spec(faults=names, variants=chosen, rate=rate) if quick
            else ChaosSpec(faults=names, variants=chosen, rate=rate))
    _logging()
    results = run_chaos(spec, Path(out_dir), _command_line())
    click.echo(render(Path(out_dir)))
    if not passed(results):
        click.echo("a fault did not recover, or records were lost or duplicated (results.md)", err=True)
        sys.exit(1)


def _counts(value: str, n: int, what: str, param: str) -> tuple[int, ...]:
    """`n` comma-separated whole numbers of at least 1."""
    try:
        counts = tuple(int(v) for v in value.split(","))
    except ValueError:
        counts = ()
    if len(counts) != n or min(counts) < 1:
        raise click.BadParameter(f"{value!r}: expected {n} comma-separated {what} of at least 1", param_hint=param)
    return counts


@bench.command("placement")
@click.option("--placements", default="spark-default,otd,edrp", show_default=True,
              help="Comma-separated registered placement policies, one run each (per repeat), in this order.")
@click.option("--repeat", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--duration-s", type=click.FloatRange(min=60), default=300.0, show_default=True,
              help="The measured window of each run, after the warm-up.")
@click.option("--warmup-s", type=click.FloatRange(min=0), default=60.0, show_default=True,
              help="Load before the window opens (the daemon acts from the load's start).")
@click.option("--rate", type=click.IntRange(min=1), default=300, show_default=True,
              help="Input lines/s into each of the three wordcount apps, constant.")
@click.option("--worker-cores", default="7,4", show_default=True,
              help="Cores each of the two workers advertises (each runs on one pinned CPU): unevenly, so that the "
                   "master crowds worker 1, with room left for a move's extra executor.")
@click.option("--executors", default="1,1,2", show_default=True, help="MIN,INITIAL,MAX executors of each app.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default="docs/results/placement",
              show_default=True)
def bench_placement(placements: str, repeat: int, duration_s: float, warmup_s: float, rate: int,
                    worker_cores: str, executors: str, out_dir: str) -> None:
    """Spark's own executor placement against OTD and EDRP: three wordcount apps under the same load on
    two workers pinned to a CPU each, the daemon (DS2) with each placement policy in turn. Worker load
    imbalance, remote shuffle bytes, the backlog SLO, downtime, EDRP's objective on what was measured,
    lost and duplicated records. Exit 1 when anything was lost or duplicated, or a run failed."""
    from sparkscale.config.sections import usable_cpus
    from sparkscale.policies.placement.base import registered_placements
    from sparkscale_lab.bench.placement import PlacementSpec, estimated_duration_s, run_placement_bench
    from sparkscale_lab.bench.report import render

    chosen = _names(placements, registered_placements(), "placement")
    cores = _counts(worker_cores, 2, "core counts", "--worker-cores")
    low, initial, high = _counts(executors, 3, "executor counts", "--executors")
    if not low <= initial <= high:
        raise click.BadParameter(f"{executors!r}: expected MIN <= INITIAL <= MAX", param_hint="--executors")
    cpus = sorted(usable_cpus())
    if len(cpus) < 2:
        raise click.UsageError(f"the two workers need a CPU each; this process may run on {len(cpus)}")
    spec = PlacementSpec(placements=chosen, repeat=repeat, duration_s=duration_s, warmup_s=warmup_s, rate=rate,
                         worker_cores=cores, worker_cpus=((cpus[0],), (cpus[1],)), min_executors=low,
                         initial_executors=initial, max_executors=high)
    _logging()
    click.echo(f"{len(chosen)} placement(s) x {repeat} repeat(s); about {estimated_duration_s(spec) / 60:.0f} min",
               err=True)
    results = run_placement_bench(spec, Path(out_dir), _command_line())
    click.echo(render(Path(out_dir)))
    if results["failed_runs"] or any(r["lost"] or r["duplicated"] for r in results["runs"]):
        click.echo("a run failed, or records were lost or duplicated (results.md)", err=True)
        sys.exit(1)


@bench.command("userjob")
@click.option("--script", type=click.Path(dir_okay=False, exists=True), default=None,
              help="The clickstream fixture (default: tests/fixtures/clickstream.py of this checkout).")
@click.option("--strategies", default=None, help="Comma-separated (default: every registered strategy).")
@click.option("--repeat", type=click.IntRange(min=1), default=3, show_default=True,
              help="Migrations of each query per strategy (4 -> 8 -> 4 ... state partitions).")
@click.option("--cycles", type=click.IntRange(min=2), default=20, show_default=True,
              help="Timed monitor + decide cycles per app.")
@click.option("--rate", type=click.IntRange(min=1), default=40, show_default=True, help="Clicks landed per second.")
@click.option("--out", default="docs/results/userjob", show_default=True,
              help="Writes OUT.md (the page) and OUT.json (every figure).")
def bench_userjob(script: str | None, strategies: str | None, repeat: int, cycles: int, rate: int, out: str) -> None:
    """An operator's own script (the clickstream fixture, 2 queries) in one run: the daemon's monitor +
    decide time for its 2 queries against wordcount's 1, then each strategy's migration phases
    (median over the migrations), then the output verified. Exit 1 when it was lost, duplicated or
    not verified."""
    from sparkscale.actuators.migration import registered_strategies
    from sparkscale_lab.bench.userjob import DEFAULT_SCRIPT, UserJobSpec, run_userjob_bench, save

    script = script or str(DEFAULT_SCRIPT)
    if not Path(script).is_file():
        raise click.BadParameter(f"{script} does not exist: give the clickstream fixture", param_hint="--script")
    known = registered_strategies()
    _logging()
    spec = UserJobSpec(script=str(Path(script).resolve()), repeat=repeat, cycles=cycles, rate=rate,
                       strategies=_names(strategies, known, "strategy") if strategies else known)
    results = run_userjob_bench(spec, out, _command_line())
    click.echo(save(results, out))
    if results.check is None or not results.check.ok:
        click.echo(results.check.line() if results.check else "THE OUTPUT WAS NOT VERIFIED", err=True)
        sys.exit(1)


@click.command("demo")
@config_options
@click.option("--minutes", type=click.FloatRange(min=1), default=5.0, show_default=True,
              help="How long the load runs (low a fifth, high 30 %, low the other half).")
@click.option("--app", "app_name", default="wordcount", show_default=True, help="The managed app to drive.")
@click.option("--low", "low_rate", type=click.IntRange(min=1), default=None,
              help="The low load, records/s (default: sized to the machine with --high, see below).")
@click.option("--high", "high_rate", type=click.IntRange(min=1), default=None,
              help="The high load (the step up), records/s. Without --low and --high the demo measures what "
                   "one executor processes after its warm-up and loads a quarter of that (at most 2,000/s) "
                   "and 1.3x (at most 20,000/s); one of them alone sets the other to its default "
                   "(2,000 and 20,000).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="Where the plot and figures go (default: <cluster.run_dir>/demo).")
def demo(cfg: Config, minutes: float, app_name: str, low_rate: int | None, high_rate: int | None,
         out_dir: str | None) -> None:
    """The main job: the embedded environment, APP under a steps load, the daemon (DS2) in the
    foreground; then a summary and a timeline plot. Exit 0 when every record was verified."""
    from pathlib import Path

    from sparkscale.apps.submit import PipelineError
    from sparkscale.localenv import EnvironmentStartError, PreflightError
    from sparkscale_lab.bench.demo import DEFAULT_HIGH, DEFAULT_LOW, DEMO_TIMINGS, DemoSpec, run_demo

    meta = click.get_current_context().meta
    overrides = [*DEMO_TIMINGS, *meta["overrides"]]  # the user's --set wins over the demo's timings
    cfg = require_app(load_or_exit(meta["config_path"], tuple(overrides)), app_name)
    # This process's own events (the load generator's one per second) would drown the daemon's log.
    configure_logging(cfg.logging.model_copy(update={"level": "warning"}))
    spec = DemoSpec(app=app_name, minutes=minutes, low_rate=low_rate or DEFAULT_LOW,
                    high_rate=high_rate or DEFAULT_HIGH, sized=low_rate is None and high_rate is None,
                    out_dir=Path(out_dir) if out_dir else cfg.cluster.run_path / "demo")
    try:
        sys.exit(run_demo(cfg, spec, meta["config_path"], overrides, echo=click.echo))
    except (EnvironmentStartError, PreflightError, PipelineError) as exc:
        click.echo(f"demo failed: {exc}", err=True)
        sys.exit(EXIT_ENVIRONMENT)
