"""The execute seam: actuators, their registry, and `dispatch`, the one path from a decision to its
results (log the decision, carry out each action, log the results).

An actuator carries out the action types it registered for and reports a typed `ActionResult`; it
never decides. The daemon, the leader's manual requests and the CLI acting without a leader all go
through `dispatch`, with the action log passed in (anything with `append_decision` and
`append_results`), so a new actuator is one file plus `@register_actuator`: built-in modules of
this package are found by name, third-party ones through the entry-point group
`sparkscale.actuators` (a module that registers at import, or an actuator class).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Protocol, TypeVar, runtime_checkable

import structlog

from sparkscale.model.action_result import ActionResult
from sparkscale.model.plan import Action
from sparkscale.registry import ACTUATORS

if TYPE_CHECKING:
    import redis
    from kazoo.client import KazooClient

    from sparkscale.config import AppConfig, Config
    from sparkscale.model.executor_shape import ExecutorShape
    from sparkscale.model.snapshot import Snapshot
    from sparkscale.monitors.spark_rest import SparkRestClient
    from sparkscale.store.action_records import DecisionRecord

log = structlog.get_logger(__name__)

@dataclass(frozen=True)
class ActuationContext:
    """What an actuator may use to act on one app, built by the caller (daemon, manual request, CLI).

    `epoch` fences the commands (the app's leader lock); `is_leader` is asked before each command.
    The rest is per request: `restart_app` restarts the whole application (an executor shape
    change), `strategy` overrides `migration.strategy`, `shape` is a new executor shape, `resume`
    completes the migration a dead leader left running (with `migration_id`: the operator's
    `--resume` of that one, also when it needs attention), `abort` undoes `migration_id` (the
    operator's `--abort`), `on_phase` hears each migration phase."""

    cfg: Config
    app: AppConfig
    zk: KazooClient
    redis: redis.Redis
    epoch: int
    is_leader: Callable[[], bool]
    identity: str
    restart_app: Callable[[], object] | None = None
    strategy: str | None = None
    shape: ExecutorShape | None = None
    resume: bool = False
    migration_id: str | None = None
    abort: bool = False
    measure: bool = True
    on_phase: Callable[..., None] | None = field(default=None, compare=False)

    @property
    def rest(self) -> SparkRestClient:
        """The app's driver REST API (Spark's)."""
        from sparkscale.monitors.spark_rest import driver_rest

        return driver_rest(self.cfg, self.app)


@runtime_checkable
class Actuator(Protocol):
    """Carries out actions of `action_types`; reports, never decides."""

    action_types: ClassVar[tuple[str, ...]]

    def execute(self, action: Action, ctx: ActuationContext) -> ActionResult:
        ...


class ActionLogWriter(Protocol):
    """The part of the action log `dispatch` writes to (daemon/action_log.py's ActionLog)."""

    def append_decision(self, record: DecisionRecord, snapshot: Snapshot | None = None) -> str:
        ...

    def append_results(self, decision_id: str, app: str, results: Iterable[ActionResult]) -> str:
        ...


A = TypeVar("A", bound=type)


def register_actuator(cls: A) -> A:
    """Class decorator: `cls()` carries out every type in `cls.action_types` (one actuator per type)."""
    types = getattr(cls, "action_types", None)
    if not types or not all(isinstance(t, str) for t in types):
        raise TypeError(f"{cls.__qualname__} has no `action_types` (a non-empty tuple of action type names)")
    if not callable(getattr(cls, "execute", None)):
        raise TypeError(f"{cls.__qualname__} has no `execute` method")
    for action_type in types:
        ACTUATORS.register(action_type, cls)
    return cls


def actuator_for(action_type: str) -> Actuator:
    """A fresh instance of the actuator registered for `action_type`."""
    try:
        cls: type[Actuator] = ACTUATORS.get(action_type)
    except KeyError:
        known = ", ".join(sorted(ACTUATORS.names())) or "none"
        raise KeyError(f"no actuator for action type {action_type!r} (registered: {known})") from None
    return cls()


def execute(action: Action, ctx: ActuationContext) -> ActionResult:
    """Carry out one action through its registered actuator (a missing actuator is a failed result)."""
    try:
        actuator = actuator_for(action.type)
    except KeyError as exc:
        return ActionResult(action, "failed", str(exc.args[0]))
    log.info("actuator.start", app=ctx.app.name, action=action.summary(), epoch=ctx.epoch, reason=action.reason)
    result = actuator.execute(action, ctx)
    if result.status == "failed":
        log.error("actuator.failed", app=ctx.app.name, action=action.summary(), detail=result.detail)
    return result


def dispatch(action_log: ActionLogWriter, record: DecisionRecord, actions: Sequence[Action], ctx: ActuationContext,
             snapshot: Snapshot | None = None, stop_after_failure: bool = False) -> tuple[str, list[ActionResult]]:
    """Log the decision `record` (before acting: no unrecorded action), carry out `actions` in order
    (with `stop_after_failure`, none after one that was not done), log their results. Returns the
    decision's id in the log and the results."""
    decision_id = action_log.append_decision(record, snapshot)
    return decision_id, carry_out(action_log, decision_id, actions, ctx, stop_after_failure)


def carry_out(action_log: ActionLogWriter, decision_id: str, actions: Sequence[Action], ctx: ActuationContext,
              stop_after_failure: bool = False) -> list[ActionResult]:
    """Carry out the actions of the logged decision `decision_id` and log their results (the half
    of `dispatch` that the daemon runs in the background, after logging the decision itself)."""
    results: list[ActionResult] = []
    for action in actions:
        result = execute(action, ctx)
        results.append(result)
        if stop_after_failure and result.status != "done":
            break
    if actions:
        action_log.append_results(decision_id, ctx.app.name, results)
    return results
