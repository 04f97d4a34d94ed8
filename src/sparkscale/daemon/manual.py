"""Manual actions from the operator (`sparkscale scale-executors`, `sparkscale migrate`), through
the same lock, the same action log and the same `dispatch` as the daemon's own decisions.

When a daemon leads the app, the CLI does not act itself: it writes a request znode
`<root>/apps/<app>/requests/req-NNNNNNNNNN` and waits for the answer the leader writes to
`<root>/apps/<app>/request_results/<same name>`. The leader carries the request out in its next
cycle (woken at once by a watch) with its epoch, logs it as a `manual` decision and answers. When
no daemon leads, the CLI takes the lock itself and calls `carry_out` / `run_migration` (cli/).

Requests older than their `expires_at` are answered "expired" and not carried out: an operator's
intent does not wait hours for a leader to appear. A request is an absolute target, so a leader
that dies between acting and answering makes the next leader repeat it harmlessly.

`sparkscale migrate --resume ID` / `--abort ID` (`resume_migration`, `abort_migration`) go the same
way and are served even while the app has no live query (a stranded migration's query is stopped).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from enum import StrEnum
from typing import Annotated, Any

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError
from pydantic import AfterValidator, Field, GetCoreSchemaHandler
from pydantic_core import CoreSchema

from sparkscale.actuators.base import ActuationContext, dispatch
from sparkscale.actuators.migration import JournalStore, MigrationError, check_operable
from sparkscale.apps.submit import restart
from sparkscale.config import Config
from sparkscale.daemon.action_log import DecisionMode, DecisionRecord, snapshot_id
from sparkscale.model.action_result import ActionResult
from sparkscale.model.codec import Codec, one_of, reshaped
from sparkscale.model.executor_shape import ExecutorShape
from sparkscale.model.fields import FieldError, get, object_at
from sparkscale.model.journal import Journal
from sparkscale.model.plan import Action, Plan
from sparkscale.model.snapshot import Snapshot
from sparkscale.model.snapshot_merge import query_names
from sparkscale.protocol.commands import wait_for_znode
from sparkscale.protocol.streams import query_partitions
from sparkscale.protocol.znodes import requests_path, results_path
from sparkscale.store.base import ActionLogStore

MANUAL_POLICY = "manual"

REQUEST_PREFIX = "req-"


class RequestType(StrEnum):
    """What an operator asks the leader for."""

    SCALE_EXECUTORS = "scale_executors"
    MIGRATE = "migrate"
    RESUME_MIGRATION = "resume_migration"  # of a journaled migration, by its id
    ABORT_MIGRATION = "abort_migration"


JOURNAL_REQUESTS = (RequestType.RESUME_MIGRATION, RequestType.ABORT_MIGRATION)  # on a journaled migration
REQUEST_TYPES = tuple(RequestType)
_SHAPE_KEYS = ("executor_cores", "executor_memory_mb")


def _shape(shape: dict[str, int]) -> dict[str, int]:
    """ExecutorShape's fields, all of them (a malformed shape is an invalid request)."""
    if sorted(shape) != sorted(_SHAPE_KEYS):
        raise FieldError("", f"expected the keys {', '.join(_SHAPE_KEYS)} (got {', '.join(map(str, shape)) or 'none'})")
    return shape


@dataclass(frozen=True)
class ManualRequest:
    """`scale_executors` to `to` executors, or `migrate` `query` to `to` partitions (None: as they
    are) with `strategy`, optionally restarting the app with a new executor shape (`shape`), then
    optionally to `executors` executors; or `resume_migration` / `abort_migration` of the journaled
    migration `migration` (its id). Written without `name` (the znode's)."""

    to: int | None
    by: str
    requested_at: float
    expires_at: float
    name: Annotated[str, Field(exclude=True)] = ""
    type: Annotated[RequestType, one_of(RequestType)] = RequestType.SCALE_EXECUTORS
    query: str | None = None
    strategy: str | None = None
    executors: int | None = None
    shape: Annotated[dict[str, int], AfterValidator(_shape)] | None = None  # ExecutorShape fields
    migration: str | None = None  # a journaled migration's id

    @classmethod
    def __get_pydantic_core_schema__(cls, source: object, handler: GetCoreSchemaHandler) -> CoreSchema:
        return reshaped(handler, source, _request_in)

    @property
    def executor_shape(self) -> ExecutorShape | None:
        return ExecutorShape(**self.shape) if self.shape else None

    def to_json(self) -> bytes:
        return REQUEST_JSON.dumps(self).encode()

    @classmethod
    def from_znode(cls, name: str, data: bytes) -> ManualRequest:
        """Raises a FieldError (a ValueError) naming the field of an invalid request."""
        return replace(REQUEST_JSON.loads(data), name=name)


