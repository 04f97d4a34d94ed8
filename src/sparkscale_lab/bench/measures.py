"""What a scaling run is judged by, computed from its samples: pure functions, no I/O.

The figures (`sparkscale bench scaling`): the freshness SLO (seconds with a backlog above
`backlog_s` seconds of input, the headline; seconds with an end-to-end latency above its limit,
where the samples carry one), scaling actions, time to converge after each load change, peak
backlog, executor-core-seconds, over-provisioning against a calibrated need, direction changes
(oscillation, and turns at steady load), and seconds whose batch outlasted the trigger (a
diagnostic only). Lost and duplicated records come from the verifier.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass

from sparkscale_lab.bench.timeline import Sample, trailing
from sparkscale_lab.pipelines.profiles import ConstantProfile, LoadProfile, StepsProfile


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
    why: str = ""  # the action's reason as the daemon logged it ("" where none was logged: recorded, simulated)

    @property
    def direction(self) -> int:
        return (self.to > self.from_) - (self.to < self.from_)

    def to_dict(self) -> dict:
        return asdict(self)


BACKLOG_BASES = ("counted", "stated")


@dataclass(frozen=True)
class SloLimits:
    """The service level a run is held to: data freshness.

    - backlog: a sample is behind when its backlog exceeds `backlog_s` seconds of input at the
      current input rate (and `backlog_floor_records`, so that a handful of records at a trickle is
      no violation). The backlog is `counted` (records arrived minus records the query finished) or
      `stated` (what the app's progress reports say, the daemon's own figure; counted while they
      state none, before the first batch).
    - latency: a sample violates when its end-to-end latency exceeds `latency_limit_ms` (None: no
      latency SLO); samples without a latency are not judged.
    - `batch_limit_ms` (the trigger interval) is only a diagnostic: a multi-stage batch outlasts its
      trigger even when the query keeps up, so it says little about freshness.
    """

    batch_limit_ms: float
    backlog_s: float = 10.0
    backlog_floor_records: int = 50
    latency_limit_ms: float | None = None
    backlog_basis: str = "counted"  # one of BACKLOG_BASES

    def backlog_limit(self, rate: float) -> float:
        """Records allowed to wait at `rate` records/s."""
        return max(self.backlog_s * max(rate, 0.0), self.backlog_floor_records)

    def backlog_of(self, sample: Sample) -> int:
        if self.backlog_basis == "stated" and sample.stated_backlog_records is not None:
            return sample.stated_backlog_records
        return sample.backlog_records


@dataclass(frozen=True)
class RunMeasures:
    scaling_actions: int
    convergence_s: tuple[float | None, ...]  # one per segment, from its start
    slo_backlog_s: float  # the headline: seconds with a backlog above the SLO's seconds of input
    slo_latency_s: float | None  # seconds with a latency above the limit; None: no latency sampled
    slo_violation_s: float  # seconds violating either (backlog or latency)
    batch_over_trigger_s: float  # diagnostic: seconds whose last batch outlasted the trigger
    peak_backlog_records: int
    peak_backlog_s: float | None  # the largest backlog in seconds of input (None: no input rate)
    peak_latency_ms: float | None
    executor_core_s: float
    needed_core_s: float | None
    over_provisioning: float | None  # executor_core_s / needed_core_s
    under_provisioned_s: float | None  # seconds with fewer cores than the calibrated need
    direction_changes: int
    actions_per_segment: tuple[int, ...] = ()  # done actions asked for in each segment
    steady_reversals: int = 0  # direction changes between two actions of the same segment

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
    return sum(1 for a, b in itertools.pairwise(dirs) if a != b)


def input_rates(samples: Sequence[Sample], load_at: Callable[[float], float],
                window_s: float = 10.0) -> list[float]:
    """The input rate at each sample: records arrived over the trailing `window_s` (what came in,
    whatever the profile asked for); before a full window has passed, or when nothing arrived over
    it, the profile's rate at that time (`load_at`)."""
    out: list[float] = []
    for s, base in trailing(samples, window_s):
        dt = s.t_s - base.t_s
        measured = (s.arrived_records - base.arrived_records) / dt if dt >= window_s else 0.0
        out.append(measured if measured > 0 else max(load_at(s.t_s), 0.0))
    return out


def backlog_seconds(backlog_records: float, rate: float) -> float | None:
    """A backlog in seconds of input at `rate` (None at no input: seconds of nothing)."""
    return backlog_records / rate if rate > 0 else None


def behind(sample: Sample, rate: float, limits: SloLimits) -> bool:
    """The backlog SLO is violated: more than `backlog_s` seconds of input (and the floor) waits."""
    return limits.backlog_of(sample) > limits.backlog_limit(rate)


def keeps_up(sample: Sample, rate: float, limits: SloLimits) -> bool:
    return not behind(sample, rate, limits)


def convergence(samples: Sequence[Sample], segment: Segment, limits: SloLimits, min_hold_s: float = 10.0,
                rates: Sequence[float] | None = None) -> float | None:
    """Seconds from the segment's start until the app is stable (same executor count) and keeps up
    (backlog within the SLO) from then on to the segment's end; None if that never held for at least
    `min_hold_s` before the segment ended. `rates` (parallel to `samples`): each sample's input
    rate; default the segment's."""
    idx = [i for i, s in enumerate(samples) if segment.start_s <= s.t_s < segment.end_s and s.executors is not None]
    converged_at: float | None = None
    for k in range(len(idx) - 1, -1, -1):
        s = samples[idx[k]]
        rate = rates[idx[k]] if rates is not None else segment.rate
        if behind(s, rate, limits) or (k + 1 < len(idx) and s.executors != samples[idx[k + 1]].executors):
            break
        converged_at = s.t_s
    if converged_at is None or segment.end_s - converged_at < min_hold_s:
        return None
    return round(converged_at - segment.start_s, 1)


