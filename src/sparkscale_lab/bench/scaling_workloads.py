"""The apps `sparkscale bench scaling` runs, and how each is loaded, sampled, drained and verified.

- Shipped pipelines on the Redis streams source (`dag-linear`, `dag-diamond`, `dag-star`,
  `wordcount`): the load generator writes the profile into the input streams; the backlog is
  counted (records added to the streams minus those the query finished, exact); the latency comes
  from the stream entry times (bench.probes); the pipeline's verifier counts lost and duplicated
  records.
- `clicks-file`: an operator's own, unmodified script, the clickstream fixture
  (tests/fixtures/clickstream.py, as `bench userjob` runs it), managed through `apps[].script`: two
  stateful queries on a file source, the section lookup costing `lookup_ms` per record (a sleep, as
  the dag's tasks). bench.filefeed lands the profile's records as JSON files; the backlog is the one
  the agent states (its file-listing estimate, what the daemon sizes from); the latency comes from
  the files' landing times in the checkpoints' source logs; bench.clickcheck verifies the output,
  whose differences are turned into records lost and duplicated (`click_record_losses`).
- `memory-state`: the memory row (bench.memory_state), the shipped `memory_state` pipeline on the
  Redis streams, read and verified as the dag's; its state outgrows one executor's memory once a
  scale-down gathers it on few executors. It starts on the maximum executors, runs for ds2-baseline
  and ds2 only (MEMORY_CONTROLLERS), and its runs count the executors lost to an out-of-memory.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from sparkscale.config import Config
from sparkscale.config.identities import OPERATOR
from sparkscale.redisconn import connect_as
from sparkscale_lab.bench.clickcheck import ClickCheck, wait_for_outputs
from sparkscale_lab.bench.clickexpected import Expected, expected_outputs
from sparkscale_lab.bench.environment import BenchEnv
from sparkscale_lab.bench.filefeed import land_files
from sparkscale_lab.bench.memory_state import MemoryStateSizing, OomWatch
from sparkscale_lab.bench.probes import FileProbe, StreamLatencyProbe
from sparkscale_lab.bench.timeline import Probe
from sparkscale_lab.bench.userjob import DEFAULT_SCRIPT, UserJobSpec
from sparkscale_lab.pipelines.check import drained, verify_app
from sparkscale_lab.pipelines.loadgen import run_loadgen
from sparkscale_lab.pipelines.profiles import parse_profile

APP = "bench"

# The dag operators sleep per record (no CPU), so executors beyond the machine's 2 cores still add
# capacity (docs/results/pipeline_throughput.md). Linear: 4 stateless tasks of 5 ms, 20 ms a record.
PIPELINES: dict[str, str] = {
    "dag-linear": "{shape: linear, cost_ms_per_record: 5.0, selectivity: 1.0, key_space: 50}",
    "dag-diamond": "{shape: diamond, cost_ms_per_record: 5.0, selectivity: 1.0, key_space: 50}",
    "dag-star": "{shape: star, cost_ms_per_record: 5.0, selectivity: 1.0, key_space: 50}",
    "wordcount": "",
}
FILE_JOBS = ("clicks-file",)
MEMORY_WORKLOADS = ("memory-state",)
WORKLOAD_NAMES = (*PIPELINES, *FILE_JOBS, *MEMORY_WORKLOADS)
# The controllers a memory case is meant for: the guard against the baseline that lacks it.
MEMORY_CONTROLLERS = ("ds2-baseline", "ds2")

STEPS = "steps:15@45s,60@90s,15@90s"
SINE = "sine:37.5,22.5,120s@240s"  # 15 to 60 records/s and back, twice
DEFAULT_PROFILES: dict[str, tuple[str, ...]] = {  # others: (STEPS,)
    "clicks-file": (STEPS, SINE), "memory-state": (MemoryStateSizing().profile,)}


@dataclass(frozen=True)
class AppShape:
    """The executors of one run's app: the range, where it starts, and Spark's own allocation."""

    min_executors: int
    max_executors: int
    initial_executors: int
    dynamic_allocation_idle_s: float | None = None  # spark-dra: its idle timeout; None: off


@dataclass
class Verified:
    lost: int
    duplicated: int
    total_records: int
    notes: list[str] = field(default_factory=list)


class BenchWorkload(Protocol):
    name: str
    backlog_basis: str  # measures.BACKLOG_BASES
    latency_source: str  # how the latency is read (or why there is none)
    trigger_s: float

    def apps_yaml(self, shape: AppShape) -> str: ...

    def load(self, env: BenchEnv, profile: str, seed: int, tag: str) -> None: ...

    def probe(self, cfg: Config) -> Probe: ...

    def drained(self, env: BenchEnv) -> bool: ...

    def verify(self, env: BenchEnv) -> Verified: ...


def default_profiles(workload: str) -> tuple[str, ...]:
    return DEFAULT_PROFILES.get(workload, (STEPS,))


def make_workload(name: str, work_dir: Path) -> BenchWorkload:
    """A fresh instance for one environment (`work_dir` keeps a file job's input, output and checkpoints)."""
    if name in PIPELINES:
        return PipelineWorkload(name)
    if name in FILE_JOBS:
        return ClicksFileWorkload(name, work_dir)
    if name in MEMORY_WORKLOADS:
        return MemoryStateWorkload(name)
    raise ValueError(f"unknown workload {name!r} (expected one of {', '.join(WORKLOAD_NAMES)})")


@dataclass(frozen=True)
class Case:
    """A workload under a load profile; `name` keys its runs and plots (`dag-linear-steps`)."""

    workload: str
    profile: str
    name: str = ""


def make_cases(pairs: Sequence[tuple[str, str]]) -> tuple[Case, ...]:
    """Cases named `<workload>-<profile kind>`, numbered when that repeats."""
    out: list[Case] = []
    for workload, profile in pairs:
        if workload not in WORKLOAD_NAMES:
            raise ValueError(f"unknown workload {workload!r} (expected one of {', '.join(WORKLOAD_NAMES)})")
        if parse_profile(profile).duration_s is None:
            raise ValueError(f"profile {profile!r} never ends; a benchmark needs a bounded profile")
        base = f"{workload}-{profile.split(':', 1)[0] if ':' in profile else 'constant'}"
        name, n = base, 1
        while any(c.name == name for c in out):
            n += 1
            name = f"{base}-{n}"
        out.append(Case(workload, profile, name))
    return tuple(out)


def matrix(workloads: Sequence[str], profiles: Sequence[str]) -> tuple[Case, ...]:
    """Each workload under each profile given, or under its default profiles (dag pipelines: the
    steps; clicks-file: the steps and a sine)."""
    return make_cases([(w, p) for w in workloads for p in (profiles or default_profiles(w))])


def case_controllers(case: Case, controllers: Sequence[str]) -> tuple[str, ...]:
    """The controllers of `controllers` that run `case`: a memory case only the guard's and its
    baseline's."""
    if case.workload in MEMORY_WORKLOADS:
        return tuple(c for c in controllers if c in MEMORY_CONTROLLERS)
    return tuple(controllers)


def case_info(case: Case, work_dir: Path) -> dict[str, Any]:
    """What results.json says about a case: how its backlog and latency were read, and whether its
    runs are judged on executors lost to an out-of-memory (a memory case)."""
    w = make_workload(case.workload, work_dir)
    return {"name": case.name, "workload": case.workload, "profile": case.profile, "backlog_basis": w.backlog_basis,
            "latency_source": w.latency_source, "trigger_s": w.trigger_s,
            "judges_out_of_memory": case.workload in MEMORY_WORKLOADS}


def _shape_lines(shape: AppShape, executor_memory_mb: int = 512) -> list[str]:
    lines = [f"    min_executors: {shape.min_executors}", f"    max_executors: {shape.max_executors}",
             f"    initial_executors: {shape.initial_executors}", f"    executor_memory_mb: {executor_memory_mb}"]
    if shape.dynamic_allocation_idle_s is not None:
        idle = shape.dynamic_allocation_idle_s
        lines.append(f"    dynamic_allocation: {{enabled: true, executor_idle_timeout_s: {idle}}}")
    return lines


class PipelineWorkload:
    backlog_basis = "counted"
    latency_source = ("batch end (progress report) minus the Redis stream entry time of the oldest record "
                      "the batch read")
    trigger_s = 1.0  # apps[].trigger_interval_s default

    def __init__(self, name: str):
        self.name = name

    def apps_yaml(self, shape: AppShape) -> str:
        pipeline = "wordcount" if self.name == "wordcount" else "dag"
        lines = self._pipeline_lines(pipeline, shape)
        if pipeline == "dag":
            lines.append(f"    dag: {PIPELINES[self.name]}")
        return "\n".join(lines) + "\n"

    @staticmethod
    def _pipeline_lines(pipeline: str, shape: AppShape, executor_memory_mb: int = 512) -> list[str]:
        return [f"\n  - name: {APP}", f"    pipeline: {pipeline}", *_shape_lines(shape, executor_memory_mb),
                "    source_partitions: 4", "    shuffle_partitions: 4", "    max_records_per_batch: 2000"]

    def load(self, env: BenchEnv, profile: str, seed: int, tag: str) -> None:
        run_loadgen(env.cfg, APP, profile, seed=seed)

    def probe(self, cfg: Config) -> Probe:
        return StreamLatencyProbe(cfg, cfg.app(APP))

    def drained(self, env: BenchEnv) -> bool:
        client = connect_as(env.cfg, OPERATOR)
        try:
            return drained(client, env.cfg, env.cfg.app(APP))
        finally:
            client.close()

    def verify(self, env: BenchEnv) -> Verified:
        result = verify_app(env.cfg, APP)
        return Verified(result.lost, result.duplicated, result.total_expected)


class MemoryStateWorkload(PipelineWorkload):
    """The memory row's app (bench.memory_state): the `memory_state` pipeline on the maximum executors
    from the start (its state partitions spread over all of them), the state on the JVM heap."""

    def __init__(self, name: str, sizing: MemoryStateSizing | None = None):
        super().__init__(name)
        self.sizing = sizing or MemoryStateSizing()
        self.trigger_s = self.sizing.trigger_s
        self._watch: OomWatch | None = None

    def probe(self, cfg: Config) -> OomWatch:
        """One watch for the run (a fresh workload per run): the stream probe's samples, and the
        driver's executors, dead ones too, read while the run goes on."""
        if self._watch is None:
            self._watch = OomWatch(super().probe(cfg), APP)
        return self._watch

    def apps_yaml(self, shape: AppShape) -> str:
        spread = AppShape(shape.min_executors, shape.max_executors, shape.max_executors,
                          shape.dynamic_allocation_idle_s)
        lines = [*self._pipeline_lines("memory_state", spread, self.sizing.executor_memory_mb),
                 f"    trigger_interval_s: {self.sizing.trigger_s:g}",
                 f"    spark_conf: {json.dumps(self.sizing.spark_conf())}"]
        return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class ClicksSettings:
    """The fixture's arguments and the feed. 25 ms a record (the cost that
    shows Spark's dynamic allocation at work): 15 records/s need 0.4 cores, 60 need 1.5. A file per half second, up
    to 16 files a batch, so that a batch behind can catch up (4 a batch keep pace at a 2 s trigger)."""

    lookup_ms: float = 25.0
    trigger_s: int = 2
    window_s: int = 10
    watermark_s: int = 5
    files_per_s: float = 2.0
    max_files_per_trigger: int = 16
    output_timeout_s: float = 300.0
    script: str = str(DEFAULT_SCRIPT)


class ClicksFileWorkload:
    backlog_basis = "stated"
    latency_source = ("batch end (progress report) minus the landing time of the oldest file the batch read "
                      "(the query checkpoint's source log); processing latency, not the windows' event-time wait")

    def __init__(self, name: str, work_dir: Path, settings: ClicksSettings | None = None):
        self.name = name
        self.settings = settings or ClicksSettings()
        self.trigger_s = float(self.settings.trigger_s)
        self.work_dir = Path(work_dir)
        self.data, self.output, self.checkpoints = self.work_dir / "in", self.work_dir / "out", self.work_dir / "chk"
        self._probe: FileProbe | None = None
        self._seed = 0

    def script_args(self) -> list[str]:
        s = self.settings
        job = UserJobSpec(script=s.script, trigger_s=s.trigger_s, window_s=s.window_s, watermark_s=s.watermark_s,
                          max_files_per_trigger=s.max_files_per_trigger)
        return [*job.script_args(self.data, self.output, self.checkpoints), "--lookup-ms", f"{s.lookup_ms:g}"]

    def apps_yaml(self, shape: AppShape) -> str:
        self.data.mkdir(parents=True, exist_ok=True)  # Spark's file source needs it when the query starts
        lines = [f"\n  - name: {APP}", f"    script: {json.dumps(str(Path(self.settings.script).resolve()))}",
                 f"    args: {json.dumps(self.script_args())}", *_shape_lines(shape), "    shuffle_partitions: 4",
                 f"    trigger_interval_s: {self.settings.trigger_s}"]
        return "\n".join(lines) + "\n"

    def load(self, env: BenchEnv, profile: str, seed: int, tag: str) -> None:
        """Land the profile's records in real time; `tag` keeps each landing's file names apart."""
        self._seed = seed
        land_files(self.data, profile, seed, files_per_s=self.settings.files_per_s, prefix=f"clicks-{tag}",
                   window_s=self.settings.window_s, watermark_s=self.settings.watermark_s)

    def probe(self, cfg: Config) -> FileProbe:
        """One probe for the environment's life: it adds up the queries' rows from their first batch."""
        if self._probe is None:
            self._probe = FileProbe(cfg, cfg.app(APP), self.data)
        return self._probe

    def drained(self, env: BenchEnv) -> bool:
        client = connect_as(env.cfg, OPERATOR)
        try:
            return self.probe(env.cfg).drained(client)
        finally:
            client.close()

    def verify(self, env: BenchEnv) -> Verified:
        """Land the flush file (its event time closes every window), wait for the job to write it
        all, and count what clickcheck finds wrong as records."""
        s = self.settings
        land_files(self.data, "constant:1@1s", seed=self._seed + 1, files_per_s=1.0, flush=True,
                   window_s=s.window_s, watermark_s=s.watermark_s, realtime=False, prefix="clicks-flush")
        check = wait_for_outputs(self.data, self.output, s.window_s, s.watermark_s, timeout_s=s.output_timeout_s)
        lost, duplicated = click_record_losses(check, expected_outputs(self.data, s.window_s, s.watermark_s))
        notes = [] if check.ok else [check.summary()]
        return Verified(lost, duplicated, check.input_records, notes)


def click_record_losses(check: ClickCheck, expected: Expected) -> tuple[int, int]:
    """(records lost, records duplicated) in the fixture's output, the worse of its two queries:
    page_windows (a lost window loses its count, a short one the difference; a window written more
    than once, a count too high or a window not expected duplicates) and user_totals (the same per
    user, in clicks). Findings that are no count (a user listed twice in one batch, a total that
    fell) leave `check.ok` false and are noted, not counted."""
    wrong_w = check.windows_wrong.values()
    w_lost = sum(expected.windows.get(k, 0) for k in check.windows_lost) + sum(max(e - f, 0) for e, f in wrong_w)
    w_dup = (sum(max(f - e, 0) for e, f in wrong_w) + sum(sum(v) - max(v) for v in check.windows_duplicated.values())
             + sum(check.windows_extra.values()))
    wrong_u = check.users_wrong.values()
    u_lost = (sum(expected.users[u][0] for u in check.users_lost if u in expected.users)
              + sum(max(e[0] - f[0], 0) for e, f in wrong_u))
    u_dup = sum(max(f[0] - e[0], 0) for e, f in wrong_u) + sum(t[0] for t in check.users_extra.values())
    return max(w_lost, u_lost), max(w_dup, u_dup)
