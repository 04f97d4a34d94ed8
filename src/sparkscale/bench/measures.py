"""What a scaling run is judged by, computed from its samples: pure functions, no I/O.

The figures (`sparkscale bench scaling`): scaling actions, time to converge after each load change,
SLO-violation seconds, peak backlog, executor-core-seconds, over-provisioning against a calibrated
need, and direction changes (oscillation). Lost and duplicated records come from the verifier.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass

from sparkscale.bench.timeline import Sample
from sparkscale.pipeline.profiles import LoadProfile, StepsProfile


@dataclass(frozen=True)
class Segment:
    """A stretch of constant load: [start_s, end_s) at `rate` records/s."""

    start_s: float
    end_s: float
    rate: float


@dataclass(frozen=True)
class ScalingAction:
    """One change of the executor count (or of a query's partitions) and when it was asked for."""

    t_s: float
    kind: str  # scale_executors | set_parallelism
    from_: int
    to: int
    done: bool = True

    @property
    def direction(self) -> int:
        return (self.to > self.from_) - (self.to < self.from_)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class SloLimits:
    """A sample violates the SLO when its last batch took longer than `batch_limit_ms` (the trigger
    interval: the query falls behind its schedule) or its backlog exceeds `backlog_s` seconds of
    the current input rate (and at least `backlog_floor_records`)."""

    batch_limit_ms: float
    backlog_s: float = 10.0
    backlog_floor_records: int = 50

    def backlog_limit(self, rate: float) -> float:
        return max(self.backlog_s * rate, self.backlog_floor_records)


@dataclass(frozen=True)
class RunMeasures:
    scaling_actions: int
    convergence_s: tuple[float | None, ...]  # one per segment, from its start
    slo_violation_s: float
    slo_batch_s: float
    slo_backlog_s: float
    peak_backlog_records: int
    executor_core_s: float
    needed_core_s: float | None
    over_provisioning: float | None  # executor_core_s / needed_core_s
    under_provisioned_s: float | None  # seconds with fewer cores than the calibrated need
    direction_changes: int

    def to_dict(self) -> dict:
        return asdict(self)


def segments(profile: LoadProfile) -> list[Segment]:
    """The constant-load stretches of a bounded profile (one per step; one for any other shape)."""
    if profile.duration_s is None:
        raise ValueError(f"profile {profile.spec!r} never ends; a benchmark needs a bounded profile")
    if isinstance(profile, StepsProfile):
        out, t = [], 0.0
        for step in profile.steps:
            out.append(Segment(t, t + (step.duration_s or 0.0), step.rate_per_s))
            t += step.duration_s or 0.0
        return out
    return [Segment(0.0, profile.duration_s, profile.records_by(profile.duration_s) / profile.duration_s)]


def _durations(samples: Sequence[Sample], end_s: float) -> list[float]:
    """How long each sample stands for: until the next sample (the last one until `end_s`)."""
    ts = [s.t_s for s in samples]
    return [max(min(b, end_s) - a, 0.0) for a, b in zip(ts, [*ts[1:], max(end_s, ts[-1] if ts else 0)], strict=True)]


def filled_cores(samples: Sequence[Sample]) -> list[int]:
    """Cores per sample, an unknown (the REST API did not answer) taking the last known value."""
    out, last = [], 0
    for s in samples:
        last = s.cores if s.cores is not None else last
        out.append(last)
    return out


def observed_actions(samples: Sequence[Sample], merge_s: float = 10.0) -> list[ScalingAction]:
    """Executor-count changes as seen in the samples, for controllers that log no actions (Spark's
    dynamic allocation). Changes in one direction less than `merge_s` apart count as one action."""
    out: list[ScalingAction] = []
    last: int | None = None
    for s in samples:
        if s.executors is None:
            continue
        if last is not None and s.executors != last:
            change = ScalingAction(s.t_s, "scale_executors", last, s.executors)
            prev = out[-1] if out else None
            if prev and prev.direction == change.direction and s.t_s - prev.t_s < merge_s:
                out[-1] = ScalingAction(prev.t_s, prev.kind, prev.from_, s.executors)
            else:
                out.append(change)
        last = s.executors
    return out


def direction_changes(actions: Sequence[ScalingAction]) -> int:
    """How often the executor count turned around (up then down, or down then up): oscillation."""
    dirs = [a.direction for a in actions if a.kind == "scale_executors" and a.done and a.direction]
    return sum(1 for a, b in zip(dirs, dirs[1:], strict=False) if a != b)


def keeps_up(sample: Sample, rate: float, limits: SloLimits) -> bool:
    return sample.backlog_records <= limits.backlog_limit(rate)


def violates(sample: Sample, rate: float, limits: SloLimits) -> tuple[bool, bool]:
    """(batch too long, backlog too large) for one sample."""
    slow = sample.batch_duration_ms is not None and sample.batch_duration_ms > limits.batch_limit_ms
    return slow, not keeps_up(sample, rate, limits)


def convergence(samples: Sequence[Sample], segment: Segment, limits: SloLimits,
                min_hold_s: float = 10.0) -> float | None:
    """Seconds from the segment's start until the app is stable (same executor count) and keeps up
    (backlog within the limit) from then on to the segment's end; None if that never held for at
    least `min_hold_s` before the segment ended."""
    inside = [s for s in samples if segment.start_s <= s.t_s < segment.end_s and s.executors is not None]
    converged_at: float | None = None
    for i in range(len(inside) - 1, -1, -1):
        s = inside[i]
        if not keeps_up(s, segment.rate, limits) or (i + 1 < len(inside) and s.executors != inside[i + 1].executors):
            break
        converged_at = s.t_s
    if converged_at is None or segment.end_s - converged_at < min_hold_s:
        return None
    return round(converged_at - segment.start_s, 1)


def measure(samples: Sequence[Sample], actions: Sequence[ScalingAction], segs: Sequence[Segment],
            limits: SloLimits, needed_executors: Callable[[float], int | None] | None = None,
            executor_cores: int = 1) -> RunMeasures:
    """All figures of one run over the profile's time (samples after its end, the drain, are left out)."""
    end_s = segs[-1].end_s if segs else 0.0
    inside = [s for s in samples if s.t_s < end_s]
    durations = _durations(inside, end_s)
    cores = filled_cores(inside)

    def rate_at(t: float) -> float:
        return next((g.rate for g in segs if g.start_s <= t < g.end_s), 0.0)

    slo_batch = slo_backlog = slo_any = 0.0
    used = needed = under = 0.0
    known_need = needed_executors is not None
    for s, dt, c in zip(inside, durations, cores, strict=True):
        slow, behind = violates(s, rate_at(s.t_s), limits)
        slo_batch += dt if slow else 0.0
        slo_backlog += dt if behind else 0.0
        slo_any += dt if slow or behind else 0.0
        used += c * dt
        if needed_executors is not None:
            need = needed_executors(rate_at(s.t_s))
            if need is None:
                known_need = False
            else:
                needed += need * executor_cores * dt
                under += dt if c < need * executor_cores else 0.0
    return RunMeasures(
        scaling_actions=sum(1 for a in actions if a.done),
        convergence_s=tuple(convergence(inside, g, limits) for g in segs),
        slo_violation_s=round(slo_any, 1), slo_batch_s=round(slo_batch, 1), slo_backlog_s=round(slo_backlog, 1),
        peak_backlog_records=max((s.backlog_records for s in inside), default=0),
        executor_core_s=round(used, 1),
        needed_core_s=round(needed, 1) if known_need else None,
        over_provisioning=round(used / needed, 2) if known_need and needed > 0 else None,
        under_provisioned_s=round(under, 1) if known_need else None,
        direction_changes=direction_changes(actions),
    )


def needed_from_calibration(calibration: Mapping[float, int | None]) -> Callable[[float], int | None]:
    """The smallest executor count that kept up at a rate: the calibrated one for that rate, 0 for
    no load, unknown (None) for a rate that was not calibrated or that nothing kept up with."""

    def needed(rate: float) -> int | None:
        if rate <= 0:
            return 0
        for r, n in calibration.items():
            if math.isclose(float(r), rate):
                return n
        return None

    return needed
