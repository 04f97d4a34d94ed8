"""A migration's follow-up figures (restore, catch-up, recovery, rate stabilisation) without waiting
for them: a `look` is one read of the query's progress history and `follow_up` over it.

Waiting for them (up to `migration.measure_timeout_s` after the migration is done) would keep the
caller, and the app's leader lock, minutes after the migration ended. So the actuator looks once
when the migration is done and marks the rest pending in the journal (`marks["follow_up"]`); the
leading daemon looks again each cycle and records the figures once complete, or once
`measure_timeout_s` has passed since the migration was done (daemon/followup.py); `migrate --list`
and `explain` look at read time while they are pending: the history keeps them reconstructible.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, cast

import redis

from sparkscale.config import Config
from sparkscale.monitors.migration_metrics import follow_up, followup_figures, history_reader, timeline_of

if TYPE_CHECKING:
    from sparkscale.model.journal import FollowUpMark, Journal

FOLLOW_UP: Final = "follow_up"  # the mark: {"status": PENDING} or {"status": MEASURED, "measured_at", figures}
PENDING: Final = "pending"
MEASURED: Final = "measured"
FIGURES = ("restore_s", "catch_up_s", "recovery_s", "stabilization_s", "stabilization_basis")
DONE = ("done", "done_degraded")


@dataclass(frozen=True)
class Look:
    """The figures as far as one read of the history knows them; `final`: complete, or the time to
    wait for them is over (then each one not reached says so)."""

    figures: dict[str, Any]
    final: bool


def look(cfg: Config, client: redis.Redis, journal: Journal, now: float) -> Look:
    """One read of the migrated query's history (one XRANGE), `follow_up` over it, at `now`."""
    mcfg = cfg.migration
    points = history_reader(cfg, journal.app, client, journal).read()
    result = follow_up(timeline_of(journal), points, mcfg.stable_tolerance, mcfg.stable_window_s)
    final = result.complete or now >= done_at(journal) + mcfg.measure_timeout_s
    return Look(followup_figures(result, journal, mcfg.measure_timeout_s if final else None), final)


def done_at(journal: Journal) -> float:
    """When the migration was done: its `done` phase, else (`done_degraded`) its recovery's end."""
    ended = (journal.marks.get("recovery") or {}).get("ended_at")
    return float(journal.phases.get("done") or ended or max(journal.phases.values(), default=journal.requested_at))


def pending(journal: Journal | None) -> bool:
    """A done migration whose follow-up figures are still to be recorded."""
    return (journal is not None and journal.status in DONE
            and (journal.marks.get(FOLLOW_UP) or {}).get("status") == PENDING)


def mark(journal: Journal, seen: Look | None, now: float) -> None:
    """Record `seen` in the journal's marks: pending unless final; final figures also go into
    `marks["metrics"]`, the migration's figures (`migrate` answers a repeated request with them)."""
    if seen is None or not seen.final:
        journal.marks[FOLLOW_UP] = {"status": PENDING}
        return
    # The figures are FollowUpMark's extra keys (extra="allow"), which a TypedDict cannot spell.
    journal.marks[FOLLOW_UP] = cast("FollowUpMark", {"status": MEASURED, "measured_at": round(now, 3), **seen.figures})
    journal.marks.setdefault("metrics", {}).update(seen.figures)


def shown(cfg: Config, client: redis.Redis, journal: Journal, now: float) -> dict[str, Any] | None:
    """What an operator sees of the journal's follow-up (None: it has none): the recorded figures,
    or, still pending (no daemon leads the app, or not yet), a look now: `status` "provisional"
    (more may come) or "measured now" (final, not recorded)."""
    recorded = journal.marks.get(FOLLOW_UP)
    if not recorded or recorded.get("status") != PENDING:
        return dict(recorded) if recorded else None  # a copy: the caller shows it, the journal keeps its own
    try:
        seen = look(cfg, client, journal, now)
    except redis.RedisError as exc:
        return {"status": PENDING, "error": f"the progress history is unreadable: {exc}"}
    return {"status": "measured now" if seen.final else "provisional", **seen.figures}
