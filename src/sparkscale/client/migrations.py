"""Migrations as a client starts, resumes, aborts and lists them (the `Client` methods call these).

A new migration, `--resume ID` and `--abort ID` each go to the app's leading daemon as a request
(its journal's phases are handed to `on_journal` as the leader writes them), or, with no leader,
run here under the app's leader lock with the same dispatch as the daemon's (daemon/manual.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Unpack

from sparkscale.client.errors import BadRequest, Unavailable
from sparkscale.client.outcomes import MigrationOutcome, Note

if TYPE_CHECKING:
    from kazoo.client import KazooClient

    from sparkscale.actuators.base import ActuationContext
    from sparkscale.client.connection import Connection
    from sparkscale.config import Config
    from sparkscale.model.action_result import ActionResult
    from sparkscale.model.executor_shape import ExecutorShape
    from sparkscale.model.journal import Journal
    from sparkscale.model.manual_request import ManualResult, RequestOptions
    from sparkscale.store.base import ActionLogStore, JournalStores

OnJournal = Callable[["Journal"], None]


def ignore(_journal: Journal) -> None:
    pass


@dataclass(frozen=True)
class MigrationRequest:
    app: str
    query: str | None = None  # None: the app's one query
    partitions: int | None = None  # None: as they are (then a new shape is needed)
    executors: int | None = None  # then set this many executors
    executor_cores: int | None = None  # a new shape: restarts the whole application
    executor_memory_mb: int | None = None
    strategy: str | None = None  # None: migration.strategy


@dataclass(frozen=True)
class OpenMigration:
    journal: Journal
    follow_up: dict[str, Any] | None  # the follow-up figures, measured now while still pending


def start(client: Connection, request: MigrationRequest, timeout_s: float, on_journal: OnJournal,
          note: Note) -> MigrationOutcome:
    """A new migration: through the leading daemon, else under the app's leader lock here."""
    from sparkscale.apps.submit import with_stored_shape
    from sparkscale.apps.workloads import workload
    from sparkscale.config.identities import OPERATOR
    from sparkscale.daemon import manual
    from sparkscale.model.executor_shape import ExecutorShape
    from sparkscale.model.manual_request import RequestType
    from sparkscale.redisconn import connect_as
    from sparkscale.store.redis_queries import read_queries

    app_name = request.app
    client = client.for_app(app_name)
    cfg = client.cfg
    app = with_stored_shape(cfg.app(app_name), connect_as(cfg, OPERATOR), cfg.redis.key_prefix)
    query = request.query
    if query is None:
        # The app's one query as its agent lists it; a shipped pipeline's main query before that.
        known = sorted(read_queries(connect_as(cfg, OPERATOR), cfg.redis.key_prefix, app_name))
        if len(known) == 1:
            query = known[0]
        elif not known and app.pipeline is not None and not app.runs_script:
            query = workload(app.pipeline).query
        else:
            raise BadRequest(f"give --query: {app_name} runs {', '.join(known) or 'no query yet'}")
    strategy = request.strategy or cfg.migration.strategy
    shape = None
    if request.executor_cores is not None or request.executor_memory_mb is not None:
        shape = ExecutorShape(request.executor_cores or app.executor_cores,
                              request.executor_memory_mb or app.executor_memory_mb)
    partitions, executors = request.partitions, request.executors
    if partitions is None and shape is None:
        raise BadRequest("nothing to do: give --partitions, or a new shape (--executor-cores, --executor-memory-mb)")
    note(f"migrating {app_name}/{query} to {partitions or 'the same'} partitions ({strategy})"
         + (f", executors restarted as {shape.describe()}" if shape else ""))
    with client.zookeeper() as zk:
        if client.leader(zk, app_name) is not None:
            # Only the new migration's journal is shown (one that began before this request is not).
            return _through_leader(client, zk, app_name, on_journal, timeout_s,
                                   lambda j, since: j.requested_at >= since - 1, partitions, type=RequestType.MIGRATE,
                                   query=query, strategy=strategy, executors=executors,
                                   shape=asdict(shape) if shape else None)
        # The same dispatch as the daemon's: logged, migrated, then the executors set, logged.
        chosen = query
        result = _under_lock(client, zk, app_name, on_journal, lambda action_log, ctx: manual.run_migration(
            action_log, ctx, chosen, partitions, f"manual migration by {ctx.identity}", executors=executors),
            strategy=strategy, shape=shape)
        return MigrationOutcome(result.status == "done", result.detail, result.figures)


