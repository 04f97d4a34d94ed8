"""Manual actions from the operator (`sparkscale scale-executors`, `sparkscale migrate`), through
the same lock, the same action log and the same `dispatch` as the daemon's own decisions.

When a daemon leads the app, the CLI does not act itself: it leaves a request in the store (a znode
`<root>/apps/<app>/requests/req-NNNNNNNNNN`, store/zk_requests.py) and waits for the answer the
leader writes to `<root>/apps/<app>/request_results/<same name>`. The leader carries the request
out in its next cycle (woken at once by a watch) with its epoch, logs it as a `manual` decision and
answers. When no daemon leads, the CLI takes the lock itself and calls `carry_out` / `run_migration` (cli/).

Requests older than their `expires_at` are answered "expired" and not carried out: an operator's
intent does not wait hours for a leader to appear. A request is an absolute target, so a leader
that dies between acting and answering makes the next leader repeat it harmlessly.

`sparkscale migrate --resume ID` / `--abort ID` (`resume_migration`, `abort_migration`) go the same
way and are served even while the app has no live query (a stranded migration's query is stopped).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from typing import Unpack

import redis
import structlog
from kazoo.exceptions import KazooException

from sparkscale.actuators.base import ActuationContext, dispatch
from sparkscale.actuators.migration import MigrationError, check_operable
from sparkscale.apps.submit import restart
from sparkscale.config import Config
from sparkscale.daemon.action_log import DecisionMode, DecisionRecord, snapshot_id
from sparkscale.model.action_result import ActionResult
from sparkscale.model.journal import Journal
from sparkscale.model.manual_request import (
    JOURNAL_REQUESTS,
    REQUEST_JSON,
    REQUEST_TYPES,
    RESULT_JSON,
    ManualRequest,
    ManualResult,
    RequestOptions,
    RequestType,
)
from sparkscale.model.plan import Action, Plan
from sparkscale.model.snapshot import Snapshot
from sparkscale.model.snapshot_merge import query_names
from sparkscale.monitors.spark_rest import SparkRestError
from sparkscale.protocol.streams import query_partitions
from sparkscale.store.bad_records import escaped
from sparkscale.store.base import ActionLogStore, JournalStores, RequestStore
from sparkscale.store.zk_requests import REQUEST_PREFIX

__all__ = ["JOURNAL_REQUESTS", "MANUAL_POLICY", "REQUEST_JSON", "REQUEST_PREFIX", "REQUEST_TYPES", "RESULT_JSON",
           "ManualRequest", "ManualResult", "RequestType", "app_restarter", "carry_out", "operate_migration",
           "run_migration", "serve_requests", "settled_migration", "submit_request"]

MANUAL_POLICY = "manual"
# What ends the cycle (and retries the request in the next one) rather than refuse the request.
SERVICE_FAILURES = (redis.RedisError, KazooException, SparkRestError, OSError)

log = structlog.get_logger(__name__)


def submit_request(requests: RequestStore, app: str, to: int | None, by: str, timeout_s: float,
                   **fields: Unpack[RequestOptions]) -> str:
    """Leave a request for the leader, expiring in `timeout_s`; `fields` (type="migrate", query,
    strategy, executors, shape) for a migration, (type="resume_migration" or "abort_migration",
    migration=ID) for a journaled one. Its name, for `requests.wait_result`."""
    now = time.time()
    if "type" in fields:  # a caller's string names a type too
        fields["type"] = RequestType(fields["type"])
    return requests.submit(app, ManualRequest(to, by, now, now + timeout_s, **fields))


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
    assert ctx.app.shuffle_partitions is not None  # set when the config is validated
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


def settled_migration(journals: JournalStores, app: str, request: ManualRequest, queries: Sequence[str],
                      leader: str) -> ManualResult | None:
    """The answer to a migrate request that needs no migration (None: carry it out): one its
    leader died during and the next completed on election, or one that does not name which of the
    app's several queries to migrate (the operator's call)."""
    done = journals.journal(app).read()
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


def serve_requests(requests: RequestStore, journals: JournalStores, app: str, action_log: ActionLogStore,
                   context: Callable[..., ActuationContext], leader: str, dry_run: bool,
                   snapshot: Snapshot | None) -> list[ActionResult]:
    """The leader carries out and answers the app's pending requests (`context(**request)`: its
    actuation context). Without a snapshot (no live query) only the requests on a journaled
    migration are served; the others wait for one, or expire. Returns what was carried out.

    A request whose handling raises anything but a service's failure is answered refused with the
    error and removed (logged once): left pending, it would fail every later cycle of the app. A
    service's failure (Redis, ZooKeeper, a driver) ends the cycle as before; the request is retried."""
    results: list[ActionResult] = []
    for request in requests.pending(app):
        try:
            result = _serve(requests, journals, app, action_log, context, leader, dry_run, snapshot, request)
        except SERVICE_FAILURES:
            raise
        except Exception as exc:
            log.error("manual.request_failed", app=app, request=escaped(request.name), error=escaped(repr(exc)),
                      action="refused", exc_info=exc)
            requests.answer(app, request.name,
                            ManualResult(False, f"refused: carrying it out failed: {escaped(str(exc))}", None, leader))
            continue
        if result is not None:
            results.append(result)
    return results


def _serve(requests: RequestStore, journals: JournalStores, app: str, action_log: ActionLogStore,
           context: Callable[..., ActuationContext], leader: str, dry_run: bool, snapshot: Snapshot | None,
           request: ManualRequest) -> ActionResult | None:
    """One request carried out and answered (None: answered without acting, or left waiting)."""
    decision_id: str | None
    if snapshot is None and request.type not in JOURNAL_REQUESTS:
        return None
    now = time.time()
    if not request.expires_at >= now:  # NaN never passes (the store refuses it; a request made here may hold one)
        requests.answer(app, request.name, ManualResult(False, "expired before a leader could carry it out"))
        return None
    if dry_run:
        requests.answer(app, request.name,
                        ManualResult(False, "the daemon runs in dry-run mode: it never acts", leader=leader))
        return None
    if request.type in JOURNAL_REQUESTS:
        try:
            journal = check_operable(journals.journal(app).read(), app, str(request.migration),
                                     request.type.split("_")[0])
        except MigrationError as exc:
            requests.answer(app, request.name,
                            ManualResult(False, json.dumps({"detail": str(exc), "refused": True}), None, leader))
            return None
        decision_id, result = operate_migration(action_log, context(), journal,
                                                abort=request.type == "abort_migration")
    elif request.type == "migrate":
        assert snapshot is not None
        names = query_names(snapshot)
        settled = settled_migration(journals, app, request, names, leader)
        if settled is not None:
            requests.answer(app, request.name, settled)
            return None
        decision_id, result = run_migration(
            action_log, context(strategy=request.strategy, shape=request.executor_shape),
            request.query or names[0], request.to, f"manual request by {request.by}", executors=request.executors)
    else:
        assert snapshot is not None and request.to is not None
        decision_id, result = carry_out(action_log, context(), request.to, request.by,
                                        current=len(snapshot.executors), snapshot_id=snapshot_id(snapshot), at=now)
    detail = (result.detail if request.type == "scale_executors"
              else json.dumps({"detail": result.detail, "figures": result.figures}))
    requests.answer(app, request.name, ManualResult(result.status == "done", detail, decision_id, leader))
    return result
