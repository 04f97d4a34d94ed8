"""The daemon host's figures come from a background sampler: a cycle takes its latest reading and
never waits for psutil, even when the sampler is stuck in a call (issue 33)."""

from __future__ import annotations

import threading
import time

import pytest

from sparkscale.monitors import collector
from sparkscale.monitors.host import HostFigures
from sparkscale.monitors.host_sampler import HostSampler


class Clock:
    def __init__(self) -> None:
        self.now_s = 50.0

    def __call__(self) -> float:
        return self.now_s


def figures(cpu: float) -> HostFigures:
    return HostFigures(cpu, 0.25, 2, 1.0, "head")


@pytest.fixture
def stuck_after_first():
    """A sampler whose first reading comes at once and whose second never ends (until released)."""
    release, clock, calls = threading.Event(), Clock(), []

    def read() -> HostFigures:
        calls.append(1)
        if len(calls) > 1:
            release.wait(10)
        return figures(0.5 if len(calls) == 1 else 0.9)

    sampler = HostSampler(read, period_s=0.01, monotonic=clock)
    sampler.start()
    yield sampler, clock, calls, release
    sampler.stop()
    release.set()


def test_the_cycle_takes_the_latest_reading_with_its_age_without_waiting(stuck_after_first):
    sampler, clock, calls, _release = stuck_after_first
    assert sampler.running
    deadline = time.monotonic() + 5
    while len(calls) < 2 and time.monotonic() < deadline:  # the second reading has begun, and is stuck
        time.sleep(0.01)
    assert len(calls) == 2
    clock.now_s += 7.5
    started = time.monotonic()
    extension = sampler.extension()
    assert time.monotonic() - started < 0.5
    assert extension is not None and extension["cpu_fraction"] == 0.5 and extension["age_s"] == 7.5
    assert extension["sample_s"] == 1.0 and extension["scope"] == "daemon host"


def test_a_new_reading_replaces_the_last_and_a_failed_one_keeps_it():
    outcomes: list[HostFigures | Exception] = [figures(0.1), figures(0.2), OSError("no /proc")]
    failed, release = threading.Event(), threading.Event()

    def read() -> HostFigures:
        if not outcomes:  # after the failure: no reading ends until the test is done
            failed.set()
            release.wait(10)
            return figures(0.9)
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    sampler = HostSampler(read, period_s=0.01)
    sampler.start()
    try:
        assert failed.wait(5)
        reading = sampler.latest()
        assert reading is not None and reading.figures.cpu_fraction == 0.2  # the newest before the failure
    finally:
        sampler.stop()
        release.set()
    assert HostSampler(read).latest() is None and HostSampler(read).extension() is None  # none before the first


def test_the_collector_uses_the_running_sampler_and_never_samples_itself(stuck_after_first, monkeypatch):
    sampler, clock, _calls, _release = stuck_after_first

    def never(sample_s: float) -> HostFigures:
        raise AssertionError(f"a host sample ({sample_s} s) inside the cycle")

    monkeypatch.setattr(collector, "HOST", sampler)
    monkeypatch.setattr(collector, "sample_host", never)
    clock.now_s += 2.0
    extension = collector._host_extension(0.0)
    assert extension is not None and extension["age_s"] == 2.0 and extension["cpu_fraction"] == 0.5
    # Asked for a blocking sample (loop.host_cpu_sample_s > 0, the benchmark's "before"): it is taken.
    monkeypatch.setattr(collector, "sample_host", lambda sample_s: HostFigures(0.3, 0.2, 2, sample_s, "head"))
    assert collector._host_extension(0.5)["sample_s"] == 0.5
    # No sampler running (a one-shot command): a reading of its own.
    sampler.stop()
    assert collector._host_extension(0.0)["cpu_fraction"] == 0.3


def test_a_stopped_sampler_starts_again_with_one_thread():
    sampler = HostSampler(lambda: figures(0.4), period_s=0.01)
    sampler.start()
    first = sampler._thread
    sampler.stop()
    assert not sampler.running and first is not None
    sampler.start()
    try:
        assert sampler.running and sampler._thread is not first
        first.join(5)
        assert not first.is_alive()  # the first thread ended: one samples
    finally:
        sampler.stop()
