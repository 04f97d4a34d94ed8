"""Load profile specs: every accepted form, every error, rates at the boundaries, exact integrals."""

from __future__ import annotations

import itertools
import math
import re

import pytest

from sparkscale_lab.pipelines.profiles import (
    DIURNAL_NIGHT_LOW,
    DIURNAL_SHAPE,
    ConstantProfile,
    DiurnalProfile,
    RampProfile,
    SineProfile,
    StepsProfile,
    parse_profile,
)


def _numeric_integral(profile, t_s: float, steps: int = 20000) -> float:
    dt = t_s / steps
    return sum(profile.rate_at((i + 0.5) * dt) for i in range(steps)) * dt


@pytest.mark.parametrize(
    ("spec", "rate", "duration_s"),
    [
        ("1000", 1000.0, None),
        ("constant:2000", 2000.0, None),
        ("constant:2000@3s", 2000.0, 3.0),
        ("constant:2.5@2m", 2.5, 120.0),
        ("  CONSTANT: 50 @ 1.5m ", 50.0, 90.0),
    ],
)
def test_constant(spec, rate, duration_s):
    profile = parse_profile(spec)
    assert isinstance(profile, ConstantProfile)
    assert profile.rate_at(0) == rate
    assert profile.duration_s == duration_s
    assert profile.records_by(2.0) == pytest.approx(rate * 2.0)
    if duration_s is not None:
        assert profile.rate_at(duration_s - 1e-9) == rate
        assert profile.rate_at(duration_s) == 0.0
        assert profile.records_by(duration_s + 100) == pytest.approx(rate * duration_s)
    assert profile.rate_at(-1) == 0.0
    assert profile.records_by(-1) == 0.0


@pytest.mark.parametrize("spec", ["steps:1000@60s,4000@120s,1000@60s", "1000@60s,4000@2m,1000@1m"])
def test_steps_boundaries_are_half_open(spec):
    profile = parse_profile(spec)
    assert isinstance(profile, StepsProfile)
    assert profile.duration_s == 240.0
    assert profile.rate_at(0) == 1000
    assert profile.rate_at(59.999) == 1000
    assert profile.rate_at(60) == 4000
    assert profile.rate_at(179.999) == 4000
    assert profile.rate_at(180) == 1000
    assert profile.rate_at(240) == 0
    assert profile.records_by(60) == pytest.approx(60_000)
    assert profile.records_by(90) == pytest.approx(60_000 + 30 * 4000)
    assert profile.records_by(240) == pytest.approx(60_000 + 480_000 + 60_000)
    assert profile.records_by(1e6) == profile.records_by(240)


def test_steps_last_step_may_hold_forever():
    profile = parse_profile("steps:100@10s,500")
    assert profile.duration_s is None
    assert profile.rate_at(9.99) == 100
    assert profile.rate_at(1e6) == 500
    assert profile.records_by(20) == pytest.approx(1000 + 5000)


def test_single_step_without_prefix_is_bounded_constant():
    profile = parse_profile("300@2s")
    assert profile.duration_s == 2.0
    assert profile.records_by(5) == pytest.approx(600)


def test_ramp():
    profile = parse_profile("ramp:1000-3000@10s")
    assert isinstance(profile, RampProfile)
    assert profile.duration_s == 10.0
    assert profile.rate_at(0) == 1000
    assert profile.rate_at(5) == pytest.approx(2000)
    assert profile.rate_at(9.999) == pytest.approx(3000, rel=1e-3)
    assert profile.rate_at(10) == 0
    assert profile.records_by(10) == pytest.approx(20_000)
    assert profile.records_by(5) == pytest.approx(_numeric_integral(profile, 5), rel=1e-6)
    down = parse_profile("ramp:3000-0@1m")
    assert down.rate_at(30) == pytest.approx(1500)
    assert down.records_by(60) == pytest.approx(90_000)


def test_sine():
    profile = parse_profile("sine:3000,2000,60s@10m")
    assert isinstance(profile, SineProfile)
    assert profile.duration_s == 600.0
    assert profile.rate_at(0) == pytest.approx(3000)
    assert profile.rate_at(15) == pytest.approx(5000)
    assert profile.rate_at(45) == pytest.approx(1000)
    assert profile.records_by(60) == pytest.approx(180_000)  # whole periods average to the base
    assert profile.records_by(20) == pytest.approx(_numeric_integral(profile, 20), rel=1e-6)
    assert parse_profile("sine:100,100,2m").duration_s is None