def _request_in(value: object) -> dict[str, Any]:
    """A scale request names its target; a journal request its migration; `by` is read as text."""
    obj = {k: v for k, v in object_at(value, "").items() if k != "name"}
    kind = obj.setdefault("type", RequestType.SCALE_EXECUTORS)
    if kind == RequestType.SCALE_EXECUTORS:
        get(obj, "to", "")
    obj.setdefault("to", None)  # a migration's: the partitions as they are
    if kind in JOURNAL_REQUESTS and not isinstance(obj.get("migration"), str):
        raise FieldError("migration", f"a {kind} request names no migration")
    obj["by"] = str(obj.get("by", ""))
    return obj


@dataclass(frozen=True)
class ManualResult:
    ok: bool
    detail: str
    decision_id: str | None = None
    leader: str | None = None

    def to_json(self) -> bytes:
        return RESULT_JSON.dumps(self).encode()

    @classmethod
    def from_json(cls, data: bytes) -> ManualResult:
        return RESULT_JSON.loads(data)


REQUEST_JSON: Codec[ManualRequest] = Codec(ManualRequest, label="request")
RESULT_JSON: Codec[ManualResult] = Codec(ManualResult, label="request result")


def submit_request(zk: KazooClient, root: str, app: str, to: int | None, by: str, timeout_s: float,
                   **migration: Any) -> str:
    """Write a request for the leader; `migration` (type="migrate", query, strategy, executors, shape)
    for a migration, (type="resume_migration" or "abort_migration", migration=ID) for a journaled one."""
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
    with contextlib.suppress(NoNodeError):
        zk.delete(f"{requests_path(root, app)}/{name}")
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
    with contextlib.suppress(NodeExistsError):
        zk.create(f"{results_path(root, app)}/{name}", result.to_json(), makepath=True)
    with contextlib.suppress(NoNodeError):
        zk.delete(f"{requests_path(root, app)}/{name}")


def watch_requests(zk: KazooClient, root: str, app: str, on_request: Any) -> None:
    """Call `on_request()` whenever the request list changes (kazoo ChildrenWatch, kept for life)."""
    zk.ensure_path(requests_path(root, app))
    zk.ChildrenWatch(requests_path(root, app), lambda children: (on_request() if children else None, True)[1])


def carry_out(action_log: ActionLogStore, ctx: ActuationContext, to: int, by: str, current: int,
              snapshot_id: str, at: float) -> tuple[str | None, ActionResult]:
    """A manual scale: checked against the app's range, then logged, carried out and its result
    logged through `dispatch` (what the daemon and the CLI without a leader share)."""
    app = ctx.app
    reason = f"manual request by {by}"
    action = Action.scale_executors(current, to, reason)
    if not app.min_executors <= to <= app.max_executors:
        return None, ActionResult(action, "failed", f"refused: {to} is outside [min_executors, max_executors] = "
                                                    f"[{app.min_executors}, {app.max_executors}]")
    if to == current:
        return None, ActionResult(action, "done", f"already at {to} executors", executors_after=current)
    plan = Plan(MANUAL_POLICY, app.name, actions=(action,),
                explanation=(f"{reason} ({ctx.identity}, epoch {ctx.epoch})",))
    record = DecisionRecord(app.name, at, snapshot_id, ctx.identity, ctx.epoch, MANUAL_POLICY, "manual", plan,
                            DecisionMode.MANUAL)
    decision_id, results = dispatch(action_log, record, plan.actions, ctx)
    return decision_id, results[0]


def run_migration(action_log: ActionLogStore, ctx: ActuationContext, query: str, to_partitions: int | None,
                  reason: str, executors: int | None = None,
                  from_partitions: int | None = None) -> tuple[str, ActionResult]:
    """A manual (or resumed, with `ctx.resume`) migration through `dispatch`: log the decision,
    migrate with `ctx.strategy` (and `ctx.shape`), then, if it was done, set the executors to
    `executors`, log the results. `to_partitions` None keeps the partitions (a shape change only).
    `from_partitions`: the journal's, for a migration resumed or aborted part-way (the query may
    already report the new count, which would log it as "8 -> 8"); None: the query's count now."""
    current = query_partitions(ctx.redis, ctx.cfg.redis.key_prefix, ctx.app.name, query, ctx.app.shuffle_partitions)
    to_partitions = current if to_partitions is None else to_partitions
    strategy = ctx.strategy or ctx.cfg.migration.strategy
    start = current if from_partitions is None else from_partitions
    action = Action.set_parallelism(query, max(start, 1), to_partitions, reason)
    how = strategy + (f", executors as {ctx.shape.describe()}" if ctx.shape else "")
    actions = [action]
    if executors is not None:
        actions.append(Action.scale_executors(executors, executors, reason))
    plan = Plan(MANUAL_POLICY, ctx.app.name, {query: to_partitions}, (action,),
                (f"{reason} ({how}, by {ctx.identity}, epoch {ctx.epoch})",))
    record = DecisionRecord(ctx.app.name, time.time(), "", ctx.identity, ctx.epoch, MANUAL_POLICY, "partition_bound",
                            plan, DecisionMode.MANUAL)
    decision_id, results = dispatch(action_log, record, actions, ctx, stop_after_failure=True)
    return decision_id, results[0]