def operate(client: Connection, app_name: str | None, migration_id: str, abort: bool, timeout_s: float,
            on_journal: OnJournal, note: Note) -> MigrationOutcome:
    """Find the journal (BadRequest if no app has it open), then through the leading daemon, else
    under the app's leader lock here (`manual.operate_migration`)."""
    from sparkscale.actuators.migration import UnknownMigration, check_operable
    from sparkscale.daemon import manual
    from sparkscale.model.manual_request import RequestType

    verb = "abort" if abort else "resume"
    with client.zookeeper() as zk:
        journals = client.store(zk).journals
        journal = find_journal(client.cfg, journals, app_name, migration_id, verb)
        client = client.for_app(journal.app)
        note(f"{verb} {journal.app}/{journal.query} migration {journal.id} ({journal.status} at "
             f"{journal.next}: {journal.detail or 'no detail'})")
        if client.leader(zk, journal.app) is not None:
            return _through_leader(client, zk, journal.app, on_journal, timeout_s,
                                   lambda j, _since: j.id == migration_id, None, type=RequestType(f"{verb}_migration"),
                                   migration=migration_id, query=journal.query)

        def carry_out(action_log: ActionLogStore, ctx: ActuationContext) -> tuple[str, ActionResult]:
            try:  # again, under the lock: another operator may have ended it meanwhile
                current = check_operable(journals.journal(journal.app).read(), journal.app, migration_id, verb)
            except UnknownMigration as exc:
                raise BadRequest(str(exc)) from None
            return manual.operate_migration(action_log, ctx, current, abort)

        result = _under_lock(client, zk, journal.app, on_journal, carry_out)
        return MigrationOutcome(result.status == "done", result.detail, result.figures)


def find_journal(cfg: Config, journals: JournalStores, app_name: str | None, migration_id: str,
                 verb: str) -> Journal:
    """The open journal of migration `migration_id` among `app_name`'s (or every configured app's);
    BadRequest naming the id and what the journals hold when there is none."""
    from sparkscale.actuators.migration import UnknownMigration, check_operable

    names = [app_name] if app_name is not None else [a.name for a in cfg.apps]
    held = []
    for name in names:
        journal = journals.journal(name).read()
        if journal is not None and journal.id == migration_id:
            try:
                return check_operable(journal, name, migration_id, verb)
            except UnknownMigration as exc:
                raise BadRequest(str(exc)) from None
        held.append(f"{name}: {journal.id} ({journal.status})" if journal else f"{name}: none")
    raise BadRequest(f"no journaled migration {migration_id} to {verb} (journals: {'; '.join(held) or 'no app'})")


def open_journals(client: Connection, app_name: str | None) -> list[OpenMigration]:
    """Each app's journaled migration that is not done, or done with follow-up figures (each app
    keeps its last one); figures still pending are measured now from the progress history."""
    from sparkscale.config.identities import OPERATOR
    from sparkscale.monitors.migration_followup import FOLLOW_UP, shown
    from sparkscale.redisconn import connect_as

    cfg = client.cfg
    names = [client.with_app(app_name).app(app_name).name] if app_name is not None else [a.name for a in cfg.apps]
    redis_client = connect_as(cfg, OPERATOR)  # connects on a pending follow-up's read only
    with client.zookeeper() as zk:
        store = client.store(zk, redis_client)
        journals = [j for name in names if (j := store.journals.journal(name).read()) is not None
                    and (j.status != "done" or FOLLOW_UP in j.marks)]
    now = time.time()
    return [OpenMigration(j, shown(cfg, redis_client, j, now)) for j in journals]


# -- the two paths --------------------------------------------------------------------------------


def _through_leader(client: Connection, zk: KazooClient, app_name: str, on_journal: OnJournal, timeout_s: float,
                    mine: Callable[[Journal, float], bool], to: int | None,
                    **request: Unpack[RequestOptions]) -> MigrationOutcome:
    """Ask the leading daemon (a request znode), hand on the journal as it writes it (`mine(journal,
    since)`: the journal is this request's), and return its answer, or, once the journal has ended
    (`JournalEnd`) and no answer follows within `ANSWER_AFTER_END_S`, what the journal says."""
    import json

    from sparkscale.daemon import manual
    from sparkscale.model.journal import Journal
    from sparkscale.protocol.znodes import journal_path

    root = client.cfg.zookeeper.root
    started = time.time()
    end = JournalEnd()

    def watched(data: bytes | None, _stat: object) -> None:
        if data:
            journal = Journal.from_json(data)
            if mine(journal, started):
                on_journal(journal)
                end.saw(journal)

    zk.DataWatch(journal_path(root, app_name), watched)
    requests = client.store(zk).requests
    name = manual.submit_request(requests, app_name, to, client.by, timeout_s, **request)
    answer = answer_or_end(lambda: requests.wait_result(app_name, name, timeout_s), end, timeout_s)
    if isinstance(answer, Journal):
        return journal_outcome(answer, request.get("executors"))
    if answer is None:
        raise Unavailable(f"no answer from the leader of {app_name} within {timeout_s:g} s; the request was withdrawn")
    body: dict[str, Any] = json.loads(answer.detail) if answer.detail.startswith("{") else {"detail": answer.detail}
    if body.get("refused"):
        raise BadRequest(str(body.get("detail")))
    return MigrationOutcome(answer.ok, body.get("detail"), body.get("figures"))


