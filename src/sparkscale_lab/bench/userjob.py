"""`sparkscale bench userjob`: two figures for an operator's own, unmodified script, measured in one
run on one embedded environment (the pure parts: userjob_tables.py).

1. Migration phases per strategy: the clickstream fixture (tests/fixtures/clickstream.py, two
   stateful queries on a file source) runs as app `clicks` under files landed at a steady rate;
   each strategy that can migrate a file-source query migrates each query `repeat` times, 4 -> 8
   -> 4 ... state partitions, through `daemon.manual.run_migration` under the app's leader lock (what
   `sparkscale migrate` does when no daemon leads); the phase durations come from each migration's
   journal. At the end the feed is flushed and clickcheck verifies the output.
2. The daemon's monitor + decide time for an app of 2 queries (`clicks`) against an app of 1 (the
   shipped wordcount, `wc`, under a light load), interleaved, before the migrations, while both run;
   `wc` is stopped before the migrations so that they run with `clicks` alone.
"""

from __future__ import annotations

import json
import os
import platform
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import psutil
import redis
import structlog
from kazoo.client import KazooClient

import sparkscale
from sparkscale import zkconn
from sparkscale.actuators.base import ActuationContext
from sparkscale.actuators.migration import JournalStore, registered_strategies
from sparkscale.apps.submit import running, stop, submit, with_stored_shape
from sparkscale.config import Config
from sparkscale.config.identities import OPERATOR
from sparkscale.daemon import manual
from sparkscale.daemon.action_log import ActionLog
from sparkscale.daemon.leader import LeaderElection
from sparkscale.monitors.collector import (
    HOST_SAMPLE_S,
    AppNotRunningError,
    CollectOptions,
    NoQueriesYet,
    collect_snapshots,
)
from sparkscale.monitors.spark_rest import SparkRestError
from sparkscale.policies.history import DecisionHistory
from sparkscale.policies.planner import decide_app
from sparkscale.protocol.keys import progress_key
from sparkscale.protocol.streams import query_partitions
from sparkscale.redisconn import connect_as
from sparkscale_lab.bench.clickcheck import wait_for_outputs
from sparkscale_lab.bench.environment import BenchEnv, embedded_environment, wait_for
from sparkscale_lab.bench.filefeed import land_files
from sparkscale_lab.bench.userjob_tables import (
    CycleSample,
    MigrationRecord,
    MigrationStep,
    OutputCheck,
    UserJobResults,
    alternate,
    render_markdown,
    schedule,
)
from sparkscale_lab.pipelines.loadgen import run_loadgen
from sparkscale_lab.pipelines.workloads import workload

log = structlog.get_logger(__name__)

APP = "clicks"
ONE_QUERY_APP = "wc"
QUERIES = ("page_windows", "user_totals")  # the fixture's two queries, by the names it gives them
DEFAULT_SCRIPT = Path(sparkscale.__file__).resolve().parents[2] / "tests" / "fixtures" / "clickstream.py"
MIGRATION_YAML = "migration: {phase_timeout_s: 120, measure_timeout_s: 5}\n"
START_TIMEOUT_S = 300.0
SETTLE_TIMEOUT_S = 120.0
OUTPUT_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class UserJobSpec:
    script: str = str(DEFAULT_SCRIPT)
    strategies: tuple[str, ...] = field(default_factory=registered_strategies)
    repeat: int = 3  # migrations per query and strategy
    cycles: int = 20  # timed monitor + decide per app
    rate: int = 40  # clicks/s landed
    files_per_s: float = 1.0
    wordcount_rate: int = 20  # lines/s into the 1-query app
    trigger_s: int = 2  # both apps' trigger: the same number of batches per monitoring window
    window_s: int = 10  # the script's event-time window and watermark
    watermark_s: int = 5
    max_files_per_trigger: int = 4
    warmup_s: float = 30.0  # after the first batches: a full monitoring window of history (loop.window_s)
    settle_s: float = 10.0  # pause after each migration: the restarted query catches up before the next
    host_sample_s: float = HOST_SAMPLE_S  # a blocking sample (the daemon now takes a delta), the same for both apps
    seed: int = 3

    def script_args(self, data: Path, out: Path, checkpoints: Path) -> list[str]:
        return ["--input", str(data), "--output", str(out), "--checkpoint", str(checkpoints),
                "--trigger-s", str(self.trigger_s), "--window-s", str(self.window_s),
                "--watermark-s", str(self.watermark_s), "--max-files-per-trigger", str(self.max_files_per_trigger)]

    def apps_yaml(self, data: Path, out: Path, checkpoints: Path) -> str:
        """`clicks` (the script: 1 to 3 executors, 4 shuffle partitions) and `wc` (wordcount, 1 executor)."""
        return (f"\n  - name: {APP}\n    script: {json.dumps(self.script)}\n"
                f"    args: {json.dumps(self.script_args(data, out, checkpoints))}\n"
                '    spark_conf: {"spark.sql.shuffle.partitions": "4"}\n'
                "    min_executors: 1\n    max_executors: 3\n    initial_executors: 1\n    executor_memory_mb: 512\n"
                f"  - name: {ONE_QUERY_APP}\n    pipeline: wordcount\n    min_executors: 1\n    max_executors: 1\n"
                "    initial_executors: 1\n    executor_memory_mb: 512\n    source_partitions: 2\n"
                "    shuffle_partitions: 2\n    max_records_per_batch: 2000\n"
                f"    trigger_interval_s: {self.trigger_s}\n")

    def describe(self, policy: str) -> dict[str, Any]:
        return {**asdict(self), "strategies": list(self.strategies), "script_name": Path(self.script).name,
                "app": APP, "policy": policy}


