"""Excluded periods (`guards.excluded_periods` for every app, `apps[].excluded_periods` for one):
weekly windows in which the daemon takes no scaling action (Flink's autoscaler has the same idea:
`excluded.periods`). Pure.

Written as `<days> HH:MM-HH:MM [ZONE]`, ZONE an IANA time zone (`Europe/Berlin`; UTC when left
out): days are `daily`, a day (`Sat`), a range (`Mon-Fri`, `Fri-Mon`
wraps over the weekend) or a comma list of those (`Mon,Wed-Thu`); the end may be `24:00`. A window
whose end is not after its start crosses midnight: it begins on the named days and ends the next
day (`daily 23:30-00:30`, `Sat 22:00-02:00` runs into Sunday). It lives here, beside the config
that validates it, because the config may not import the policies that read it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import AfterValidator

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")  # datetime.weekday()'s order
MINUTES_PER_DAY = 24 * 60
EXAMPLES = "'Sat 00:00-06:00', 'daily 23:30-00:30' or 'Mon-Fri 12:00-13:00 Europe/Berlin' (UTC unless a zone is named)"
_SHAPE = re.compile(r"\s*(?P<days>\S+)\s+(?P<start>\d{1,2}:\d{2})\s*-\s*(?P<end>\d{1,2}:\d{2})"
                    r"(?:\s+(?P<zone>[A-Za-z][A-Za-z0-9_+\-/]{0,63}))?\s*")


class PeriodError(ValueError):
    """A period that cannot be read; the message says what is wrong and shows the syntax."""


@dataclass(frozen=True)
class Period:
    """One window: on each of `days` (0 = Monday) from `start_min` to `end_min` minutes after
    midnight in `zone`, into the next day when `end_min <= start_min`. `text` is how it was written."""

    text: str
    days: frozenset[int]
    start_min: int
    end_min: int
    zone: str = "UTC"

    @property
    def crosses_midnight(self) -> bool:
        return self.end_min <= self.start_min

    def contains(self, epoch_s: float) -> bool:
        """Whether the instant `epoch_s` (seconds since the epoch) falls in the window."""
        at = datetime.fromtimestamp(epoch_s, ZoneInfo(self.zone))
        day, minute = at.weekday(), at.hour * 60 + at.minute
        if not self.crosses_midnight:
            return day in self.days and self.start_min <= minute < self.end_min
        return (day in self.days and minute >= self.start_min) or ((day - 1) % 7 in self.days
                                                                   and minute < self.end_min)


def parse_period(text: str) -> Period:
    """`text` as a Period; a PeriodError saying what is wrong otherwise."""
    found = _SHAPE.fullmatch(text)
    if found is None:
        raise PeriodError(f"expected '<days> HH:MM-HH:MM [ZONE]', such as {EXAMPLES}")
    start, end = _minutes(found["start"], "start"), _minutes(found["end"], "end", allow_24=True)
    if start == MINUTES_PER_DAY:
        raise PeriodError("the start must be before 24:00")
    if start == end:
        raise PeriodError(f"start and end are both {found['start']}: an empty window (use 'daily 00:00-24:00' "
                          "for a whole day)")
    zone = found["zone"] or "UTC"
    try:
        ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError):
        raise PeriodError(f"{zone!r} is not a time zone: expected an IANA name such as UTC, Europe/Berlin or "
                          "America/New_York") from None
    return Period(text.strip(), _days(found["days"]), start, end, zone)


def _checked(texts: list[str]) -> list[str]:
    """`texts` when each is a period, else a ValueError naming the item (the validator of
    `ExcludedPeriods`)."""
    for i, text in enumerate(texts):
        try:
            parse_period(text)
        except PeriodError as exc:
            raise ValueError(f"excluded_periods[{i}] = {text!r}: {exc}") from None
    return texts


# The type of `guards.excluded_periods` and `apps[].excluded_periods`: each item checked at load.
ExcludedPeriods = Annotated[list[str], AfterValidator(_checked)]


def parse_periods(texts: Iterable[str]) -> tuple[Period, ...]:
    """`texts` read (each was checked when the config was validated)."""
    return tuple(parse_period(text) for text in texts)


def _minutes(clock: str, which: str, allow_24: bool = False) -> int:
    hours, minutes = (int(part) for part in clock.split(":"))
    if allow_24 and (hours, minutes) == (24, 0):
        return MINUTES_PER_DAY
    if hours > 23 or minutes > 59:
        raise PeriodError(f"the {which} {clock} is not a time of day (00:00 to 23:59"
                          + (", or 24:00 for an end)" if allow_24 else ")"))
    return hours * 60 + minutes


def _days(text: str) -> frozenset[int]:
    if text.lower() == "daily":
        return frozenset(range(7))
    days: set[int] = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        a, b = _day(first), _day(last) if last else _day(first)
        days.update((a + k) % 7 for k in range((b - a) % 7 + 1))
    return frozenset(days)


def _day(name: str) -> int:
    key = name.strip().lower()
    for index, day in enumerate(DAYS):
        if key in (day, _FULL_NAMES[index]):
            return index
    raise PeriodError(f"{name!r} is not a day: expected 'daily' or Mon, Tue, Wed, Thu, Fri, Sat, Sun, a range "
                      "such as Mon-Fri, or a comma list such as Mon,Wed")


_FULL_NAMES = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")


def active_period(periods: tuple[Period, ...], epoch_s: float) -> Period | None:
    """The first of `periods` that `epoch_s` falls in (None: none)."""
    return next((p for p in periods if p.contains(epoch_s)), None)