def test_diurnal_shape():
    profile = parse_profile("diurnal:8000@24m")
    assert isinstance(profile, DiurnalProfile)
    assert profile.duration_s == 24 * 60.0
    hour_s = 60.0  # 24 minutes for 24 hours: one simulated hour per real minute
    rates = [profile.rate_at(t) for t in range(0, 24 * 60)]
    assert max(rates) == pytest.approx(8000)  # the evening peak equals PEAK
    assert profile.rate_at(18 * hour_s) == pytest.approx(8000)
    night = profile.rate_at(3 * hour_s)
    assert night == pytest.approx(DIURNAL_NIGHT_LOW * 8000)
    assert min(rates) == pytest.approx(night)
    assert night < 0.15 * 8000
    # Morning rise, midday plateau, evening peak above the midday level.
    assert profile.rate_at(5 * hour_s) < profile.rate_at(7 * hour_s) < profile.rate_at(9 * hour_s)
    assert 0.6 * 8000 < profile.rate_at(12 * hour_s) < 0.8 * 8000
    assert profile.rate_at(18 * hour_s) > profile.rate_at(13 * hour_s)
    assert profile.rate_at(24 * hour_s) == 0
    assert profile.records_by(24 * hour_s) == pytest.approx(_numeric_integral(profile, 24 * hour_s), rel=1e-4)
    mean_fraction = profile.records_by(1e9) / profile.duration_s / 8000
    assert 0.4 < mean_fraction < 0.7


def test_diurnal_accepts_seconds_and_shape_is_documented_by_hours():
    profile = parse_profile("diurnal:100@48s")  # one simulated hour every 2 s
    for hour, fraction in DIURNAL_SHAPE[:-1]:
        assert profile.rate_at(hour * 2) == pytest.approx(100 * fraction)


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        ("", "empty spec"),
        ("fast", "neither a rate"),
        ("burst:100", "unknown profile kind 'burst'"),
        ("constant:abc", "rate 'abc'"),
        ("constant:-5", "rate '-5'"),
        ("constant:100@60", "duration '60'"),
        ("constant:100@10h", "duration '10h'"),
        ("constant:100@0s", "must be positive"),
        ("steps:", "RATE@DURATION items"),
        ("steps:1000@60s,,2000@1m", "RATE@DURATION items"),
        ("steps:1000,2000@60s", "missing @DURATION"),
        ("1000@60s,x@1m", "rate 'x'"),
        ("ramp:1000@10s", "FROM-TO"),
        ("ramp:1000-2000", "missing @DURATION"),
        ("ramp:1000-@10s", "TO rate ''"),
        ("sine:100,50@1m", "BASE,AMPLITUDE,PERIOD"),
        ("sine:100,50,60@1m", "PERIOD '60'"),
        ("sine:100,150,60s", "AMPLITUDE 150 is above BASE 100"),
        ("diurnal:8000", "missing @DURATION"),
        ("diurnal:8000@24", "duration '24'"),
    ],
)
def test_bad_specs_name_the_spec_and_the_accepted_forms(spec, reason):
    with pytest.raises(ValueError, match=re.escape(repr(spec))) as info:
        parse_profile(spec)
    message = str(info.value)
    assert repr(spec) in message
    assert reason in message
    for form in ("constant:RATE", "steps:RATE@DURATION", "ramp:FROM-TO@DURATION", "sine:BASE", "diurnal:PEAK"):
        assert form in message


def test_integrals_are_monotone_and_continuous():
    for spec in ("steps:10@1s,0@1s,30@1s", "ramp:0-100@5s", "sine:50,50,2s@6s", "diurnal:100@12s"):
        profile = parse_profile(spec)
        assert profile.duration_s is not None
        times = [i / 100 for i in range(int(profile.duration_s * 100) + 1)]
        top_rate = max(profile.rate_at(t) for t in times)
        values = [profile.records_by(t) for t in times]
        for a, b in itertools.pairwise(values):
            assert 0 <= b - a <= 1.01 * top_rate / 100, spec  # 1 %: rate_at samples miss the sup
        assert not any(math.isnan(v) for v in values)
