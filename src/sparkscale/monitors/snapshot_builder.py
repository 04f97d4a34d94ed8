"""From what the monitors read (Spark REST, progress reports, psutil) to a Snapshot v1 of one query. Pure.

Executors. Each with its host (from Spark's `hostPort`), cores, and its CPU and memory from Spark's
metrics (`executor_figures.py`), so they hold for executors on any host; `extensions["app"]` sums
them for the app. psutil's figures describe the daemon's own host only (`extensions["host"]`).

Operators. A micro-batch runs the query's stages one after another; the k-th COMPLETE stage of a
batch (in stage id order: Spark numbers parent stages before their children, and later jobs after
earlier ones) is operator `stage{k}`. Batches whose stage count differs from the majority in the
window (a first batch that also read state, a batch still missing its last job) are left out, and
named in `extensions["monitor"]["excluded_batches"]`. Stages that were SKIPPED (already computed
in the batch) ran no task and are not operators.

Instances. One instance per task over the window (a task is one partition of a stage in one
batch): records in = input records + shuffle records read, records out = shuffle records written +
output records written, useful time = executor run time less shuffle fetch wait (DS2's W_u: time
not spent waiting for input). A last stage that writes nothing Spark measures (a `foreachBatch`
sink collects to the driver) passes its input on: records out = records in.

The virtual source operator (`source_figures.py`): one instance per source partition (else per
source) with records in = records out = the rows read in the window and useful time = the window, so
its true rate is the rate observed, not a capacity (a source has no processing time to measure), and
its selectivity is 1. `arrival_rate` and `backlog` come from the sources' reports; which estimate
each rests on (and "backlog unknown") is in `extensions["source"]`.
"""

from __future__ import annotations

import itertools
import statistics
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import JsonValue

from sparkscale.model.snapshot import InstanceFigures, OperatorFigures, Snapshot
from sparkscale.monitors.executor_figures import ExecutorWork, app_extension, executor_figures, window_work
from sparkscale.monitors.progress_reports import ProgressReport
from sparkscale.monitors.source_figures import SourceEstimate, WindowBatch, estimate_sources
from sparkscale.monitors.spark_rest import BatchRef, RestExecutor, RestJob, RestStage, RestTask

__all__ = ["SOURCE_OPERATOR", "Batch", "ProgressReport", "SnapshotInputs", "build_snapshot", "completed_stages",
           "finished_batches", "window_batches"]

SOURCE_OPERATOR = "source"


@dataclass(frozen=True)
class Batch:
    """One finished micro-batch of the query, from its jobs."""

    run_id: str
    batch_id: int
    job_ids: tuple[int, ...]
    stage_ids: tuple[int, ...]  # every stage its jobs name, SKIPPED ones included
    submitted_at_s: float
    completed_at_s: float

    @property
    def duration_s(self) -> float:
        return self.completed_at_s - self.submitted_at_s


def finished_batches(
    jobs: Sequence[RestJob], query: str, progress_batches: Sequence[tuple[str, int]] = (),
    query_id: str | None = None,
) -> list[Batch]:
    """The query's micro-batches whose every job succeeded, oldest first. A job belongs to the query
    by its name, or by `query_id` (an unnamed query's jobs carry an empty name).

    A batch's next job may not be submitted yet when we look, so a batch counts as finished only if
    the query reported its progress, or a later batch of the same run has started.
    """
    grouped: dict[tuple[str, int], list[RestJob]] = defaultdict(list)
    for job, batch in _jobs_of(jobs, query, query_id):
        grouped[(batch.run_id, batch.batch_id)].append(job)
    latest_by_run: dict[str, int] = {}
    for run_id, batch_id in grouped:
        latest_by_run[run_id] = max(batch_id, latest_by_run.get(run_id, batch_id))
    reported = set(progress_batches)
    out: list[Batch] = []
    for (run_id, batch_id), batch_jobs in grouped.items():
        if any(j.status != "SUCCEEDED" or j.completed_at_s is None or j.submitted_at_s is None for j in batch_jobs):
            continue
        if (run_id, batch_id) not in reported and batch_id >= latest_by_run[run_id]:
            continue
        stage_ids = sorted({s for j in batch_jobs for s in j.stage_ids})
        out.append(Batch(
            run_id=run_id, batch_id=batch_id, job_ids=tuple(sorted(j.job_id for j in batch_jobs)),
            stage_ids=tuple(stage_ids),
            submitted_at_s=min(j.submitted_at_s for j in batch_jobs if j.submitted_at_s is not None),
            completed_at_s=max(j.completed_at_s for j in batch_jobs if j.completed_at_s is not None),
        ))
    return sorted(out, key=lambda b: (b.completed_at_s, b.batch_id))