def machine() -> str:
    """The machine line of the results page (no host name)."""
    try:
        pyspark = version("pyspark")
    except PackageNotFoundError:
        pyspark = "not installed"
    return (f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs, "
            f"{psutil.virtual_memory().total / 2**30:.0f} GiB RAM, Python {platform.python_version()}, "
            f"PySpark {pyspark}")


def save(results: UserJobResults, out: str) -> str:
    """OUT.json (every figure) and OUT.md (the page); returns the page."""
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.with_suffix(".json").write_text(json.dumps(asdict(results), indent=2))
    page = render_markdown(results)
    path.with_suffix(".md").write_text(page)
    return page


# -- the run --------------------------------------------------------------------------------------

def run_userjob_bench(spec: UserJobSpec, out: str, command: str) -> UserJobResults:
    """The whole run; results saved after each stage, and at the end also when a stage failed (then
    re-raised, after the output was still checked)."""
    supported, refused = tuple(spec.strategies), ()
    work = Path(tempfile.mkdtemp(prefix="sparkscale-userjob-data-"))
    data, output, checkpoints = work / "in", work / "out", work / "chk"
    data.mkdir()  # Spark's file source needs it when the query starts
    with embedded_environment("sparkscale-userjob-", spec.apps_yaml(data, output, checkpoints),
                              MIGRATION_YAML) as env:
        cfg = env.cfg
        results = UserJobResults(command, datetime.now(UTC).isoformat(timespec="seconds"), machine(),
                                 spec.describe(cfg.policy.name), list(QUERIES), list(supported), list(refused),
                                 [APP, ONE_QUERY_APP])
        results.spec["work_dir"] = str(work)  # input, output and checkpoints, left for inspection
        client = connect_as(cfg, OPERATOR)
        zk = zkconn.client_as(cfg, OPERATOR)
        zk.start(timeout=30)
        feed = Background(land_files, data, f"constant:{spec.rate}", seed=spec.seed, files_per_s=spec.files_per_s,
                          window_s=spec.window_s, watermark_s=spec.watermark_s)
        load = Background(run_loadgen, cfg, ONE_QUERY_APP, f"constant:{spec.wordcount_rate}", seed=spec.seed)
        failure: Exception | None = None
        try:
            submit(cfg, APP, env.config_path, env.overrides, wait_s=START_TIMEOUT_S)
            submit(cfg, ONE_QUERY_APP, env.config_path, env.overrides, wait_s=START_TIMEOUT_S)
            feed.start()
            load.start()
            expected = {APP: QUERIES, ONE_QUERY_APP: (workload("wordcount").query,)}
            wait_for(lambda: all_batching(client, cfg.redis.key_prefix, expected), START_TIMEOUT_S,
                     "every query of both apps to finish a batch")
            time.sleep(spec.warmup_s)  # a full monitoring window of batches behind every query
            results.cycles = time_cycles(cfg, [APP, ONE_QUERY_APP], spec.cycles,
                                         CollectOptions(host_sample_s=spec.host_sample_s))
            save(results, out)
            load.finish()
            stop(cfg, ONE_QUERY_APP)  # the migrations run with the script's app alone
            run_migrations(env, zk, client, supported, spec, results, lambda: save(results, out))
        except Exception as exc:  # recorded; the output is still checked, then it is raised
            failure = exc
            results.notes.append(f"the run stopped early: {exc!r}")
            log.exception("bench.userjob.failed")
        finally:
            load.finish()
            feed.finish()
        results.notes += [f"background {b.name} failed: {b.error!r}" for b in (feed, load) if b.error]
        try:
            if feed.is_alive():
                results.notes.append("the file feed did not stop: the output was not checked")
            elif running(cfg, APP) is None:
                results.notes.append(f"{APP} no longer ran at the end: the output was not checked")
            else:
                results.check = check_output(spec, data, output)
        except Exception as exc:  # the page says "not verified"; the rest is still saved
            failure = failure or exc
            results.notes.append(f"the output check failed: {exc!r}")
        finally:
            stop(cfg, APP)
            stop(cfg, ONE_QUERY_APP)
            zk.stop()
            zk.close()
            client.close()
    save(results, out)
    if failure is not None:
        raise failure
    return results


