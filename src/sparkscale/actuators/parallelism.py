"""`set_parallelism` of a query: a migration of its state partitions (and, with a shape, of its
executors), carried out by the migration runner with the configured strategy; the seed's metrics
of the migration come back as the result's figures as soon as it is done: the phases' and one look
at the query's progress, the rest marked pending in the journal for the leading daemon to record
(monitors/migration_followup.py). Never decides: the planner has already mapped stage wishes to one
query."""

from __future__ import annotations

import contextlib
import time
from typing import Any, ClassVar

import redis
import structlog
from pydantic import JsonValue

from sparkscale.actuators.base import ActuationContext, register_actuator
from sparkscale.actuators.migration import JournalStore, MigrationError, MigrationRunner, new_shape
from sparkscale.model.action_result import ActionResult
from sparkscale.model.journal import Journal
from sparkscale.model.plan import Action
from sparkscale.monitors.migration_followup import FOLLOW_UP, look, mark

log = structlog.get_logger(__name__)


@register_actuator
class MigrationActuator:
    action_types: ClassVar[tuple[str, ...]] = ("set_parallelism",)

    def execute(self, action: Action, ctx: ActuationContext) -> ActionResult:
        """Migrate the query (`action.query`, else `action.operator`) to `action.to` partitions, or,
        with `ctx.resume`, complete the migration a dead leader left running (or `ctx.migration_id`),
        or, with `ctx.abort`, undo `ctx.migration_id`. A migration recovered forward after a failed
        step (`done_degraded`) is done: the query runs on the new partitions; the detail says so."""
        query = action.query or action.operator
        assert query is not None and action.to is not None
        strategy = ctx.strategy or ctx.cfg.migration.strategy
        if not ctx.resume:
            log.info("migration.start", app=ctx.app.name, action=action.summary(), epoch=ctx.epoch,
                     strategy=strategy, reason=action.reason)
        runner = MigrationRunner(ctx.cfg, ctx.app, ctx.zk, ctx.redis, ctx.epoch, ctx.is_leader, ctx.on_phase,
                                 ctx.restart_app)
        journal: Journal | None
        try:
            if ctx.abort:
                assert ctx.migration_id is not None, "an abort names its migration"
                journal = runner.abort(ctx.migration_id)
            elif ctx.resume:
                journal = runner.resume(ctx.migration_id)
            else:
                journal = runner.start(query, action.to, strategy, ctx.identity, ctx.shape)
        except MigrationError as exc:
            journal = runner.store.read()
            return ActionResult(action, "failed", str(exc), figures={
                "migration": journal.id if journal else None, "status": journal.status if journal else None,
                "phase": journal.next if journal else None})
        if journal is None:
            return ActionResult(action, "skipped", "no migration was running")
        if journal.status == "aborted":
            way = journal.marks["recovery"]["attempts"][-1]
            return ActionResult(action, "done", f"migration {journal.id} aborted: {journal.query} runs on "
                                f"{way['partitions']} partitions ({way['way']}), sources resumed",
                                figures={"migration": journal.id, "status": journal.status})
        figures: dict[str, Any] = dict(journal.marks.get("metrics", {}))
        figures.update({"migration": journal.id, "strategy": journal.strategy, "phases_s": journal.phase_durations(),
                        "resumed_by": journal.marks.get("resumed_by", []), "status": journal.status})
        if ctx.measure:
            figures.update(follow_up_once(ctx, runner.store, journal))
        detail = (f"{journal.query}: {journal.from_partitions} -> {journal.to_partitions} partitions "
                  f"({journal.strategy})")
        shape = new_shape(journal)
        if shape is not None:
            detail += f", executors restarted as {shape.describe()}"
        if journal.status == "done_degraded":
            detail += (f"; done_degraded: {journal.detail} (recovered forward: the query runs on the new "
                       "partitions, sources resumed)")
        log.info("migration.measured", app=ctx.app.name, id=journal.id,
                 **{k: v for k, v in figures.items() if not isinstance(v, (dict, list))})
        return ActionResult(action, "done", detail, figures=figures)


def follow_up_once(ctx: ActuationContext, store: JournalStore, journal: Journal) -> dict[str, JsonValue]:
    """The follow-up figures one read of the history knows now, and `follow_up`: "pending" (written
    to the journal, for the leading daemon to record) or "measured". Never waits: the caller (a
    manual `migrate`, the daemon's dispatch) holds the app's leader lock until this returns."""
    now = time.time()
    try:
        seen = look(ctx.cfg, ctx.redis, journal, now)
    except redis.RedisError as exc:
        log.warning("migration.follow_up_unread", app=ctx.app.name, id=journal.id, error=str(exc))
        seen = None
    mark(journal, seen, now)
    with contextlib.suppress(MigrationError):  # fenced (logged): no longer the leader, whose journal it now is
        store.write(journal)
    return {**(seen.figures if seen else {}), "follow_up": journal.marks[FOLLOW_UP]["status"]}
