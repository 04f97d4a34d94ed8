"""Load profiles: how many records per second the load generator should send at each moment.

A profile is parsed from a short spec string (CLI flag, experiment file) so an experiment's load
is one readable line. Besides `rate_at`, every profile gives `records_by(t_s)`, the exact integral
of its rate: the generator sends "what should have been sent by now", so it tracks the target
without drift and catches up after a slow tick.

Accepted forms (durations take an `s` or `m` suffix; rates are records per second):

    constant:RATE[@DURATION]       e.g. constant:2000@60s, or a bare number: 2000
    steps:RATE@DURATION,...        e.g. steps:1000@60s,4000@120s,1000@60s
                                   (the prefix may be left out; the last step may omit its
                                   duration to hold that rate until stopped)
    ramp:FROM-TO@DURATION          e.g. ramp:500-5000@10m (linear)
    sine:BASE,AMPLITUDE,PERIOD[@DURATION]
                                   e.g. sine:3000,2000,60s@10m (AMPLITUDE <= BASE)
    diurnal:PEAK@DAY_DURATION      e.g. diurnal:8000@24m: one day's curve in 24 minutes

Rates are at most MAX_RATE_PER_S and durations (a step's, a period, a day) at most MAX_DURATION_S:
beyond them the arithmetic on a profile overflows or a run never ends (issue 32).

Time intervals are half-open: a step `1000@60s` covers [0 s, 60 s); at exactly 60 s the next step
applies. After a bounded profile's end, `rate_at` is 0 and `records_by` stays at its total.
"""

from __future__ import annotations

import math
import re
from abc import ABC, abstractmethod
from bisect import bisect_right
from dataclasses import dataclass, field

ACCEPTED_FORMS = (
    "constant:RATE[@DURATION] (or a bare RATE), "
    "steps:RATE@DURATION,RATE@DURATION,... (prefix optional; last DURATION optional), "
    "ramp:FROM-TO@DURATION, "
    "sine:BASE,AMPLITUDE,PERIOD[@DURATION], "
    "diurnal:PEAK@DAY_DURATION; "
    "durations take an s or m suffix (60s, 2m, 1.5m), rates are records/s, "
    "e.g. 'steps:1000@60s,4000@120s,1000@60s'"
)

MAX_RATE_PER_S = 1e9  # records/s: far beyond what one generator sends
MAX_DURATION_S = 30 * 86400.0  # 30 days

_NUMBER = r"\d+(?:\.\d+)?"
_NUMBER_RE = re.compile(_NUMBER)
_DURATION_RE = re.compile(rf"({_NUMBER})([sm])")
_SECONDS_PER_UNIT = {"s": 1.0, "m": 60.0}


class LoadProfile(ABC):
    """Target rate over time. `duration_s` None means unbounded (runs until stopped)."""

    spec: str
    duration_s: float | None

    @abstractmethod
    def rate_at(self, t_s: float) -> float:
        """Target rate (records/s) at `t_s` seconds after the start."""

    @abstractmethod
    def records_by(self, t_s: float) -> float:
        """Records that should have been sent by `t_s`: the integral of the rate over [0, t_s]."""

    def _clip(self, t_s: float) -> float:
        if t_s <= 0:
            return 0.0
        return t_s if self.duration_s is None else min(t_s, self.duration_s)

    def _active(self, t_s: float) -> bool:
        return t_s >= 0 and (self.duration_s is None or t_s < self.duration_s)


@dataclass(frozen=True)
class ConstantProfile(LoadProfile):
    rate_per_s: float
    duration_s: float | None = None
    spec: str = ""

    def rate_at(self, t_s: float) -> float:
        return self.rate_per_s if self._active(t_s) else 0.0

    def records_by(self, t_s: float) -> float:
        return self.rate_per_s * self._clip(t_s)


@dataclass(frozen=True)
class Step:
    rate_per_s: float
    duration_s: float | None  # None only for the last step: hold until stopped