class Background:
    """A function run in a daemon thread until `finish` sets its `stop` event; its exception kept."""

    def __init__(self, target: Callable[..., Any], *args: Any, **kwargs: Any):
        self.name = getattr(target, "__name__", "task")
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(target, args, {**kwargs, "stop": self.stop}),
                                        daemon=True)

    def _run(self, target: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        try:
            target(*args, **kwargs)
        except BaseException as exc:  # kept for the results' notes
            self.error = exc

    def start(self) -> None:
        self._thread.start()

    def finish(self, timeout_s: float = 60.0) -> None:
        self.stop.set()
        if self._thread.ident is not None:
            self._thread.join(timeout_s)

    def is_alive(self) -> bool:
        return self._thread.is_alive()



def all_batching(client: redis.Redis, prefix: str, expected: dict[str, tuple[str, ...]]) -> bool:
    """Every expected query of every app has finished a batch after its first."""
    return all(int(client.hget(progress_key(prefix, app, q), "batch_id") or -1) >= 1
               for app, queries in expected.items() for q in queries)


# -- part 2: monitor + decide ---------------------------------------------------------------------

def time_cycles(cfg: Config, apps: list[str], n: int, options: CollectOptions) -> list[CycleSample]:
    """`n` timed cycles per app, interleaved, the order swapped every round (no app always first)."""
    samples = []
    for i in range(n):
        for app in apps if i % 2 == 0 else list(reversed(apps)):
            samples.append(time_cycle(cfg, app, options))
    return samples


def time_cycle(cfg: Config, app: str, options: CollectOptions) -> CycleSample:
    """The monitor (`collect_snapshots`) and decide (`decide_app`, empty history) parts of a cycle."""
    started = time.perf_counter()
    try:
        snapshots = collect_snapshots(cfg, app, options=options)
    except (AppNotRunningError, NoQueriesYet, SparkRestError, redis.RedisError) as exc:
        return CycleSample(app, 0, time.perf_counter() - started, 0.0, 0.0, error=str(exc))
    collected = time.perf_counter()
    decide_app(snapshots, DecisionHistory.empty(), cfg, cfg.app(app))
    decided = time.perf_counter()
    host = snapshots[0].extensions.get("host", {}) if snapshots else {}
    return CycleSample(app, len(snapshots), round(collected - started, 4), round(decided - collected, 4),
                       float(host.get("sample_s", 0.0)))


# -- part 1: migrations ---------------------------------------------------------------------------

def run_migrations(env: BenchEnv, zk: KazooClient, client: redis.Redis, supported: tuple[str, ...],
                   spec: UserJobSpec, results: UserJobResults, checkpoint: Callable[[], object]) -> None:
    """The schedule; each step migrates from where the query is (a failed migration may have left
    it elsewhere)."""
    prefix = env.cfg.redis.key_prefix
    by = f"bench-userjob:{os.getpid()}"

    def partitions(query: str) -> int:
        configured = env.cfg.app(APP).shuffle_partitions
        assert configured is not None, "set by AppConfig's validation"
        return query_partitions(client, prefix, APP, query, configured)

    checkpoint()
    for planned in schedule(supported, QUERIES, spec.repeat, {q: partitions(q) for q in QUERIES}):
        now = partitions(planned.query)
        step = replace(planned, from_partitions=now, to_partitions=alternate(now))
        record = migrate_once(env, zk, client, step, by)
        if record.status == "done":
            record.settled_s = settled(client, prefix, step.query, step.to_partitions, record)
        results.migrations.append(record)
        log.info("bench.userjob.migrated", strategy=step.strategy, query=step.query, to=step.to_partitions,
                 status=record.status, total_s=record.total_s, phases_s=record.phases_s)
        checkpoint()
        time.sleep(spec.settle_s)  # the restarted query catches up on the files landed meanwhile


def migrate_once(env: BenchEnv, zk: KazooClient, client: redis.Redis, step: MigrationStep,
                 by: str) -> MigrationRecord:
    """One migration as `sparkscale migrate` runs it with no daemon leading (cli/migrate.py): the
    app's leader lock, an ActuationContext, `manual.run_migration`; then its journal's phases."""
    cfg = env.cfg
    record = MigrationRecord(step.strategy, step.query, step.round, step.from_partitions, step.to_partitions,
                             "failed")
    app = with_stored_shape(cfg.app(APP), client, cfg.redis.key_prefix)
    election = LeaderElection(zk, cfg.zookeeper.root, APP, by)
    if not election.acquire(timeout_s=10.0):
        record.detail = "could not take the app's leader lock within 10 s"
        return record
    started = time.time()
    try:
        ctx = ActuationContext(cfg, app, zk, client, election.epoch or 0, lambda: election.is_leader, by,
                               manual.app_restarter(cfg, APP, env.config_path, env.overrides), strategy=step.strategy)
        _decision, result = manual.run_migration(ActionLog(client, cfg.redis.key_prefix, cfg.action_log), ctx,
                                                 step.query, step.to_partitions, f"bench userjob ({by})")
    finally:
        election.release()
    record.detail = result.detail
    journal = JournalStore(zk, cfg.zookeeper.root, APP).read()
    if journal is None or journal.requested_at < started or journal.query != step.query:
        record.status = "refused"  # the runner said no before it created a journal: nothing was stopped
        return record
    record.migration_id = journal.id
    record.phases_s = journal.phase_durations()  # every phase; the table leaves out the ~0 s ones
    if "done" in journal.phases:
        record.total_s = round(journal.phases["done"] - journal.requested_at, 3)
    record.status = "done" if result.status == "done" and journal.status == "done" else journal.status
    return record


def settled(client: redis.Redis, prefix: str, query: str, partitions: int, record: MigrationRecord) -> float | None:
    """Seconds from the request's end until the query's progress shows the new partitions (None: not
    within SETTLE_TIMEOUT_S; the next migration then starts from what the query reports)."""
    started = time.monotonic()
    while time.monotonic() - started < SETTLE_TIMEOUT_S:
        if int(client.hget(progress_key(prefix, APP, query), "state_partitions") or 0) == partitions:
            return round(time.monotonic() - started, 2)
        time.sleep(0.5)  # polling the agent's progress
    log.warning("bench.userjob.not_settled", query=query, partitions=partitions, migration=record.migration_id)
    return None


# -- the end: the oracle --------------------------------------------------------------------------

def check_output(spec: UserJobSpec, data: Path, output: Path) -> OutputCheck:
    """Land the flush file (its event time closes every window), wait for the job to write it all,
    and compare with what the input says (bench.clickcheck)."""
    land_files(data, "constant:1@1s", seed=spec.seed + 1, files_per_s=1.0, flush=True, window_s=spec.window_s,
               watermark_s=spec.watermark_s, realtime=False)
    check = wait_for_outputs(data, output, spec.window_s, spec.watermark_s, timeout_s=OUTPUT_TIMEOUT_S)
    result = OutputCheck(
        ok=check.ok, summary=check.summary(), input_records=check.input_records,
        windows_lost=len(check.windows_lost), windows_duplicated=len(check.windows_duplicated),
        windows_wrong=len(check.windows_wrong), windows_extra=len(check.windows_extra),
        users_lost=len(check.users_lost), users_duplicated=len(check.users_duplicated),
        users_wrong=len(check.users_wrong), users_extra=len(check.users_extra),
        users_regressed=len(check.users_regressed), input_problems=len(check.input_problems))
    if not check.ok:
        log.error("bench.userjob.output_wrong", details=check.details())
    return result
