"""The benchmark's freshness SLO on hand-built samples: backlog in seconds of input (measured rate,
the profile's at no input, the floor), the stated backlog, the latency SLO, and the step figures."""

from __future__ import annotations

import pytest

from sparkscale_lab.bench.measures import (
    ScalingAction,
    Segment,
    SloLimits,
    calibration_rates,
    input_rates,
    measure,
    needed_from_calibration,
    steady_reversals,
)
from sparkscale_lab.bench.timeline import Sample
from sparkscale_lab.pipelines.profiles import parse_profile


def at(t: float, arrived: int, processed: int, stated: int | None = None, latency_ms: float | None = None,
       batch_ms: float | None = 500.0, executors: int = 2) -> Sample:
    return Sample(t, arrived, processed, batch_ms, executors, executors, 4, stated, latency_ms)


def steady(rate: float, backlog_at: dict[int, int], until: int = 40, step: int = 2) -> list[Sample]:
    """`rate` records/s arriving; the backlog at each sample time from `backlog_at` (else 0)."""
    return [at(t, int(rate * t), int(rate * t) - backlog_at.get(t, 0)) for t in range(0, until, step)]


LIMITS = SloLimits(batch_limit_ms=1000, backlog_s=10, backlog_floor_records=50)


def test_backlog_seconds_are_judged_against_the_measured_input_rate():
    # 20/s: the limit is 10 s x 20/s = 200 records. 190 waits at 20 s (9.5 s: fine), 210 at 24 and
    # 26 s (10.5 s: violated), 400 at 30 s (20 s: violated), each sample standing for 2 s.
    samples = steady(20, {20: 190, 24: 210, 26: 210, 30: 400})
    m = measure(samples, [], [Segment(0, 40, 20)], LIMITS)
    assert m.slo_backlog_s == 6
    assert m.peak_backlog_records == 400 and m.peak_backlog_s == 20
    # The rate that came in counts, not the profile's: at 40/s arriving, 300 waiting is 7.5 s.
    fast = steady(40, {20: 300, 22: 300})
    assert measure(fast, [], [Segment(0, 40, 20)], LIMITS).slo_backlog_s == 0
    assert measure(fast, [], [Segment(0, 40, 20)], SloLimits(1000, backlog_s=5)).slo_backlog_s == 4


def test_at_no_input_the_profiles_rate_and_then_the_floor_decide():
    # Nothing arrives (the feed stalled) while the profile asks for 5/s: the limit is 10 s x 5/s = 50.
    stalled = [at(t, 100, 100 - b) for t, b in ((0, 0), (2, 60), (4, 40), (6, 60), (8, 0))]
    assert measure(stalled, [], [Segment(0, 10, 5)], SloLimits(1000, backlog_s=10, backlog_floor_records=10)
                   ).slo_backlog_s == 4
    # A profile at 0/s: only the floor (50 records) stands; 49 waiting is fine, 51 is not.
    idle = [at(t, 100, 100 - b) for t, b in ((0, 49), (2, 51), (4, 49), (6, 0))]
    m = measure(idle, [], [Segment(0, 8, 0)], LIMITS)
    assert m.slo_backlog_s == 2 and m.peak_backlog_s is None  # no input: no seconds of it
    # Before a full rate window has passed the profile's rate stands in: 5/s at 0 and 2 s.
    rates = input_rates(steady(20, {}, until=14), lambda t: 5.0, window_s=10)
    assert rates[:5] == [5.0] * 5 and rates[5:] == [pytest.approx(20.0)] * 2


def test_the_stated_backlog_is_the_basis_when_asked_and_counted_before_any_report():
    samples = [at(0, 0, 0, stated=None), at(2, 40, 40, stated=None), at(4, 80, 80, stated=500),
               at(6, 120, 120, stated=500), at(8, 160, 100, stated=0), at(10, 200, 200)]
    seg = [Segment(0, 12, 20)]
    stated = SloLimits(1000, backlog_s=10, backlog_floor_records=50, backlog_basis="stated")
    # Stated 500 (25 s of input) at 4 and 6 s violates; the counted 60 at 8 s is not looked at.
    assert measure(samples, [], seg, stated).slo_backlog_s == 4
    assert measure(samples, [], seg, LIMITS).slo_backlog_s == 0  # counted: at most 60 records
    # No statement yet: counted. 300 counted waiting at 2 s is 15 s of input.
    early = [at(0, 0, 0), at(2, 340, 40, stated=None), at(4, 400, 400, stated=0)]
    assert measure(early, [], [Segment(0, 6, 20)], stated).slo_backlog_s == 2


