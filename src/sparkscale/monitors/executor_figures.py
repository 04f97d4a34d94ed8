"""Each executor's CPU and memory over the window, from Spark's own metrics. Pure.

Spark measures every executor wherever it runs, so these figures hold on any number of hosts; psutil
(`monitors/host.py`) sees only the daemon's host and now describes that host alone.

CPU. An executor's CPU-seconds in the window are the CPU time Spark measured for its tasks
(`executorCpuTime` + `executorDeserializeCpuTime`, the task thread's CPU in the executor JVM, RocksDB
state work included), each task counted by the share of its run that falls inside the window (all of
it when Spark gives no launch time). Its `cpu_fraction` is that over cores x the seconds of the
window it existed. Python workers (PySpark UDFs, Python data sources) run in their own processes and
their CPU is not in Spark's task metrics: `task_time_fraction` (executor run time, the same way) is
how busy its task slots were, whatever kept them busy.

The tasks are those of the stages the monitor fetched: the window's finished micro-batches of the
queries it observes. Work of a batch still running when the snapshot is taken is not counted yet.

Memory. Spark's storage memory used / available (current), and the peaks its heartbeats report:
JVM heap and off-heap, and with `spark.executor.processTreeMetrics.enabled` the RSS of the
executor's process tree (JVM, Python workers, other children). Spark keeps no current value of
those, only the highest since the executor started. Spark's REST API does not report the JVM's
maximum heap (-Xmx, which is `spark.executor.memory`): `heap_max_bytes` is None, "not measured".

GC. The JVM's GC pauses during the window's tasks (`jvmGcTime`, each task counted by the same share
as its CPU) over their run time: `gc_time_fraction`, the share of executor time GC took (Spark's
Executors page flags an executor whose GC time is above 10 % of its task time).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import JsonValue

from sparkscale.model.snapshot import ExecutorFigures
from sparkscale.monitors.spark_rest import RestExecutor, RestStage, RestTask

FINISHED = ("SUCCESS", "FAILED", "KILLED")  # a running task's metrics are not final


@dataclass(frozen=True)
class ExecutorWork:
    """What one executor's tasks did inside the window."""

    tasks: int = 0
    cpu_s: float = 0.0
    run_s: float = 0.0
    shuffle_write_bytes: float = 0.0
    remote_read_bytes: float = 0.0  # shuffle bytes fetched from executors on other hosts
    local_read_bytes: float = 0.0  # ... from this host's
    gc_s: float = 0.0  # the JVM's GC pauses during those tasks

    def plus(self, task: RestTask, share: float) -> ExecutorWork:
        """Add `share` (0..1: how much of its run fell in the window) of a finished task."""
        return ExecutorWork(self.tasks + 1, self.cpu_s + task.cpu_time_ns / 1e9 * share,
                            self.run_s + task.run_time_ms / 1e3 * share,
                            self.shuffle_write_bytes + task.shuffle_write_bytes * share,
                            self.remote_read_bytes + task.remote_bytes_read * share,
                            self.local_read_bytes + task.local_bytes_read * share,
                            self.gc_s + task.jvm_gc_time_ms / 1e3 * share)


def window_work(stages: Mapping[int, Sequence[RestStage]], taken_at: float, window_s: float) -> dict[str, ExecutorWork]:
    """Executor id -> the work of its finished tasks in (taken_at - window_s, taken_at], each task once."""
    start = taken_at - window_s
    seen: set[int] = set()
    work: dict[str, ExecutorWork] = {}
    for attempts in stages.values():
        for stage in attempts:
            for task in stage.tasks:
                if task.status not in FINISHED or not task.executor_id or task.task_id in seen:
                    continue
                seen.add(task.task_id)
                share = _share_in(task, start, taken_at)
                if share <= 0:
                    continue
                current = work.get(task.executor_id, ExecutorWork())
                work[task.executor_id] = current.plus(task, share)
    return work


def _share_in(task: RestTask, start: float, end: float) -> float:
    """The part of the task's run inside [start, end]: 1 when Spark does not date it."""
    if task.launched_at_s is None or task.duration_ms is None:
        return 1.0
    began, finished = task.launched_at_s, task.launched_at_s + task.duration_ms / 1e3
    if finished <= began:
        return 1.0 if start < began <= end else 0.0
    return max(min(finished, end) - max(began, start), 0.0) / (finished - began)


def present_s(executor: RestExecutor, taken_at: float, window_s: float) -> float:
    """Seconds of the window the executor existed (all of it when Spark does not say when it came)."""
    if executor.added_at_s is None:
        return window_s
    return min(max(taken_at - executor.added_at_s, 0.0), window_s)


def _fraction(seconds: float, cores: int, present: float) -> float | None:
    if cores <= 0 or present <= 0:
        return None
    return round(min(seconds / (cores * present), 1.0), 4)