def _jobs_of(jobs: Sequence[RestJob], query: str, query_id: str | None) -> list[tuple[RestJob, BatchRef]]:
    """The query's micro-batch jobs with their batch: by its name, or by `query_id` (an unnamed
    query's jobs carry an empty name)."""
    return [(j, j.batch) for j in jobs
            if j.batch is not None and (j.batch.query == query or (query_id and j.batch.query_id == query_id))]


def batch_running_since(jobs: Sequence[RestJob], query: str, query_id: str | None = None) -> float | None:
    """When the query's oldest running micro-batch job was submitted (None: none runs). A query with
    no batch in the window and one running since before it has a batch longer than the window;
    with none running it waits for its trigger (policies/unmeasured_query.py)."""
    running = [j.submitted_at_s for j, _batch in _jobs_of(jobs, query, query_id)
               if j.status == "RUNNING" and j.submitted_at_s is not None]
    return min(running) if running else None


def window_batches(batches: Sequence[Batch], taken_at: float, window_s: float) -> list[Batch]:
    """The batches whose jobs all completed within (taken_at - window_s, taken_at]."""
    return [b for b in batches if taken_at - window_s < b.completed_at_s <= taken_at]


def completed_stages(batch: Batch, stages: Mapping[int, Sequence[RestStage]]) -> list[RestStage]:
    """The batch's COMPLETE stage attempts in stage id order (the last attempt if one was retried).

    SKIPPED stages (outputs already computed earlier in the batch) ran no task: left out."""
    out: list[RestStage] = []
    for stage_id in batch.stage_ids:
        complete = [a for a in stages.get(stage_id, ()) if a.status == "COMPLETE"]
        if complete:
            out.append(max(complete, key=lambda a: a.attempt_id))
    return out


@dataclass(frozen=True)
class SnapshotInputs:
    """Everything the builder needs for one query over one window (the collector fills it in)."""

    app: str
    query: str
    taken_at: float
    window_s: float
    executors: Sequence[RestExecutor]
    batches: Sequence[Batch]  # finished batches; the builder selects the window's
    stages: Mapping[int, Sequence[RestStage]]  # stage id -> attempts, for the window's batches
    progress: Sequence[ProgressReport] = ()  # the query's reports over the window (and a little before)
    trigger_interval_s: float | None = None
    host: Mapping[str, Any] | None = None  # extensions["host"]: the daemon's host
    app_figures: Mapping[str, Any] | None = None  # extensions["app"]; default: from the executors' figures
    # Executor id -> its tasks' work in the window; default: from the tasks in `stages` (the collector
    # passes every stage it fetched for the app, so the figures cover all its queries).
    executor_work: Mapping[str, ExecutorWork] | None = None
    extra_extensions: Mapping[str, Any] = field(default_factory=dict)
    batch_running_since_s: float | None = None  # `batch_running_since`: a batch of the query still running


