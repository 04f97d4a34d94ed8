"""Excluded periods in a time zone of the operator's choosing, and an app's own periods beside the
ones for every app (config/periods.py, policies/excluded_periods.py)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from sparkscale.config import AppConfig, GuardsConfig
from sparkscale.config.periods import PeriodError, parse_period
from sparkscale.policies.guard_input import GuardInput
from sparkscale.policies.guards import apply_guards
from sparkscale.policies.history import DecisionHistory
from tests.unit.test_guards_stability import LOOP_OFF, OFF, notes, scale_plan, snap, target


def utc(month: int, day: int, hour: int, minute: int = 0) -> float:
    return datetime(2026, month, day, hour, minute, tzinfo=UTC).timestamp()


def test_a_period_with_a_zone_follows_its_local_clock_through_summer_time():
    morning = parse_period("Mon-Fri 08:00-09:00 Europe/Berlin")
    assert morning.zone == "Europe/Berlin"
    # Monday 23 November 2026: Berlin is UTC+1, so 08:30 there is 07:30 UTC.
    assert morning.contains(utc(11, 23, 7, 30)) and not morning.contains(utc(11, 23, 8, 30))
    # Monday 6 July 2026: UTC+2, so 08:30 there is 06:30 UTC.
    assert morning.contains(utc(7, 6, 6, 30)) and not morning.contains(utc(7, 6, 7, 30))
    # Without a zone: UTC, as before.
    assert parse_period("Mon 08:00-09:00").zone == "UTC" and parse_period("Mon 08:00-09:00").contains(utc(11, 23, 8))


def test_an_unknown_zone_is_refused_naming_it():
    with pytest.raises(PeriodError, match="'Mars/Olympus' is not a time zone"):
        parse_period("daily 01:00-02:00 Mars/Olympus")
    with pytest.raises(ValidationError, match=r"excluded_periods\[0\] = 'daily 01:00-02:00 Nowhere': 'Nowhere' is not"):
        AppConfig(name="a", excluded_periods=["daily 01:00-02:00 Nowhere"])


def guard_app(app: AppConfig, taken_at: float, **settings: object):
    given = GuardInput(snap(taken_at=taken_at), DecisionHistory.empty(), app)
    return apply_guards(scale_plan(4, 6), given, GuardsConfig(**{**OFF, **settings}), LOOP_OFF)


def test_an_apps_own_period_holds_that_app_only_and_adds_to_the_global_ones():
    frozen = AppConfig(name="app", min_executors=1, max_executors=8,
                       excluded_periods=["Mon-Fri 08:00-09:00 Europe/Berlin"])
    free = AppConfig(name="app", min_executors=1, max_executors=8)
    monday_0830_berlin = utc(11, 23, 7, 30)
    plan = guard_app(frozen, monday_0830_berlin)
    assert target(plan) is None
    assert notes(plan, "excluded period") == ["guard excluded period: scale_executors 4 -> 6 held: inside the "
                                              "excluded period 'Mon-Fri 08:00-09:00 Europe/Berlin'"]
    assert target(guard_app(free, monday_0830_berlin)) == 6
    # The global periods still hold the app with periods of its own.
    saturday = utc(11, 28, 3)
    assert target(guard_app(frozen, saturday, excluded_periods=["Sat 00:00-06:00"])) is None
    assert target(guard_app(frozen, saturday)) == 6
