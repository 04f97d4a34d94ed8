"""Nonstop executor changes (N-Storm's thread-level migration on Spark: no query restarts).

`scale_executors` sends `set_executors` to the in-driver agent, which requests the new total from
the master and, on scale-in, decommissions the newest executors gracefully (they finish their
running tasks, then exit: the lazy kill). `replace_executor` makes before it breaks: one executor
more (the master places it by its policy), then the old one is decommissioned.

An action is done only once the change shows in the driver's Spark REST API (the agent's ack only
says Spark accepted it); the time that took is recorded. No ack, a refusal, or no visible change
within the configured timeouts makes the action `failed`, with the reason.

The actuator never decides: it carries out one action and reports.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import structlog
from kazoo.client import KazooClient

from sparkscale.actuators.base import ActuationContext, register_actuator
from sparkscale.config import ActuatorConfig
from sparkscale.model.action_result import ActionResult
from sparkscale.model.plan import Action
from sparkscale.monitors.spark_rest import SparkRestClient, SparkRestError
from sparkscale.protocol.commands import AckTimeout, send_command, wait_ack

log = structlog.get_logger(__name__)

CONFIRM_POLL_S = 0.5  # how often the REST API is read while waiting for a change to show


@register_actuator
class ExecutorActuator:
    """`scale_executors` and `replace_executor`, carried out nonstop through the control agent."""

    action_types: ClassVar[tuple[str, ...]] = ("scale_executors", "replace_executor")

    def execute(self, action: Action, ctx: ActuationContext) -> ActionResult:
        change = ExecutorChange(ctx.zk, ctx.cfg.zookeeper.root, ctx.app.name, ctx.rest, ctx.cfg.actuator,
                                ctx.is_leader)
        return change.execute(action, ctx.epoch)


def active_executor_ids(rest: SparkRestClient, app: str) -> list[str]:
    """The ids of the app's active executors, as the driver's REST API shows them."""
    app_id = rest.application(app).id
    return [e.id for e in rest.executors(app_id) if e.active]

class LeadershipLost(RuntimeError):
    """The process is no longer the leader: it must not write commands."""


@dataclass
class ExecutorChange:
    """One executor change of one app: the commands to the agent and the wait for Spark to show it."""

    zk: KazooClient
    zk_root: str
    app: str
    rest: SparkRestClient
    cfg: ActuatorConfig
    is_leader: Callable[[], bool]

    def execute(self, action: Action, epoch: int) -> ActionResult:
        if action.type == "scale_executors":
            return self._scale(action, epoch)
        if action.type == "replace_executor":
            return self._replace(action, epoch)
        return ActionResult(action, "skipped", f"{action.type} is not an executor action")

    # -- actions ----------------------------------------------------------------------------------

    def _scale(self, action: Action, epoch: int) -> ActionResult:
        """A new executor count. A scale-in that names its executors (a placement plan's choice)
        decommissions exactly those, unless the app's executors changed since the plan was made:
        then the agent chooses (the newest), as for any other count."""
        assert action.to is not None
        started = time.monotonic()
        named = list(action.executors)
        if named:
            try:
                active = self.active_executor_ids()
            except SparkRestError as exc:
                return ActionResult(action, "failed", f"Spark REST API: {exc}")
            if not set(named) <= set(active) or len(active) - len(named) != action.to:
                log.info("actuator.named_executors_changed", app=self.app, named=named, active=active, to=action.to)
                named = []
        try:
            name, ack_s, detail = (self._command("decommission", {"executor_ids": named}, epoch, started) if named
                                   else self._command("set_executors", {"total": action.to}, epoch, started))
        except _Failed as failed:
            return ActionResult(action, "failed", failed.reason, failed.command, failed.ack_s)
        count, confirm_s, why = self._confirm(lambda ids: len(ids) == action.to and not set(named) & set(ids), started)
        if why:
            return ActionResult(action, "failed", f"agent accepted ({detail}) but {why}", name, ack_s, None, count)
        log.info("actuator.done", app=self.app, action=action.summary(), ack_s=ack_s, confirm_s=confirm_s)
        return ActionResult(action, "done", f"{count} active executors", name, ack_s, confirm_s, count)

    def _replace(self, action: Action, epoch: int) -> ActionResult:
        """Make before break: one more executor (placed by the master's policy), then the old one is
        decommissioned; the app never runs below its count, even at min_executors."""
        started = time.monotonic()
        try:
            before = self.active_executor_ids()
        except SparkRestError as exc:
            return ActionResult(action, "failed", f"Spark REST API: {exc}")
        if action.executor not in before:
            return ActionResult(action, "failed", f"executor {action.executor} is not active (active: {before})")
        count = len(before)
        try:
            name, ack_s, _ = self._command("set_executors", {"total": count + 1, "surge": True}, epoch, started)
        except _Failed as failed:
            return ActionResult(action, "failed", failed.reason, failed.command, failed.ack_s)
        seen, _, why = self._confirm(lambda ids: len(ids) == count + 1, started)
        if why:
            return self._undo_surge(action, count, epoch, started, f"the replacement did not start: {why}", name, ack_s)
        try:
            name, ack_s, _ = self._command("decommission", {"executor_ids": [action.executor]}, epoch, started)
        except _Failed as failed:
            return self._undo_surge(action, count, epoch, started, failed.reason, failed.command, failed.ack_s)
        seen, confirm_s, why = self._confirm(lambda ids: action.executor not in ids and len(ids) == count, started)
        if why:
            return ActionResult(action, "failed", why, name, ack_s, None, seen)
        log.info("actuator.done", app=self.app, action=action.summary(), ack_s=ack_s, confirm_s=confirm_s)
        return ActionResult(action, "done", f"{action.executor} replaced; {seen} active executors", name, ack_s,
                            confirm_s, seen)

    def _undo_surge(self, action: Action, count: int, epoch: int, started: float, reason: str,
                    command: str | None, ack_s: float | None) -> ActionResult:
        """Back to the count before the replacement (the agent removes the newest, the surplus one)."""
        try:
            self._command("set_executors", {"total": count}, epoch, started)
            undone = f"the target is back at {count}"
        except _Failed as failed:
            undone = f"restoring the target {count} failed too: {failed.reason}"
        return ActionResult(action, "failed", f"{reason}; {undone}", command, ack_s)

    # -- steps ------------------------------------------------------------------------------------

    def _command(self, kind: str, args: dict[str, Any], epoch: int, started: float) -> tuple[str, float, Any]:
        if not self.is_leader():
            raise _Failed("not sent: this daemon is no longer the leader")
        # The ack timeout is the command's lifetime: a late agent skips it rather than act unasked.
        name = send_command(self.zk, self.zk_root, self.app, kind, args, epoch, ttl_s=self.cfg.ack_timeout_s)
        try:
            ack = wait_ack(self.zk, self.zk_root, self.app, name, self.cfg.ack_timeout_s)
        except AckTimeout:
            raise _Failed(f"{kind}: no ack from the control agent within {self.cfg.ack_timeout_s:g} s", name) from None
        ack_s = round(time.monotonic() - started, 3)
        if not ack.ok:
            raise _Failed(f"{kind} refused by the agent: {ack.detail}", name, ack_s)
        return name, ack_s, ack.detail

    def active_executor_ids(self) -> list[str]:
        return active_executor_ids(self.rest, self.app)

    def _confirm(self, done: Callable[[list[str]], bool], started: float) -> tuple[int | None, float | None, str]:
        """Wait until the REST API shows `done`; (count, seconds since start, "" or why not)."""
        deadline = time.monotonic() + self.cfg.confirm_timeout_s
        ids: list[str] | None = None
        while True:
            try:
                ids = self.active_executor_ids()
            except SparkRestError as exc:
                log.warning("actuator.rest_error", app=self.app, error=str(exc))
            if ids is not None and done(ids):
                return len(ids), round(time.monotonic() - started, 3), ""
            if time.monotonic() > deadline:
                seen = "nothing (REST API unreachable)" if ids is None else f"{len(ids)} active executors {ids}"
                return (None if ids is None else len(ids)), None, (
                    f"the change did not show in the Spark REST API within {self.cfg.confirm_timeout_s:g} s "
                    f"(it shows {seen})")
            time.sleep(CONFIRM_POLL_S)


class _Failed(Exception):
    def __init__(self, reason: str, command: str | None = None, ack_s: float | None = None):
        super().__init__(reason)
        self.reason, self.command, self.ack_s = reason, command, ack_s
