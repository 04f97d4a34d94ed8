"""Guard: no scale-up while the executors are mostly idle and the backlog is within its SLO
(`guards.idle_executors_task_time_fraction`).

A policy sizes from per-record rates: DS2's true rate is records over useful time, so a stage
whose tasks are mostly fixed cost (a state store's load and commit, a file's open) reads as slow
per record, and the rate the query must reach multiplies that cost. On clicks-file at 15
records/s, the first windows of a query behind by a few batches held 7 records in 4 tasks of its
stateful stage, 0.16 to 0.48 s each whatever their records: DS2 projected 1.44 busy cores where
the one executor ran tasks 24 % of the window (3.7 s of 15), and asked for a second executor
that one carries at three times the load (issue 33). Such a query waits elsewhere (its driver
plans, lists files and commits between batches; one long task holds its batch): more executors
do not make its batches faster.

So a scale-up is held while the app's executors ran tasks under the configured fraction of the
window (Spark's executor run time over cores x the seconds each executor existed: the snapshot's
`task_time_s` and `present_s`) and the sources' backlog is within `guards.backlog_slo_s` seconds
of input. A backlog above the SLO, or unknown, holds nothing (a scale-up then may be urgent, and
a long batch still running is not in the window's task time yet), nor does a window without
executor figures. Pure."""

from __future__ import annotations

import math

from sparkscale.model.plan import Action
from sparkscale.model.snapshot import Snapshot
from sparkscale.policies.draining import above_slo, lag_text, source_backlog
from sparkscale.policies.guard_input import GuardInput, replace_scale, scale

TASK_TIME_FIGURE = "guard_task_time_fraction"  # the executors' measured busy share this decision saw


def task_time_fraction(snapshot: Snapshot) -> float | None:
    """Seconds the app's executors ran tasks in the window over their cores x the seconds they
    existed in it; None: no executor figures (or none existed in the window)."""
    busy_s = capacity_s = 0.0
    for executor in snapshot.executors:
        run_s, present_s = _seconds(executor.extra.get("task_time_s")), _seconds(executor.extra.get("present_s"))
        if run_s is None or present_s is None or present_s <= 0:
            continue
        busy_s += min(run_s, executor.cores * present_s)
        capacity_s += executor.cores * present_s
    return busy_s / capacity_s if capacity_s > 0 else None


def _seconds(value: object) -> float | None:
    """A finite, non-negative number of seconds from a snapshot's figures (input: anything else is None)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        return None
    return float(value)


def idle_executors(actions: list[Action], given: GuardInput, fraction: float | None, slo_s: float,
                   notes: list[str], figures: dict[str, float]) -> list[Action]:
    """`actions` without a scale-up while the executors ran tasks under `fraction` of the window and
    the backlog is within `slo_s` seconds of input; records the measured share in `figures`."""
    if fraction is None:
        return actions
    busy = task_time_fraction(given.snapshot)
    if busy is None:
        return actions
    figures[TASK_TIME_FIGURE] = round(busy, 4)
    action = scale(actions)
    if action is None or action.executor_direction <= 0 or busy >= fraction:
        return actions
    seen = source_backlog(given.snapshot)
    if seen is None:
        return actions
    backlog, rate = seen
    if above_slo(backlog, rate, slo_s):
        return actions
    notes.append(f"guard idle executors: {action.summary()} held: the executors ran tasks {busy:.0%} of the "
                 f"window (under {fraction:.0%}) and the backlog, {backlog:g} records ({lag_text(backlog, rate)}), "
                 f"is within the {slo_s:g} s SLO: more executors would not make the batches faster")
    return replace_scale(actions, None)
