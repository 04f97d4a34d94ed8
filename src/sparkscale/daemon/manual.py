"""Manual actions from the operator (`sparkscale scale-executors`), through the same lock and log.

When a daemon leads the app, the CLI does not act itself: it writes a request znode
`<root>/apps/<app>/requests/req-NNNNNNNNNN` and waits for the answer the leader writes to
`<root>/apps/<app>/request_results/<same name>`. The leader carries the request out in its next
cycle (woken at once by a watch) with its epoch, logs it as a `manual` decision and answers. When
no daemon leads, the CLI takes the lock itself, acts, logs and releases (see cli.py).

Requests older than their `expires_at` are answered "expired" and not carried out: an operator's
intent does not wait hours for a leader to appear. A request is an absolute target, so a leader
that dies between acting and answering makes the next leader repeat it harmlessly.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

if TYPE_CHECKING:
    from sparkscale.daemon.action_log import ActionLog

from sparkscale.actuators.executors import ActionResult, ExecutorActuator
from sparkscale.config import AppConfig
from sparkscale.pipeline.submit import ExecutorShape
from sparkscale.plan import Action, Plan
from sparkscale.protocol.commands import wait_for_znode
from sparkscale.protocol.znodes import requests_path, results_path

MANUAL_POLICY = "manual"

REQUEST_PREFIX = "req-"




@dataclass(frozen=True)
class ManualRequest:
    """`scale_executors` to `to` executors, or `migrate` `query` to `to` partitions (None: as they
    are) with `strategy`, optionally restarting the app with a new executor shape (`shape`), then
    optionally to `executors` executors."""

    to: int | None
    by: str
    requested_at: float
    expires_at: float
    name: str = ""
    type: str = "scale_executors"
    query: str | None = None
    strategy: str | None = None
    executors: int | None = None
    shape: dict[str, int] | None = None  # ExecutorShape fields

    @property
    def executor_shape(self) -> ExecutorShape | None:
        return ExecutorShape(**self.shape) if self.shape else None

    def to_json(self) -> bytes:
        body = asdict(self)
        body.pop("name")
        return json.dumps(body).encode()

    @classmethod
    def from_znode(cls, name: str, data: bytes) -> ManualRequest:
        body = json.loads(data.decode())
        kind = body.get("type", "scale_executors")
        if kind not in ("scale_executors", "migrate"):
            raise ValueError(f"unknown request type {kind!r}")
        shape = body.get("shape")
        if shape is not None:
            ExecutorShape(**shape)  # a malformed shape is an invalid request
        to = body["to"]
        return cls(None if to is None and kind == "migrate" else int(to), str(body.get("by", "")),
                   float(body["requested_at"]), float(body["expires_at"]), name, kind, body.get("query"),
                   body.get("strategy"), body.get("executors"), shape)


@dataclass(frozen=True)
class ManualResult:
    ok: bool
    detail: str
    decision_id: str | None = None
    leader: str | None = None

    def to_json(self) -> bytes:
        return json.dumps(asdict(self)).encode()

    @classmethod
    def from_json(cls, data: bytes) -> ManualResult:
        return cls(**json.loads(data.decode()))


def submit_request(zk: KazooClient, root: str, app: str, to: int | None, by: str, timeout_s: float,
                   **migration: Any) -> str:
    """Write a request for the leader; `migration` (type="migrate", query, strategy, executors, shape)
    for a migration."""
    now = time.time()
    request = ManualRequest(to, by, now, now + timeout_s, **migration)
    zk.ensure_path(results_path(root, app))
    path = zk.create(f"{requests_path(root, app)}/{REQUEST_PREFIX}", request.to_json(), sequence=True, makepath=True)
    return path.rsplit("/", 1)[1]


def wait_result(zk: KazooClient, root: str, app: str, name: str, timeout_s: float) -> ManualResult | None:
    """The leader's answer, or None after `timeout_s` (the request is then withdrawn if still pending)."""
    data = wait_for_znode(zk, f"{results_path(root, app)}/{name}", timeout_s)
    if data is not None:
        return ManualResult.from_json(data)
    try:
        zk.delete(f"{requests_path(root, app)}/{name}")
    except NoNodeError:
        pass
    return None


def pending_requests(zk: KazooClient, root: str, app: str) -> list[ManualRequest]:
    """Unanswered requests, oldest first."""
    try:
        names = sorted(zk.get_children(requests_path(root, app)))
    except NoNodeError:
        return []
    out = []
    for name in names:
        try:
            data, _stat = zk.get(f"{requests_path(root, app)}/{name}")
        except NoNodeError:
            continue
        try:
            out.append(ManualRequest.from_znode(name, data))
        except (ValueError, KeyError, TypeError):
            answer(zk, root, app, name, ManualResult(False, "not a valid request"))
    return out


def answer(zk: KazooClient, root: str, app: str, name: str, result: ManualResult) -> None:
    """Write the result, then remove the request (a crash in between answers twice at worst: the
    result exists, so the second write is skipped)."""
    try:
        zk.create(f"{results_path(root, app)}/{name}", result.to_json(), makepath=True)
    except NodeExistsError:
        pass
    try:
        zk.delete(f"{requests_path(root, app)}/{name}")
    except NoNodeError:
        pass


def watch_requests(zk: KazooClient, root: str, app: str, on_request: Any) -> None:
    """Call `on_request()` whenever the request list changes (kazoo ChildrenWatch, kept for life)."""
    zk.ensure_path(requests_path(root, app))
    zk.ChildrenWatch(requests_path(root, app), lambda children: (on_request() if children else None, True)[1])


def carry_out(action_log: ActionLog, actuator: ExecutorActuator, app: AppConfig, to: int, by: str, current: int,
              identity: str, epoch: int, snapshot_id: str, at: float) -> tuple[str | None, ActionResult]:
    """Log a manual scale as a decision, carry it out, log the result: what daemon and CLI share."""
    from sparkscale.daemon.action_log import DecisionRecord

    reason = f"manual request by {by}"
    if not app.min_executors <= to <= app.max_executors:
        action = Action.scale_executors(current, to, reason)
        return None, ActionResult(action, "failed", f"refused: {to} is outside [min_executors, max_executors] = "
                                                    f"[{app.min_executors}, {app.max_executors}]")
    if to == current:
        action = Action.scale_executors(current, to, reason)
        return None, ActionResult(action, "done", f"already at {to} executors", executors_after=current)
    action = Action.scale_executors(current, to, reason)
    plan = Plan(MANUAL_POLICY, app.name, actions=(action,), explanation=(f"{reason} ({identity}, epoch {epoch})",))
    record = DecisionRecord(app.name, at, snapshot_id, identity, epoch, MANUAL_POLICY, "manual", plan, "manual")
    decision_id = action_log.append_decision(record)
    result = actuator.execute(action, epoch)
    action_log.append_results(decision_id, app.name, [result])
    return decision_id, result