@dataclass(frozen=True)
class StepsProfile(LoadProfile):
    steps: tuple[Step, ...]
    spec: str = ""
    duration_s: float | None = field(init=False)
    _starts_s: tuple[float, ...] = field(init=False, repr=False)
    _records_before: tuple[float, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        starts: list[float] = []
        before: list[float] = []
        t = total = 0.0
        for step in self.steps:
            starts.append(t)
            before.append(total)
            if step.duration_s is not None:
                t += step.duration_s
                total += step.rate_per_s * step.duration_s
        object.__setattr__(self, "_starts_s", tuple(starts))
        object.__setattr__(self, "_records_before", tuple(before))
        object.__setattr__(self, "duration_s", None if self.steps[-1].duration_s is None else t)

    def _index(self, t_s: float) -> int:
        return bisect_right(self._starts_s, t_s) - 1

    def rate_at(self, t_s: float) -> float:
        if not self._active(t_s):
            return 0.0
        return self.steps[self._index(t_s)].rate_per_s

    def records_by(self, t_s: float) -> float:
        t = self._clip(t_s)
        i = self._index(t)
        return self._records_before[i] + self.steps[i].rate_per_s * (t - self._starts_s[i])


@dataclass(frozen=True)
class RampProfile(LoadProfile):
    """Linear from `from_rate_per_s` at 0 to `to_rate_per_s` at `duration_s`."""

    from_rate_per_s: float
    to_rate_per_s: float
    duration_s: float
    spec: str = ""

    def rate_at(self, t_s: float) -> float:
        if not self._active(t_s):
            return 0.0
        return self.from_rate_per_s + (self.to_rate_per_s - self.from_rate_per_s) * t_s / self.duration_s

    def records_by(self, t_s: float) -> float:
        t = self._clip(t_s)
        slope = (self.to_rate_per_s - self.from_rate_per_s) / self.duration_s
        return self.from_rate_per_s * t + slope * t * t / 2


@dataclass(frozen=True)
class SineProfile(LoadProfile):
    """`base + amplitude * sin(2 pi t / period)`: starts at base, rising first."""

    base_rate_per_s: float
    amplitude_per_s: float
    period_s: float
    duration_s: float | None = None
    spec: str = ""

    def rate_at(self, t_s: float) -> float:
        if not self._active(t_s):
            return 0.0
        return self.base_rate_per_s + self.amplitude_per_s * math.sin(2 * math.pi * t_s / self.period_s)

    def records_by(self, t_s: float) -> float:
        t = self._clip(t_s)
        omega = 2 * math.pi / self.period_s
        return self.base_rate_per_s * t + self.amplitude_per_s / omega * (1 - math.cos(omega * t))


# A weekday's load, as a fraction of the peak at each hour (piecewise linear between the points,
# the day wrapping from 24:00 back to 00:00): a night trough at 03:00, a morning rise to a rush at
# 09:00, a midday plateau around 0.7, the evening peak at 18:00, then a decline through the night.
DIURNAL_SHAPE: tuple[tuple[float, float], ...] = (
    (0.0, 0.20),
    (3.0, 0.08),  # night low
    (5.0, 0.10),
    (7.0, 0.45),  # morning rise
    (9.0, 0.75),  # morning rush
    (12.0, 0.70),  # midday plateau
    (15.0, 0.72),
    (18.0, 1.00),  # evening peak
    (20.0, 0.80),
    (22.0, 0.45),
    (24.0, 0.20),
)
DIURNAL_NIGHT_LOW = min(f for _, f in DIURNAL_SHAPE)


@dataclass(frozen=True)
class DiurnalProfile(LoadProfile):
    """One day's load curve (`DIURNAL_SHAPE` times `peak_rate_per_s`) compressed into `duration_s`."""

    peak_rate_per_s: float
    duration_s: float
    spec: str = ""
    _knots_s: tuple[float, ...] = field(init=False, repr=False)
    _rates: tuple[float, ...] = field(init=False, repr=False)
    _records_at_knot: tuple[float, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        knots = tuple(hour / 24.0 * self.duration_s for hour, _ in DIURNAL_SHAPE)
        rates = tuple(frac * self.peak_rate_per_s for _, frac in DIURNAL_SHAPE)
        cumulative = [0.0]
        for i in range(1, len(knots)):
            cumulative.append(cumulative[-1] + (rates[i - 1] + rates[i]) / 2 * (knots[i] - knots[i - 1]))
        object.__setattr__(self, "_knots_s", knots)
        object.__setattr__(self, "_rates", rates)
        object.__setattr__(self, "_records_at_knot", tuple(cumulative))

    def _segment(self, t_s: float) -> tuple[int, float]:
        i = min(bisect_right(self._knots_s, t_s) - 1, len(self._knots_s) - 2)
        k0, k1 = self._knots_s[i], self._knots_s[i + 1]
        return i, self._rates[i] + (self._rates[i + 1] - self._rates[i]) * (t_s - k0) / (k1 - k0)

    def rate_at(self, t_s: float) -> float:
        if not self._active(t_s):
            return 0.0
        return self._segment(t_s)[1]

    def records_by(self, t_s: float) -> float:
        t = self._clip(t_s)
        i, rate = self._segment(t)
        return self._records_at_knot[i] + (self._rates[i] + rate) / 2 * (t - self._knots_s[i])


# ---------------------------------------------------------------------------------------------
# Parsing


def parse_profile(spec: str) -> LoadProfile:
    """Parse a profile spec (see the module docstring); a bad spec raises ValueError naming it."""
    text = spec.strip()
    kind, sep, body = text.partition(":")
    kind = kind.strip().lower()
    if not sep:
        if not text:
            raise _bad(spec, "empty spec")
        if _NUMBER_RE.fullmatch(text):
            kind, body = "constant", text
        elif "@" in text:
            kind, body = "steps", text
        else:
            raise _bad(spec, "neither a rate, a RATE@DURATION list nor KIND:...")
    parser = _PARSERS.get(kind)
    if parser is None:
        raise _bad(spec, f"unknown profile kind {kind!r}")
    try:
        return parser(body.strip(), spec)
    except _SpecError as exc:
        raise _bad(spec, str(exc)) from None


class _SpecError(Exception):
    pass


def _bad(spec: str, reason: str) -> ValueError:
    return ValueError(f"bad load profile {_short(spec, 200)!r}: {reason}; accepted forms: {ACCEPTED_FORMS}")


def _rate(text: str, what: str = "rate") -> float:
    text = text.strip()
    if not _NUMBER_RE.fullmatch(text):
        raise _SpecError(f"{what} {_short(text)!r} is not a non-negative number")
    rate = float(text)
    if rate > MAX_RATE_PER_S:
        raise _SpecError(f"{what} {_short(text)!r} is above {MAX_RATE_PER_S:g} records/s")
    return rate


def _short(text: str, limit: int = 40) -> str:
    """A spec or a part of one as a message quotes it: a long one cut (a number of 5,000 digits)."""
    return text if len(text) <= limit else f"{text[:limit // 2]}...({len(text)} characters)"


def _duration(text: str, what: str = "duration") -> float:
    text = text.strip().lower()
    match = _DURATION_RE.fullmatch(text)
    if match is None:
        raise _SpecError(f"{what} {_short(text)!r} is not a number with an s or m suffix (e.g. 60s, 2m)")
    seconds = float(match.group(1)) * _SECONDS_PER_UNIT[match.group(2)]
    if seconds <= 0:
        raise _SpecError(f"{what} {_short(text)!r} must be positive")
    if seconds > MAX_DURATION_S:
        raise _SpecError(f"{what} {_short(text)!r} is above {MAX_DURATION_S:g} s (30 days)")
    return seconds


def _split_at(body: str, required: bool) -> tuple[str, float | None]:
    head, sep, tail = body.partition("@")
    if not sep:
        if required:
            raise _SpecError("missing @DURATION")
        return head, None
    return head, _duration(tail)


def _parse_constant(body: str, spec: str) -> LoadProfile:
    head, duration_s = _split_at(body, required=False)
    return ConstantProfile(_rate(head), duration_s, spec=spec)


def _parse_steps(body: str, spec: str) -> LoadProfile:
    parts = [p.strip() for p in body.split(",")]
    if not body or any(not p for p in parts):
        raise _SpecError("expected RATE@DURATION items separated by commas")
    steps: list[Step] = []
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        head, duration_s = _split_at(part, required=not last)
        steps.append(Step(_rate(head), duration_s))
    return StepsProfile(tuple(steps), spec=spec)


def _parse_ramp(body: str, spec: str) -> LoadProfile:
    head, duration_s = _split_at(body, required=True)
    start, sep, end = head.partition("-")
    if not sep:
        raise _SpecError("expected FROM-TO before @")
    assert duration_s is not None
    return RampProfile(_rate(start, "FROM rate"), _rate(end, "TO rate"), duration_s, spec=spec)


def _parse_sine(body: str, spec: str) -> LoadProfile:
    head, duration_s = _split_at(body, required=False)
    parts = head.split(",")
    if len(parts) != 3:
        raise _SpecError("expected BASE,AMPLITUDE,PERIOD")
    base, amplitude = _rate(parts[0], "BASE"), _rate(parts[1], "AMPLITUDE")
    period_s = _duration(parts[2], "PERIOD")
    if amplitude > base:
        raise _SpecError(f"AMPLITUDE {amplitude:g} is above BASE {base:g} (the rate would go negative)")
    return SineProfile(base, amplitude, period_s, duration_s, spec=spec)


def _parse_diurnal(body: str, spec: str) -> LoadProfile:
    head, duration_s = _split_at(body, required=True)
    assert duration_s is not None
    return DiurnalProfile(_rate(head, "PEAK"), duration_s, spec=spec)


_PARSERS = {
    "constant": _parse_constant,
    "steps": _parse_steps,
    "ramp": _parse_ramp,
    "sine": _parse_sine,
    "diurnal": _parse_diurnal,
}
