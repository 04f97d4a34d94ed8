"""The demo's load sized to the machine: what one executor processed (its probe's batches) sets the
low and high rates, so that the step up needs more executors and the step down comes after."""

from __future__ import annotations

import pytest

from sparkscale.monitors.progress_reports import ProgressReport
from sparkscale_lab.bench.demo import DEFAULT_HIGH, DEFAULT_LOW, demo_rates, throughput


def _batch(batch_id: int, rows: int, duration_ms: float | None) -> ProgressReport:
    return ProgressReport(batch_id=batch_id, run_id="r", num_input_rows=rows, batch_duration_ms=duration_ms)


def test_a_slow_machine_gets_a_load_one_executor_cannot_carry_then_one_it_carries_easily():
    low, high = demo_rates(3000.0)
    assert (low, high) == (750, 3900)
    assert high > 3000 > 2 * low


def test_a_fast_machine_gets_at_most_the_defaults_that_served_it():
    assert demo_rates(14_387.0) == (DEFAULT_LOW, 18_700)  # a quarter would be 3,597: capped at 2,000
    assert demo_rates(40_000.0) == (DEFAULT_LOW, DEFAULT_HIGH)


@pytest.mark.parametrize("measured", [None, 0.0, -5.0, float("nan")])
def test_nothing_measured_gives_the_defaults(measured):
    assert demo_rates(measured) == (DEFAULT_LOW, DEFAULT_HIGH)


def test_a_tiny_measure_still_gives_positive_rates():
    low, high = demo_rates(1.0)
    assert low >= 1 and high > low


def test_throughput_is_lines_over_batch_time_without_the_tail_batch():
    reports = [_batch(1, 0, 50.0), _batch(2, 20_000, 6_000.0), _batch(3, 20_000, 7_000.0), _batch(4, 300, 900.0)]
    assert throughput(reports) == pytest.approx(40_000 / 13.0)


def test_throughput_needs_two_batches_with_input_and_a_duration():
    assert throughput([_batch(1, 20_000, 6_000.0)]) is None
    assert throughput([_batch(1, 20_000, None), _batch(2, 20_000, 0.0), _batch(3, 5, 10.0)]) is None