def build_snapshot(inputs: SnapshotInputs) -> Snapshot:
    """The Snapshot v1 of the query (module docstring for what each figure means)."""
    in_window = window_batches(inputs.batches, inputs.taken_at, inputs.window_s)
    stages_of = {(b.run_id, b.batch_id): completed_stages(b, inputs.stages) for b in in_window}
    counts = Counter(len(s) for s in stages_of.values() if s)
    # Ties go to the larger count, so that a window of half-seen batches does not lose an operator.
    majority = max(counts.items(), key=lambda kv: (kv[1], kv[0]))[0] if counts else 0
    used = [b for b in in_window if len(stages_of[(b.run_id, b.batch_id)]) == majority and majority > 0]
    excluded = [{"run_id": b.run_id, "batch": b.batch_id, "stages": len(stages_of[(b.run_id, b.batch_id)])}
                for b in in_window if b not in used]

    progress = _progress_by_batch(inputs.progress)
    used_progress = [progress[(b.run_id, b.batch_id)] for b in used if (b.run_id, b.batch_id) in progress]

    stage_ops = [_stage_operator(k, [stages_of[(b.run_id, b.batch_id)][k] for b in used], last=k == majority - 1)
                 for k in range(majority)]
    source = estimate_sources(
        [_window_batch(progress.get((b.run_id, b.batch_id)), stages_of[(b.run_id, b.batch_id)]) for b in used],
        inputs.progress, inputs.taken_at, inputs.window_s)
    source_op = _source_operator(source, inputs.window_s)
    operators = [source_op, *stage_ops]
    ids = [op.id for op in operators]

    extensions: dict[str, Any] = {
        "monitor": {
            "batches": [b.batch_id for b in used],
            "runs": sorted({b.run_id for b in used}),
            "batches_in_window": len(in_window),
            "stage_count": majority,
            "excluded_batches": excluded,
            "source_records_from": dict(source.records_from),  # batches counted each way
            "batch_running_since_s": inputs.batch_running_since_s,
        },
        "progress": _progress_summary(used_progress, run_first_batch(inputs.progress)),
        "source": source.extension(),
    }
    if inputs.host is not None:
        extensions["host"] = dict(inputs.host)
    work = inputs.executor_work
    if work is None:
        work = window_work(inputs.stages, inputs.taken_at, inputs.window_s)
    app_figures = inputs.app_figures
    if app_figures is None:
        app_figures = app_extension(inputs.executors, work, inputs.taken_at, inputs.window_s)
    extensions["app"] = dict(app_figures)
    extensions.update(inputs.extra_extensions)

    return Snapshot(
        app=inputs.app, query=inputs.query, taken_at=inputs.taken_at, window_s=inputs.window_s,
        executors=executor_figures(inputs.executors, work, inputs.taken_at, inputs.window_s),
        operators=tuple(operators), edges=tuple(itertools.pairwise(ids)),
        trigger_interval_s=inputs.trigger_interval_s, batch_duration_s=_batch_duration_s(used, used_progress),
        extensions=extensions,
    )


def _stage_operator(k: int, per_batch: Sequence[RestStage], last: bool) -> OperatorFigures:
    instances = [_instance(stage, task) for stage in per_batch for task in stage.tasks if task.status == "SUCCESS"]
    extra: dict[str, Any] = {"stage_name": per_batch[-1].name, "spark_stage_id": per_batch[-1].stage_id}
    if last and instances and not any(i.records_out for i in instances):
        # A foreachBatch sink collects to the driver: no output metrics. The stage passes its input on.
        instances = [InstanceFigures(i.records_in, i.records_in, i.useful_time_s, i.executor, i.extra)
                     for i in instances]
        extra["records_out_from"] = "records_in"
    return OperatorFigures(id=f"stage{k}", parallelism=max(per_batch[-1].num_tasks, 1),
                           instances=tuple(instances), extra=extra)


def _instance(stage: RestStage, task: RestTask) -> InstanceFigures:
    # Useful time: run time less time blocked fetching shuffle input (DS2's W_u).
    useful_ms = max(task.run_time_ms - task.fetch_wait_ms, 0.0)
    return InstanceFigures(
        records_in=task.input_records + task.shuffle_read_records,
        records_out=task.shuffle_write_records + task.output_records,
        useful_time_s=useful_ms / 1000.0,
        executor=task.executor_id or None,
        extra={"stage_id": stage.stage_id, "partition": task.index},
    )


def _window_batch(report: ProgressReport | None, stages: Sequence[RestStage]) -> WindowBatch:
    """A used batch for the source figures: its report, else what its first stage's tasks read
    (one input partition each)."""
    if report is not None or not stages:
        return WindowBatch(report)
    return WindowBatch(None, tuple((t.index, t.input_records) for t in stages[0].tasks if t.status == "SUCCESS"))