def executor_figures(executors: Sequence[RestExecutor], work: Mapping[str, ExecutorWork], taken_at: float,
                     window_s: float) -> tuple[ExecutorFigures, ...]:
    """The snapshot's `executors`: id, host, cores, and their Spark figures (module docstring)."""
    out = []
    for e in executors:
        done = work.get(e.id, ExecutorWork())
        present = present_s(e, taken_at, window_s)
        extra: dict[str, Any] = {
            "host_port": e.host_port or None,
            "cpu_fraction": _fraction(done.cpu_s, e.cores, present),
            "task_time_fraction": _fraction(done.run_s, e.cores, present),
            "cpu_s": round(done.cpu_s, 3),
            "task_time_s": round(done.run_s, 3),
            "tasks": done.tasks,
            "shuffle_write_bytes": round(done.shuffle_write_bytes),
            "shuffle_remote_read_bytes": round(done.remote_read_bytes),
            "shuffle_local_read_bytes": round(done.local_read_bytes),
            "present_s": round(present, 3),
            "total_task_time_s": round(e.total_task_time_ms / 1e3, 3),
            "total_gc_time_s": round(e.total_gc_time_ms / 1e3, 3),
            "gc_time_s": round(done.gc_s, 3),
            "gc_time_fraction": _gc_fraction(done.gc_s, done.run_s),
            "memory": _memory(e),
        }
        out.append(ExecutorFigures(e.id, e.host, max(e.cores, 1), extra))
    return tuple(out)


def _gc_fraction(gc_s: float, run_s: float) -> float | None:
    """GC time over task run time in [0, 1]; None when no task ran."""
    return round(min(gc_s / run_s, 1.0), 4) if run_s > 0 else None


def _memory(e: RestExecutor) -> dict[str, Any] | None:
    m = e.memory
    if m is None:
        return None
    return {
        "storage_used_bytes": m.storage_used_bytes,
        "storage_total_bytes": m.storage_total_bytes,
        "peak_jvm_heap_bytes": m.peak_jvm_heap_bytes,
        "peak_jvm_offheap_bytes": m.peak_jvm_offheap_bytes,
        "peak_rss_bytes": m.peak_rss_bytes,
        "peak_python_rss_bytes": m.peak_python_rss_bytes,
    }


def app_extension(executors: Sequence[RestExecutor], work: Mapping[str, ExecutorWork], taken_at: float,
                  window_s: float) -> dict[str, JsonValue]:
    """`extensions["app"]`: the app's executors together, on every host. `cpu_fraction` is CPU time
    over cores x window in [0, 1] and `memory_fraction` storage memory used / available, as the
    threshold policy reads them; None when the app holds no executor."""
    slot_s = sum(e.cores * present_s(e, taken_at, window_s) for e in executors)
    cpu_s = sum(work.get(e.id, ExecutorWork()).cpu_s for e in executors)
    run_s = sum(work.get(e.id, ExecutorWork()).run_s for e in executors)
    memories = [e.memory for e in executors if e.memory is not None]
    storage_total = sum(m.storage_total_bytes for m in memories)
    rss = [m.peak_rss_bytes for m in memories]
    hosts: dict[str, int] = {}
    for e in executors:
        hosts[e.host] = hosts.get(e.host, 0) + 1
    gc_s = sum(work.get(e.id, ExecutorWork()).gc_s for e in executors)
    heaps = [m.peak_jvm_heap_bytes for m in memories if m.peak_jvm_heap_bytes is not None]
    return {
        "cpu_fraction": round(min(cpu_s / slot_s, 1.0), 4) if slot_s > 0 else None,
        "cpu_cores_busy": round(cpu_s / window_s, 4),
        "task_time_fraction": round(min(run_s / slot_s, 1.0), 4) if slot_s > 0 else None,
        "memory_fraction": (round(sum(m.storage_used_bytes for m in memories) / storage_total, 4)
                            if storage_total > 0 else None),
        "peak_rss_bytes": sum(r for r in rss if r is not None) if rss and None not in rss else None,
        "executors": len(executors),
        "hosts": dict(sorted(hosts.items())),
        # Memory and GC (model/snapshot.py's MemoryFigures reads them): the executor nearest its
        # heap's end, storage memory over all, GC over the window's task time.
        "heap_used_bytes": max(heaps) if heaps else None,
        "heap_max_bytes": None,  # not measured: Spark's REST API does not report -Xmx
        "storage_used_bytes": sum(m.storage_used_bytes for m in memories) if memories else None,
        "storage_total_bytes": storage_total if memories else None,
        "gc_time_s": round(gc_s, 3),
        "gc_time_fraction": _gc_fraction(gc_s, run_s),
        "figures_from": "spark",
    }
