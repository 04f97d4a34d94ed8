"""The benchmark's figures on hand-built runs (sparkscale_lab.bench.measures, timeline.rates)."""

from __future__ import annotations

import pytest

from sparkscale_lab.bench.measures import (
    ScalingAction,
    Segment,
    SloLimits,
    convergence,
    direction_changes,
    measure,
    needed_from_calibration,
    observed_actions,
    segments,
)
from sparkscale_lab.bench.timeline import Sample, rates
from sparkscale_lab.pipelines.profiles import parse_profile


def sample(t: float, arrived: int, processed: int, executors: int | None = 1, batch_ms: float | None = 500.0,
           partitions: int | None = 4) -> Sample:
    return Sample(t, arrived, processed, batch_ms, executors, None if executors is None else executors, partitions)


def test_segments_of_a_steps_profile_and_of_other_shapes():
    assert segments(parse_profile("steps:15@45s,60@90s,15@90s")) == [
        Segment(0, 45, 15), Segment(45, 135, 60), Segment(135, 225, 15)]
    assert segments(parse_profile("constant:10@30s")) == [Segment(0, 30, 10)]
    with pytest.raises(ValueError, match="never ends"):
        segments(parse_profile("constant:10"))


def test_rates_are_taken_over_the_window():
    samples = [sample(t, 10 * t, 8 * t) for t in range(0, 31, 2)]
    points = rates(samples, window_s=10)
    assert points[0].t_s == 10  # nothing before one window has passed
    assert all(p.input_rate == pytest.approx(10) and p.output_rate == pytest.approx(8) for p in points)


def test_observed_actions_merge_steps_in_one_direction_and_count_turns():
    ex = [1, 1, 2, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 3]
    samples = [sample(2 * i, 0, 0, n) for i, n in enumerate(ex)]
    actions = observed_actions(samples, merge_s=10)
    assert [(a.from_, a.to) for a in actions] == [(1, 3), (3, 2), (2, 3)]
    assert direction_changes(actions) == 2


def test_direction_changes_ignore_failed_and_partition_actions():
    actions = [ScalingAction(0, "scale_executors", 1, 2), ScalingAction(5, "scale_executors", 2, 1, done=False),
               ScalingAction(9, "set_parallelism", 4, 2), ScalingAction(10, "scale_executors", 2, 3)]
    assert direction_changes(actions) == 0
    assert direction_changes([*actions, ScalingAction(20, "scale_executors", 3, 1)]) == 1


def test_convergence_is_the_start_of_the_stable_keeping_up_tail():
    seg = Segment(0, 60, 10)
    limits = SloLimits(batch_limit_ms=1000, backlog_s=5)  # backlog limit 50
    # Behind (backlog 200) until 20 s with 1 executor, scaled to 2 at 20 s, caught up by 30 s.
    samples = [sample(t, 10 * t + 200, 10 * t, 1) for t in range(0, 20, 2)]
    samples += [sample(t, 10 * t + 100, 10 * t, 2) for t in range(20, 30, 2)]
    samples += [sample(t, 10 * t + 10, 10 * t, 2) for t in range(30, 60, 2)]
    assert convergence(samples, seg, limits) == 30
    # A change of executors late in the segment restarts the stable tail.
    late = [*samples[:-3], *[sample(t, 10 * t, 10 * t, 3) for t in (54, 56, 58)]]
    assert convergence(late, seg, limits) is None  # only 6 s of stability left: fewer than min_hold_s


def test_measure_counts_slo_seconds_core_seconds_and_over_provisioning():
    segs = [Segment(0, 20, 10), Segment(20, 40, 40)]
    limits = SloLimits(batch_limit_ms=1000, backlog_s=5, backlog_floor_records=50)
    samples = [sample(t, 10 * t, 10 * t, 4, 500) for t in range(0, 20, 2)]  # 4 executors, keeping up
    # From 20 s: 40/s arrive, nothing is finished any more, and batches outlast the trigger.
    samples += [sample(t, 200 + 40 * (t - 20), 200, 4, 1500) for t in range(20, 40, 2)]
    samples += [sample(t, 1000, 1000, 4) for t in range(40, 50, 2)]  # the drain: after the profile, left out
    needed = needed_from_calibration({10.0: 1, 40.0: 2})
    m = measure(samples, [ScalingAction(21, "scale_executors", 4, 3, done=False)], segs, limits, needed)
    # Backlog 40 * (t - 20) against 5 s of the input rate measured over the last 10 s, which lags the
    # step: at 22 s, (280 - 120) / 10 = 16/s allows 80 records, the backlog is 80 (not above); at 24 s,
    # 22/s allows 110 < 160. So 24..40 s: 16 s.
    assert m.slo_backlog_s == 16 and m.slo_violation_s == 16
    assert m.batch_over_trigger_s == 20  # a diagnostic only: 20..40 s, whatever the backlog
    assert m.slo_latency_s is None  # no latency limit, no latency sampled
    assert m.peak_backlog_records == 720 and m.peak_backlog_s == 18  # 720 records at 40/s
    assert m.executor_core_s == 4 * 40
    assert m.needed_core_s == 1 * 20 + 2 * 20
    assert m.over_provisioning == pytest.approx(160 / 60, abs=0.01)
    assert m.under_provisioned_s == 0
    assert m.scaling_actions == 0  # the one action failed
    assert m.convergence_s == (0, None)


def test_an_uncalibrated_rate_leaves_the_need_unknown():
    needed = needed_from_calibration({10.0: 1, 40.0: None})
    assert needed(10) == 1 and needed(0) == 0 and needed(40) is None and needed(25) is None
    m = measure([sample(0, 0, 0), sample(2, 0, 0)], [], [Segment(0, 4, 40)], SloLimits(1000), needed)
    assert m.needed_core_s is None and m.over_provisioning is None