def app_restarter(cfg: Config, app_name: str, config_path: str | None,
                  overrides: tuple[str, ...] | list[str]) -> Callable[[], object]:
    """How a migration restarts the whole application: stop its driver and submit it again with the
    config the caller (daemon or CLI) runs with."""
    return lambda: restart(cfg, app_name, config_path, overrides)


def settled_migration(zk: KazooClient, root: str, app: str, request: ManualRequest, queries: Sequence[str],
                      leader: str) -> ManualResult | None:
    """The answer to a migrate request that needs no migration (None: carry it out): one its
    leader died during and the next completed on election, or one that does not name which of the
    app's several queries to migrate (the operator's call)."""
    done = JournalStore(zk, root, app).read()
    if (done is not None and done.status in ("done", "done_degraded") and request.to in (None, done.to_partitions)
            and done.shape == (asdict(request.executor_shape) if request.executor_shape else None)
            and done.requested_at >= request.requested_at):
        return ManualResult(True, json.dumps({"detail": f"completed by resuming migration {done.id}",
                                              "figures": done.marks.get("metrics")}), None, leader)
    if request.query is None and len(queries) > 1:
        return ManualResult(False, f"the app runs queries {', '.join(queries)}: name one", None, leader)
    return None


def operate_migration(action_log: ActionLogStore, ctx: ActuationContext, journal: Journal,
                      abort: bool) -> tuple[str, ActionResult]:
    """The operator's `--resume` (to done) or `--abort` (to the query running, sources resumed) of a
    journaled migration, through the path the daemon's takeover takes (`run_migration`, logged)."""
    op = replace(ctx, strategy=journal.strategy, resume=not abort, abort=abort, migration_id=journal.id,
                 measure=not abort)
    verb = "abort" if abort else "resume"
    return run_migration(action_log, op, journal.query, journal.from_partitions if abort else journal.to_partitions,
                         f"{verb} migration {journal.id} (left {journal.status} at {journal.next}) by {ctx.identity}",
                         from_partitions=None if abort else journal.from_partitions)


def serve_requests(zk: KazooClient, root: str, app: str, action_log: ActionLogStore,
                   context: Callable[..., ActuationContext], leader: str, dry_run: bool,
                   snapshot: Snapshot | None) -> list[ActionResult]:
    """The leader carries out and answers the app's pending requests (`context(**request)`: its
    actuation context). Without a snapshot (no live query) only the requests on a journaled
    migration are served; the others wait for one, or expire. Returns what was carried out."""
    results: list[ActionResult] = []
    for request in pending_requests(zk, root, app):
        if snapshot is None and request.type not in JOURNAL_REQUESTS:
            continue
        now = time.time()
        if request.expires_at < now:
            answer(zk, root, app, request.name, ManualResult(False, "expired before a leader could carry it out"))
            continue
        if dry_run:
            answer(zk, root, app, request.name,
                   ManualResult(False, "the daemon runs in dry-run mode: it never acts", leader=leader))
            continue
        if request.type in JOURNAL_REQUESTS:
            try:
                journal = check_operable(JournalStore(zk, root, app).read(), app, str(request.migration),
                                         request.type.split("_")[0])
            except MigrationError as exc:
                answer(zk, root, app, request.name,
                       ManualResult(False, json.dumps({"detail": str(exc), "refused": True}), None, leader))
                continue
            decision_id, result = operate_migration(action_log, context(), journal,
                                                    abort=request.type == "abort_migration")
        elif request.type == "migrate":
            assert snapshot is not None
            names = query_names(snapshot)
            settled = settled_migration(zk, root, app, request, names, leader)
            if settled is not None:
                answer(zk, root, app, request.name, settled)
                continue
            decision_id, result = run_migration(
                action_log, context(strategy=request.strategy, shape=request.executor_shape),
                request.query or names[0], request.to, f"manual request by {request.by}", executors=request.executors)
        else:
            assert snapshot is not None and request.to is not None
            decision_id, result = carry_out(action_log, context(), request.to, request.by,
                                            current=len(snapshot.executors), snapshot_id=snapshot_id(snapshot), at=now)
        results.append(result)
        detail = (result.detail if request.type == "scale_executors"
                  else json.dumps({"detail": result.detail, "figures": result.figures}))
        answer(zk, root, app, request.name, ManualResult(result.status == "done", detail, decision_id, leader))
    return results
