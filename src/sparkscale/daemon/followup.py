"""Migration follow-ups that end after the migration (monitors/migration_followup.py): the leading
daemon records a done migration's pending figures in its journal, and `explain` finds them for a
logged migration result.

The daemon calls `finish` once a cycle between actions (so no migration writes the journal
meanwhile): one look, one XRANGE; the journal is written, fenced by the leader's epoch, only once
the figures are final (complete, or `migration.measure_timeout_s` after the migration was done).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import redis
import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException

from sparkscale.actuators.migration import JournalStore, MigrationError
from sparkscale.config import Config
from sparkscale.model.action_result import ActionResult
from sparkscale.model.journal import Journal
from sparkscale.monitors.migration_followup import FOLLOW_UP, PENDING, look, mark, pending, shown

log = structlog.get_logger(__name__)


def finish(cfg: Config, zk: KazooClient, client: redis.Redis, epoch: int | None, journal: Journal | None,
           now: float | None = None) -> Journal | None:
    """`journal` (the app's, as the cycle read it) with its pending follow-up recorded if final at
    `now`; else as it was (not pending, not final yet, or not written: logged, tried next cycle)."""
    if not pending(journal) or epoch is None:
        return journal
    assert journal is not None
    now = time.time() if now is None else now
    try:
        seen = look(cfg, client, journal, now)
        if not seen.final:
            return journal
        store = JournalStore(zk, cfg.zookeeper.root, journal.app, epoch=epoch)
        current = store.read()
        if current is None or current.id != journal.id or not pending(current):
            return current  # another migration began, or another leader recorded it
        mark(current, seen, now)
        store.write(current)
    except (redis.RedisError, MigrationError, KazooException) as exc:
        log.warning("migration.follow_up_not_recorded", app=journal.app, id=journal.id, error=str(exc) or repr(exc),
                    retry="next cycle")
        return journal
    log.info("migration.followed_up", app=current.app, id=current.id, done_at_s=round(now - current.requested_at, 3),
             **{k: v for k, v in seen.figures.items() if not isinstance(v, (dict, list))})
    return current


def pending_migrations(results: Iterable[ActionResult]) -> set[str]:
    """The migrations whose logged result (an ActionResult) says their follow-up was pending."""
    return {r.figures["migration"] for r in results
            if r.figures and r.figures.get(FOLLOW_UP) == PENDING and r.figures.get("migration")}


def follow_ups(cfg: Config, client: redis.Redis, journal: Journal | None, migrations: Iterable[str],
               now: float) -> dict[str, dict[str, Any] | str]:
    """For `explain`: each migration's follow-up as the app's journal holds it (`shown`: recorded, or
    measured now), or why it is not known (the journal holds another migration since)."""
    out: dict[str, dict[str, Any] | str] = {}
    for migration in sorted(migrations):
        if journal is not None and journal.id == migration:
            out[migration] = shown(cfg, client, journal, now) or "not recorded in the journal"
        else:
            held = f"migration {journal.id}" if journal is not None else "no migration"
            out[migration] = f"not known: the app's journal holds {held} now (it keeps the last one)"
    return out
