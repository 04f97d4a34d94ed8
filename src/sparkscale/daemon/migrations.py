"""Running a migration on behalf of the daemon or the operator: logged before, carried out by the
migration actuator, its metrics logged after (one place for the daemon's plans, manual requests,
the CLI without a daemon, and a successor resuming a dead leader's migration)."""

from __future__ import annotations

import time
from collections.abc import Callable

import redis
import structlog
from kazoo.client import KazooClient

from sparkscale.actuators.executors import ActionResult, ExecutorActuator
from sparkscale.actuators.migration import (
    Journal,
    MigrationError,
    MigrationRunner,
    PhaseCallback,
    measure_after,
)
from sparkscale.config import AppConfig, Config
from sparkscale.daemon.action_log import ActionLog, DecisionRecord
from sparkscale.pipeline.submit import ExecutorShape, restart
from sparkscale.plan import Action, Plan

log = structlog.get_logger(__name__)


def query_migration(actions: tuple[Action, ...] | list[Action], query: str,
                    current_partitions: int) -> tuple[Action | None, list[Action]]:
    """A plan's `set_parallelism` actions as one migration of the query, and the actions it covers.

    A policy names the operator (a stage of the snapshot) that is partition-bound, but a Spark
    query has one state/shuffle partition count for all its shuffled stages
    (`spark.sql.shuffle.partitions` at its first run, kept in the checkpoint): every such stage's
    wish becomes one migration of the query, to the largest count asked for. A stage with another
    count (the one reading the source has the source's partitions) cannot be changed by a
    migration: its wish is not covered."""
    wishes = [a for a in actions if a.type == "set_parallelism" and a.to is not None
              and a.from_ == current_partitions and a.to != current_partitions]
    if not wishes:
        return None, []
    target = max(wishes, key=lambda a: a.to or 0)
    reasons = "; ".join(f"{a.operator}: {a.reason}" for a in wishes)
    return Action.set_parallelism(query, current_partitions, target.to or 1, reasons), wishes


def app_restarter(cfg: Config, app_name: str, config_path: str | None,
                  overrides: tuple[str, ...] | list[str]) -> Callable[[], object]:
    """How a migration restarts the whole application: stop its driver and submit it again with the
    config the caller (daemon or CLI) runs with."""
    return lambda: restart(cfg, app_name, config_path, overrides)


def migrate(cfg: Config, app: AppConfig, zk: KazooClient, client: redis.Redis, epoch: int,
            is_leader: Callable[[], bool], identity: str, action: Action, strategy: str,
            on_phase: PhaseCallback | None = None, measure: bool = True,
            resume: bool = False, shape: ExecutorShape | None = None,
            restart_app: Callable[[], object] | None = None) -> tuple[Journal | None, ActionResult]:
    """Carry out a set_parallelism action (or resume the running migration), with a new executor
    shape if `shape` (a whole-application restart through `restart_app`); the result carries the
    migration's metrics as figures. Logs nothing to the action log (the caller does)."""
    assert action.operator is not None and action.to is not None
    runner = MigrationRunner(cfg, app, zk, client, epoch, is_leader, on_phase, restart_app)
    try:
        journal = (runner.resume() if resume
                   else runner.start(action.operator, action.to, strategy, identity, shape))
    except MigrationError as exc:
        journal = runner.store.read()
        return journal, ActionResult(action, "failed", str(exc), figures={
            "migration": journal.id if journal else None, "status": journal.status if journal else None,
            "phase": journal.next if journal else None})
    if journal is None:
        return None, ActionResult(action, "skipped", "no migration was running")
    figures = dict(journal.marks.get("metrics", {}))
    figures.update({"migration": journal.id, "strategy": journal.strategy, "phases_s": journal.phase_durations(),
                    "resumed_by": journal.marks.get("resumed_by", [])})
    if measure:
        figures.update(measure_after(cfg, app, client, journal))
    detail = f"{journal.query}: {journal.from_partitions} -> {journal.to_partitions} partitions ({journal.strategy})"
    if journal.new_shape is not None:
        detail += f", executors restarted as {journal.new_shape.describe()}"
    log.info("migration.measured", app=app.name, id=journal.id,
             **{k: v for k, v in figures.items() if not isinstance(v, (dict, list))})
    return journal, ActionResult(action, "done", detail, figures=figures)


def run_migration(cfg: Config, app: AppConfig, zk: KazooClient, client: redis.Redis, action_log: ActionLog,
                  epoch: int, is_leader: Callable[[], bool], identity: str, query: str, to_partitions: int | None,
                  strategy: str, reason: str, executors: int | None = None,
                  executor_actuator: ExecutorActuator | None = None, on_phase: PhaseCallback | None = None,
                  measure: bool = True, resume: bool = False, shape: ExecutorShape | None = None,
                  restart_app: Callable[[], object] | None = None) -> tuple[str, Journal | None, ActionResult]:
    """A manual (or resumed) migration: log the decision, migrate, optionally set the executors, log
    the results. `to_partitions` None keeps the partitions (a shape change only)."""
    current = MigrationRunner(cfg, app, zk, client, epoch, is_leader).current_partitions(query)
    to_partitions = current if to_partitions is None else to_partitions
    action = Action.set_parallelism(query, max(current, 1), to_partitions, reason)
    how = strategy + (f", executors as {shape.describe()}" if shape else "")
    plan = Plan("manual", app.name, {query: to_partitions}, (action,),
                (f"{reason} ({how}, by {identity}, epoch {epoch})",))
    decision_id = action_log.append_decision(
        DecisionRecord(app.name, time.time(), "", identity, epoch, "manual", "partition_bound", plan, "manual"))
    journal, result = migrate(cfg, app, zk, client, epoch, is_leader, identity, action, strategy, on_phase,
                              measure, resume, shape, restart_app)
    results = [result]
    if result.status == "done" and executors is not None and executor_actuator is not None:
        results.append(executor_actuator.execute(Action.scale_executors(executors, executors, reason), epoch))
    action_log.append_results(decision_id, app.name, results)
    return decision_id, journal, result