def _source_operator(source: SourceEstimate, window_s: float) -> OperatorFigures:
    """The virtual source: its true rate is its observed rate by construction (module docstring)."""
    single = len({key.source for key, _rows in source.instances}) <= 1
    instances = []
    for key, rows in source.instances:
        extra: dict[str, Any] = {} if single else {"source": key.source}
        if key.partition is not None:
            extra["partition"] = int(key.partition) if key.partition.isdigit() else key.partition
        instances.append(InstanceFigures(rows, rows, window_s, None, extra))
    return OperatorFigures(
        id=SOURCE_OPERATOR, source=True, parallelism=max(len(instances), 1), instances=tuple(instances),
        arrival_rate=source.arrival_rate, backlog=source.backlog_records,
        extra={"arrival_estimate": source.arrival_estimate, "backlog_estimate": source.backlog_estimate,
               **source.brought_forward()},
    )


def _progress_by_batch(reports: Sequence[ProgressReport]) -> dict[tuple[str, int], ProgressReport]:
    """The report of each batch: the one with the most input rows, the later one on a tie (Spark's
    own no-data progress may repeat the last batch's id with no rows). The agent's idle samples
    (`idle`) are no batch's report: left out."""
    out: dict[tuple[str, int], ProgressReport] = {}
    for r in reports:
        if r.idle:
            continue
        key = (r.run_id, r.batch_id)
        if key not in out or r.num_input_rows >= out[key].num_input_rows:
            out[key] = r
    return out


def _batch_duration_s(used: Sequence[Batch], reports: Sequence[ProgressReport]) -> float | None:
    """Median batch duration: the query's own (triggerExecution), else first job start to last job end."""
    durations = [r.batch_duration_ms / 1000.0 for r in reports if r.batch_duration_ms is not None]
    if not durations:
        durations = [b.duration_s for b in used]
    return statistics.median(durations) if durations else None


def run_first_batch(reports: Sequence[ProgressReport]) -> int | None:
    """The first batch id of the query's current run (the newest report's), when the reports read
    show the run begin: a report of an earlier run among them, or the run's batch 0 (a new
    checkpoint); None otherwise. A restarted query keeps its checkpoint's batch ids, with a new run
    id (policies/startup_grace.py reads it). An idle sample tells the run, not a batch."""
    if not reports:
        return None
    newest = max(reports, key=lambda r: (r.published_at_s or r.at_s or 0.0, r.batch_id))
    first = min((r.batch_id for r in reports if r.run_id == newest.run_id and not r.idle), default=None)
    began = first == 0 or any(r.run_id != newest.run_id for r in reports)
    return first if began else None


def _progress_summary(reports: Sequence[ProgressReport], first_batch: int | None = None) -> dict[str, JsonValue]:
    def mean(values: list[float]) -> float | None:
        return statistics.fmean(values) if values else None

    summary: dict[str, Any] = {
        "batches": len(reports),
        "num_input_rows": sum(r.num_input_rows for r in reports),
        "input_rows_per_s": mean([r.input_rows_per_s for r in reports if r.input_rows_per_s is not None]),
        "processed_rows_per_s": mean([r.processed_rows_per_s for r in reports if r.processed_rows_per_s is not None]),
    }
    timed = [r for r in reports if r.batch_duration_ms is not None]
    if timed:
        longest = max(timed, key=lambda r: r.batch_duration_ms or 0.0)
        summary["longest_batch_s"] = (longest.batch_duration_ms or 0.0) / 1000.0  # a stall shows as one long batch
        if longest.at_s is not None:  # its end, so that daemon/downtime_tracker counts it for the right action
            summary["longest_batch_ended_at_s"] = longest.at_s + summary["longest_batch_s"]
    if first_batch is not None:
        summary["run_first_batch_id"] = first_batch
    if reports:
        latest = max(reports, key=lambda r: r.batch_id)
        summary["latest_batch_id"] = latest.batch_id
        if latest.state_rows_total is not None:
            summary["state_rows_total"] = latest.state_rows_total
        if latest.state_partitions is not None:
            summary["state_partitions"] = latest.state_partitions
        if latest.state_memory_bytes is not None:
            summary["state_memory_bytes"] = latest.state_memory_bytes
    return summary
