"""The daemon host's CPU as a change between cycles: no wait inside a cycle."""

from __future__ import annotations

from collections import namedtuple

import pytest

from sparkscale.monitors import host

Times = namedtuple("Times", "user system idle iowait")


@pytest.fixture
def readings(monkeypatch):
    """psutil.cpu_times returns these in turn; the clock advances 10 s per reading."""
    values = iter([Times(100, 50, 800, 50), Times(130, 60, 800, 10 + 50)])
    clock = iter([1000.0, 1010.0])
    monkeypatch.setattr(host.psutil, "cpu_times", lambda: next(values))
    monkeypatch.setattr(host.time, "monotonic", lambda: next(clock))
    monkeypatch.setattr(host.time, "sleep", lambda s: pytest.fail(f"slept {s} s inside a cycle"))
    monkeypatch.setattr(host.psutil, "boot_time", lambda: host.time.time() - 1000.0)
    monkeypatch.setattr(host, "_DELTA", host._CpuDelta())


def test_cpu_is_the_change_since_the_previous_reading_without_waiting(readings):
    first = host.sample_host(0)
    # Since boot: 1000 s of CPU time, 850 idle (iowait counts as idle) -> 15 % busy.
    assert first.cpu_fraction == pytest.approx(0.15)
    second = host.sample_host(0)
    # Between the readings: 30 user + 10 system busy, 10 iowait idle -> 40 / 50 busy, over 10 s.
    assert second.cpu_fraction == pytest.approx(0.8)
    assert second.sample_s == pytest.approx(10.0)