def test_latency_slo_counts_only_samples_with_a_latency_and_is_unknown_without_any():
    limits = SloLimits(1000, backlog_s=10, latency_limit_ms=10_000)
    latencies = [None, 5_000, 12_000, 12_000, 3_000, 10_000]
    samples = [at(2 * i, 20 * 2 * i, 20 * 2 * i, latency_ms=v) for i, v in enumerate(latencies)]
    m = measure(samples, [], [Segment(0, 12, 20)], limits)
    assert m.slo_latency_s == 4 and m.peak_latency_ms == 12_000  # 12 s twice; exactly 10 s is no violation
    assert m.slo_backlog_s == 0 and m.slo_violation_s == 4
    # Backlog and latency violated at once count once in slo_violation_s.
    both = [*samples[:2], at(4, 80, 0, latency_ms=12_000), at(6, 120, 0, latency_ms=12_000), *samples[4:]]
    m2 = measure(both, [], [Segment(0, 12, 20)], SloLimits(1000, backlog_s=1, latency_limit_ms=10_000))
    assert m2.slo_latency_s == 4 and m2.slo_backlog_s == 4 and m2.slo_violation_s == 4
    no_latency = [at(t, 20 * t, 20 * t) for t in range(0, 12, 2)]
    assert measure(no_latency, [], [Segment(0, 12, 20)], limits).slo_latency_s is None
    assert measure(samples, [], [Segment(0, 12, 20)], LIMITS).slo_latency_s is None  # no limit: not judged


def test_batches_over_the_trigger_are_a_diagnostic_not_the_slo():
    samples = [at(t, 20 * t, 20 * t, batch_ms=2800) for t in range(0, 20, 2)]  # keeping up, 2.8 s batches
    m = measure(samples, [], [Segment(0, 20, 20)], LIMITS)
    assert m.batch_over_trigger_s == 20 and m.slo_backlog_s == 0 and m.slo_violation_s == 0


def test_actions_per_step_and_reversals_at_steady_load():
    segs = [Segment(0, 60, 10), Segment(60, 120, 40), Segment(120, 180, 10)]
    actions = [ScalingAction(65, "scale_executors", 1, 2), ScalingAction(90, "scale_executors", 2, 3),
               ScalingAction(100, "scale_executors", 3, 2),  # down at the same load: a reversal
               ScalingAction(110, "set_parallelism", 4, 8), ScalingAction(130, "scale_executors", 2, 1),
               ScalingAction(140, "scale_executors", 1, 2, done=False)]  # failed: neither counted
    assert steady_reversals(actions, segs) == 1  # 3 -> 2 at 100 s; 2 -> 1 at 130 s answers the step down
    samples = [at(t, 10 * t, 10 * t) for t in range(0, 180, 5)]
    m = measure(samples, actions, segs, LIMITS)
    # up, up, down, down: one turn in all, and it came at steady load
    assert m.actions_per_segment == (0, 4, 1) and m.steady_reversals == 1 and m.direction_changes == 1


def test_the_need_between_calibrated_levels_rounds_up_and_sine_levels_span_the_profile():
    needed = needed_from_calibration({15.0: 1, 30.0: 1, 45.0: 2, 60.0: 3})
    assert [needed(r) for r in (0, 10, 15, 31, 45, 59.9, 60, 61)] == [0, 1, 1, 2, 2, 3, 3, None]
    assert calibration_rates(parse_profile("steps:15@45s,60@90s,15@90s")) == [15, 60]
    assert calibration_rates(parse_profile("sine:37.5,22.5,120s@240s")) == [15, 30, 45, 60]
    # Over-provisioning under a sine uses the need at each moment: 3 executors all along against a
    # need of 1 below 30/s, 2 up to 45/s and 3 above.
    profile = parse_profile("sine:37.5,22.5,120s@120s")
    samples = [Sample(t, int(profile.records_by(t)), int(profile.records_by(t)), None, 3, 3, 4)
               for t in range(0, 120)]
    m = measure(samples, [], [Segment(0, 120, 37.5)], LIMITS, needed, load_at=profile.rate_at)
    need = sum(needed(profile.rate_at(t)) for t in range(0, 120))
    assert m.needed_core_s == need and m.over_provisioning == pytest.approx(360 / need, abs=0.01)
    assert 1.3 < m.over_provisioning < 2.0  # about 2 needed on average: clearly not the flat 3
