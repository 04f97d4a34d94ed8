"""A task's fixed cost apart from its per-record cost, fitted over one operator's tasks (issue 33).

DS2's true rate (lecture, "True processing rates": λp = R_prc / W_u) assumes a task's useful time
grows in proportion to its records. A micro-batch task also pays a fixed cost (open a file, run the
pipeline, write a shuffle block for every partition, load and commit state) whatever its records,
so its useful time is `f + v * records`. At a higher rate the batches get bigger, not more numerous
(one batch per trigger), so only the `v` part grows; with few records per task the linear model
takes the fixed cost for a per-record one and over-provisions (2.15x on the clicks-file workload).

In a snapshot a non-source operator's instances are one per task in the window
(monitors/snapshot_builder.py `_instance`), so `f` and `v` are fitted by ordinary least squares over
them, only when there are enough tasks and their record counts differ enough to tell f from v.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sparkscale.model.snapshot import InstanceFigures

MIN_TASKS = 6  # tasks with useful time > 0 needed for a fit
MIN_DISTINCT_COUNTS = 3  # distinct record counts among them
MIN_SPREAD = 0.5  # (max - min records) over the mean records, at least


@dataclass(frozen=True)
class TaskOverhead:
    """`useful_time_s = f_s + v_s_per_record * records` over an operator's `tasks` measured tasks.

    Not fitted (`why_not` says why): f_s = 0, and DS2 is the plain linear model."""

    f_s: float  # per-task overhead, seconds
    v_s_per_record: float  # seconds per record net of f_s: Σ (useful - f) / Σ records (0: not fitted)
    tasks: int  # tasks with useful time > 0
    why_not: str = ""  # empty: fitted

    @property
    def fitted(self) -> bool:
        """Whether f and v were fitted (else `why_not` says why)."""
        return not self.why_not

    @property
    def variable_rate(self) -> float:
        """Records/s one instance processes net of the overhead: Σ records / Σ (useful - f)."""
        return 1.0 / self.v_s_per_record if self.v_s_per_record > 0 else 0.0


def fit_task_overhead(instances: Sequence[InstanceFigures]) -> TaskOverhead:
    """f and v by least squares over the tasks with useful time > 0, f clamped to [0, the shortest
    task's useful time]; a non-positive slope puts all of the shortest task in f and the rest in v.
    v is then the aggregate remainder Σ (useful - f) / Σ records, which equals the least-squares
    slope whenever f was not clamped."""
    tasks = [(i.records_in, i.useful_time_s) for i in instances if i.useful_time_s > 0]
    n = len(tasks)
    if n < MIN_TASKS:
        return TaskOverhead(0.0, 0.0, n, f"tasks measured: {n}, fewer than {MIN_TASKS}")
    records = [r for r, _t in tasks]
    times = [t for _r, t in tasks]
    mean_r = sum(records) / n
    distinct = len(set(records))
    if distinct < MIN_DISTINCT_COUNTS or max(records) - min(records) < MIN_SPREAD * mean_r or mean_r <= 0:
        return TaskOverhead(0.0, 0.0, n,
                            f"record counts do not spread ({num_range(records)}, {distinct} distinct)")
    mean_t = sum(times) / n
    sxx = sum((r - mean_r) ** 2 for r in records)
    sxy = sum((r - mean_r) * (t - mean_t) for r, t in tasks)
    slope = sxy / sxx
    shortest = min(times)
    f_s = shortest if slope <= 0 else min(max(mean_t - slope * mean_r, 0.0), shortest)
    remainder = sum(times) - n * f_s
    if remainder <= 0:
        return TaskOverhead(0.0, 0.0, n, "the tasks' times do not grow with their records")
    return TaskOverhead(f_s, remainder / sum(records), n)


def num_range(values: Sequence[float]) -> str:
    """'min to max records' for an explanation."""
    return f"{min(values):g} to {max(values):g} records"
