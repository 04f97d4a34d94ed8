"""`set_executor_memory`: a new `spark.executor.memory`, set by restarting the whole application with a
new executor shape, the path `sparkscale migrate --executor-memory-mb` takes (daemon/manual.py's
`run_migration`): a migration of the action's query that keeps its state partitions and carries the
shape, carried out by the migration actuator (parallelism.py) under the runner's checks. So a query
whose source does not replay, or an unnamed one on the session checkpoint, refuses the restart with
the runner's own message, which is this action's failed result. Never decides: the planner chose the
memory (policies/memory_apply.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import ClassVar

from sparkscale.actuators.base import ActuationContext, register_actuator
from sparkscale.actuators.parallelism import MigrationActuator
from sparkscale.model.action_result import ActionResult
from sparkscale.model.executor_shape import ExecutorShape
from sparkscale.model.plan import Action, ActionType
from sparkscale.protocol.streams import query_partitions


@register_actuator
class ExecutorMemoryActuator:
    action_types: ClassVar[tuple[str, ...]] = (ActionType.SET_EXECUTOR_MEMORY,)

    def execute(self, action: Action, ctx: ActuationContext) -> ActionResult:
        """Restart the app with executors of `action.to` MiB (the cores as they are), journaled as
        a migration of `action.query` to the state partitions it has."""
        assert action.query is not None and action.to is not None, "checked when the action was made"
        app = ctx.app
        if app.executor_memory_mb == action.to:
            return ActionResult(action, "skipped", f"{app.name}'s executors already have {action.to} MiB")
        assert app.shuffle_partitions is not None, "set when the config is validated"
        partitions = query_partitions(ctx.redis, ctx.cfg.redis.key_prefix, app.name, action.query,
                                      app.shuffle_partitions)
        restart = Action("set_parallelism", operator=action.query, from_=partitions, to=partitions,
                         reason=action.reason, query=action.query)
        shape = ExecutorShape(app.executor_cores, action.to)
        result = MigrationActuator().execute(restart, replace(ctx, shape=shape))
        return ActionResult(action, result.status, result.detail, result.command, result.ack_s, result.confirm_s,
                            result.executors_after, result.figures)
