"""Guard: no scale-down while the backlog is above its SLO or draining (`guards.no_scale_down_while_draining`).

A backlog that falls is falling because of the cores the app holds: taking some away mid-drain
stretches the catch-up, and DS2's need drops as soon as the arrival rate does, not when the
backlog is gone (Flink's autoscaler holds scale-downs while catching up for the same reason).
"Above the SLO": more than `guards.backlog_slo_s` seconds of input wait (backlog / arrival rate,
as `sparkscale bench scaling` counts SLO seconds). "Draining": above the backlog a healthy
micro-batch source always has (figures.py `usual_backlog`, a few batches' worth of arrivals) and
below what it was one window ago, as the decision history recorded it (this guard records the
backlog in each plan's observation, `BACKLOG_FIGURE`). Within the usual backlog a reading swings
with the batch cycle's phase and a file source's whole files, and "falling" was that noise: on
clicks-file it held scale-downs at 52 -> 44 records, 1.5 s of input (issue 33). An unknown backlog
holds nothing. Pure."""

from __future__ import annotations

from sparkscale.model.plan import Action
from sparkscale.model.snapshot import Snapshot
from sparkscale.policies.figures import usual_backlog
from sparkscale.policies.guard_input import GuardInput, replace_scale, scale
from sparkscale.policies.history import DecisionHistory

BACKLOG_FIGURE = "guard_backlog_records"  # the sources' backlog this decision saw


def source_backlog(snapshot: Snapshot) -> tuple[float, float] | None:
    """(records waiting, arrival rate in records/s) over the snapshot's sources; None: a backlog
    unknown."""
    sources = [op for op in snapshot.operators if op.source]
    if not sources or any(op.backlog is None for op in sources):
        return None
    return sum(op.backlog or 0.0 for op in sources), sum(op.arrival_rate or 0.0 for op in sources)


def above_slo(backlog: float, rate: float, slo_s: float) -> bool:
    """Whether `backlog` records are more than `slo_s` seconds of input at `rate` records/s (any
    backlog is, when nothing arrives)."""
    return backlog > 0 and (rate <= 0 or backlog / rate > slo_s)


def lag_text(backlog: float, rate: float) -> str:
    """The backlog in seconds of input, for an explanation."""
    return f"{backlog / rate:.1f} s of input" if rate > 0 else "no input arriving"


def backlog_before(history: DecisionHistory, now: float, window_s: float) -> tuple[float, float] | None:
    """(when, backlog) as recorded one window before `now`: the newest record at least a window
    old, else the oldest younger one; None: none recorded."""
    recorded = [(d.decided_at, d.observation.figure(BACKLOG_FIGURE)) for d in history]
    known = [(at, float(value)) for at, value in recorded if value is not None and at < now]
    older = [r for r in known if r[0] <= now - window_s]
    if older:
        return older[-1]
    return known[0] if known else None


def draining(actions: list[Action], given: GuardInput, slo_s: float, notes: list[str],
             figures: dict[str, float]) -> list[Action]:
    """`actions` without a scale-down while the backlog is above `slo_s`, or above the usual
    backlog and falling; records the backlog in `figures`."""
    seen = source_backlog(given.snapshot)
    if seen is None:
        return actions
    backlog, rate = seen
    figures[BACKLOG_FIGURE] = backlog
    action = scale(actions)
    if action is None or action.executor_direction >= 0 or backlog <= 0:
        return actions
    if above_slo(backlog, rate, slo_s):
        notes.append(f"guard draining: {action.summary()} held: the backlog, {backlog:g} records "
                     f"({lag_text(backlog, rate)}), is above the {slo_s:g} s SLO")
        return replace_scale(actions, None)
    if backlog <= usual_backlog(given.snapshot, given.app, rate):
        return actions  # the batch cycle's phase, not a drain
    before = backlog_before(given.history, given.now, given.snapshot.window_s)
    if before is None or before[1] <= backlog:
        return actions
    notes.append(f"guard draining: {action.summary()} held: the backlog is draining ({before[1]:g} -> {backlog:g} "
                 f"records over the last {given.now - before[0]:g} s)")
    return replace_scale(actions, None)