def segment_of(segs: Sequence[Segment], t_s: float) -> int | None:
    return next((i for i, g in enumerate(segs) if g.start_s <= t_s < g.end_s), None)


def steady_reversals(actions: Sequence[ScalingAction], segs: Sequence[Segment]) -> int:
    """Direction changes whose two actions fall in the same segment: the controller turned round
    while the load stood still (a turn across a load change is a response to it)."""
    done = [a for a in actions if a.kind == "scale_executors" and a.done and a.direction]
    return sum(1 for a, b in itertools.pairwise(done)
               if a.direction != b.direction and segment_of(segs, a.t_s) is not None
               and segment_of(segs, a.t_s) == segment_of(segs, b.t_s))


def measure(samples: Sequence[Sample], actions: Sequence[ScalingAction], segs: Sequence[Segment],
            limits: SloLimits, needed_executors: Callable[[float], int | None] | None = None,
            executor_cores: int = 1, load_at: Callable[[float], float] | None = None,
            rate_window_s: float = 10.0) -> RunMeasures:
    """All figures of one run over the profile's time (samples after its end, the drain, are left
    out). `load_at`: the profile's rate at a time (default: the segment's), for the input rate
    before a full rate window and for the calibrated need at each moment."""
    end_s = segs[-1].end_s if segs else 0.0
    inside = [s for s in samples if s.t_s < end_s]
    durations = _durations(inside, end_s)
    cores = filled_cores(inside)

    def segment_rate(t: float) -> float:
        return next((g.rate for g in segs if g.start_s <= t < g.end_s), 0.0)

    load = load_at or segment_rate
    rates = input_rates(inside, load, rate_window_s)
    slo_backlog = slo_latency = slo_any = over_trigger = 0.0
    used = needed = under = 0.0
    known_need = needed_executors is not None
    latencies = [s.latency_ms for s in inside if s.latency_ms is not None]
    for s, dt, c, rate in zip(inside, durations, cores, rates, strict=True):
        late = (limits.latency_limit_ms is not None and s.latency_ms is not None
                and s.latency_ms > limits.latency_limit_ms)
        lagging = behind(s, rate, limits)
        slo_backlog += dt if lagging else 0.0
        slo_latency += dt if late else 0.0
        slo_any += dt if lagging or late else 0.0
        over_trigger += dt if s.batch_duration_ms is not None and s.batch_duration_ms > limits.batch_limit_ms else 0.0
        used += c * dt
        if needed_executors is not None:
            need = needed_executors(load(s.t_s))
            if need is None:
                known_need = False
            else:
                needed += need * executor_cores * dt
                under += dt if c < need * executor_cores else 0.0
    backlog_s = [b for s, r in zip(inside, rates, strict=True)
                 if (b := backlog_seconds(limits.backlog_of(s), r)) is not None]
    return RunMeasures(
        scaling_actions=sum(1 for a in actions if a.done),
        convergence_s=tuple(convergence(inside, g, limits, rates=rates) for g in segs),
        slo_backlog_s=round(slo_backlog, 1),
        slo_latency_s=round(slo_latency, 1) if latencies and limits.latency_limit_ms is not None else None,
        slo_violation_s=round(slo_any, 1), batch_over_trigger_s=round(over_trigger, 1),
        peak_backlog_records=max((limits.backlog_of(s) for s in inside), default=0),
        peak_backlog_s=round(max(backlog_s), 1) if backlog_s else None,
        peak_latency_ms=max(latencies) if latencies else None,
        executor_core_s=round(used, 1),
        needed_core_s=round(needed, 1) if known_need else None,
        over_provisioning=round(used / needed, 2) if known_need and needed > 0 else None,
        under_provisioned_s=round(under, 1) if known_need else None,
        direction_changes=direction_changes(actions),
        actions_per_segment=tuple(sum(1 for a in actions if a.done and segment_of(segs, a.t_s) == i)
                                  for i in range(len(segs))),
        steady_reversals=steady_reversals(actions, segs),
    )


def needed_from_calibration(calibration: Mapping[float, int | None]) -> Callable[[float], int | None]:
    """The smallest executor count that kept up at a rate: that of the lowest calibrated rate at or
    above it (exact for a steps profile's rates; rounded up between a sine's calibrated levels), 0
    for no load, unknown (None) above every calibrated rate or where nothing kept up."""
    levels = sorted((float(r), n) for r, n in calibration.items())

    def needed(rate: float) -> int | None:
        if rate <= 0:
            return 0
        for r, n in levels:
            if r >= rate or math.isclose(r, rate, rel_tol=1e-6):
                return n
        return None

    return needed


def calibration_rates(profile: LoadProfile, levels: int = 4, step_s: float = 1.0) -> list[float]:
    """The rates to calibrate for a profile: a piecewise-constant one's own rates; any other shape's
    `levels` rates evenly spaced from its lowest to its highest (sampled every `step_s`)."""
    if is_piecewise_constant(profile):
        return sorted({g.rate for g in segments(profile) if g.rate > 0})
    duration = profile.duration_s or 0.0
    seen = [profile.rate_at(i * step_s) for i in range(int(duration / step_s))] or [0.0]
    lo, hi = max(min(seen), 0.0), max(seen)
    if hi <= 0:
        return []
    if levels < 2 or math.isclose(lo, hi):
        return [round(hi, 1)]
    return sorted({round(lo + (hi - lo) * k / (levels - 1), 1) for k in range(levels)} - {0.0})


def is_piecewise_constant(profile: LoadProfile) -> bool:
    """Steps or constant: the load stands still within each segment (load changes are its steps)."""
    return isinstance(profile, (StepsProfile, ConstantProfile))