# Once the journal has ended, how long the leader's own answer (with the figures it measured) is
# awaited before the journal's is given. The leader answers right after the journal ends, unless
# the request goes on (`--executors`: its executor change waits up to actuator.confirm_timeout_s).
ANSWER_AFTER_END_S = 5.0


class JournalEnd:
    """Whether this request's migration has ended: its journal seen active (running, recovering)
    since the request and then not (done, done_degraded, rolled back, aborted, needs attention).
    Seen active first: a `--resume` or `--abort` starts from a journal that is already stopped."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.journal: Journal | None = None
        self._was_active = False

    def saw(self, journal: Journal) -> None:
        if journal.active:
            self._was_active = True
        elif self._was_active and self.journal is None:
            self.journal = journal
            self.event.set()


def answer_or_end(wait_answer: Callable[[], ManualResult | None], end: JournalEnd, timeout_s: float,
                  after_end_s: float | None = None) -> ManualResult | Journal | None:
    """The leader's answer (`wait_answer()`, None: none within `timeout_s`), or the ended journal
    when no answer comes within `after_end_s` (default ANSWER_AFTER_END_S) of its end. `wait_answer`
    runs in a thread of its own; its error is raised here."""
    after_end_s = ANSWER_AFTER_END_S if after_end_s is None else after_end_s
    answered = threading.Event()
    box: list[ManualResult | None] = []
    failed: list[BaseException] = []

    def wait() -> None:
        try:
            box.append(wait_answer())
        except BaseException as exc:  # handed to the caller; the thread only waits
            failed.append(exc)
        finally:
            answered.set()
            end.event.set()  # wakes the caller

    threading.Thread(target=wait, name="sparkscale-migrate-answer", daemon=True).start()
    end.event.wait(timeout_s + after_end_s)  # the answer's own timeout ends it first
    if not answered.is_set() and end.journal is not None:
        answered.wait(after_end_s)
    if answered.is_set():
        if failed:
            raise failed[0]
        return box[0]
    return end.journal


def journal_outcome(journal: Journal, executors: int | None) -> MigrationOutcome:
    """The outcome as the ended journal tells it, while the leader goes on with the rest of the
    request (the executor count after the migration) and measures the follow-up figures."""
    from sparkscale.model.journal import JournalStatus
    from sparkscale.monitors.migration_followup import FOLLOW_UP, PENDING

    done = journal.status in (JournalStatus.DONE, JournalStatus.DONE_DEGRADED)
    detail = (f"migration {journal.id} {journal.status}: {journal.query} {journal.from_partitions} -> "
              f"{journal.to_partitions} partitions ({journal.strategy})")
    if journal.detail:
        detail += f"; {journal.detail}"
    if executors is not None:
        detail += (f"; the leader now sets {executors} executors: `sparkscale actions --app {journal.app}` "
                   "shows how that went")
    figures: dict[str, Any] = {**journal.marks.get("metrics", {}), "migration": journal.id,
                               "status": str(journal.status), "phases_s": journal.phase_durations()}
    if done:
        figures[FOLLOW_UP] = PENDING  # the leader looks once now and records the rest (migration_followup.py)
    return MigrationOutcome(done or journal.status == JournalStatus.ABORTED, detail, figures)


def _under_lock(client: Connection, zk: KazooClient, app_name: str, on_journal: OnJournal,
                act: Callable[[ActionLogStore, ActuationContext], tuple[str, ActionResult]],
                strategy: str | None = None, shape: ExecutorShape | None = None) -> ActionResult:
    """Take the app's leader lock (no daemon leads it), `act(action_log, ctx)` at its epoch, release."""
    from sparkscale.actuators.base import ActuationContext
    from sparkscale.apps.submit import with_stored_shape
    from sparkscale.config.identities import OPERATOR
    from sparkscale.daemon import manual
    from sparkscale.redisconn import connect_as

    cfg = client.cfg
    with client.leader_lock(zk, app_name) as election:
        redis_client = connect_as(cfg, OPERATOR)
        app = with_stored_shape(cfg.app(app_name), redis_client, cfg.redis.key_prefix)
        ctx = ActuationContext(cfg, app, zk, redis_client, election.epoch or 0, lambda: election.is_leader, client.by,
                               manual.app_restarter(cfg, app_name, client.config_path, client.overrides),
                               on_phase=lambda journal, _phase, _s: on_journal(journal), strategy=strategy,
                               shape=shape)
        _decision, result = act(client.store(zk, redis_client).actions, ctx)
        return result
