"""The generic migration runner: walks the journal's strategy's phase table through the in-driver
agent, one idempotent step per phase, and asks the strategy for the choices in which strategies
differ (strategy names are never looked at here)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict

import redis
import structlog

from sparkscale.actuators.migration.base import MigrationBusy, MigrationError, get_strategy, idle_after_restart
from sparkscale.actuators.migration.hooks import after_step, before_step
from sparkscale.actuators.migration.journal import (
    JournalFenced,
    check_operable,
    new_shape,
    operator_commands,
    phase_metrics,
)
from sparkscale.actuators.migration.recovery import Recovery
from sparkscale.actuators.migration.session import MigrationSession
from sparkscale.model.executor_shape import ExecutorShape
from sparkscale.model.journal import Journal, JournalStatus, Phase
from sparkscale.monitors.migration_metrics import CLOCK_MARGIN_S, first_output, timeline_of
from sparkscale.protocol.commands import AckTimeout
from sparkscale.protocol.keys import datastore_key
from sparkscale.protocol.streams import StreamOffsets, read_source_status
from sparkscale.store.redis_queries import read_queries

log = structlog.get_logger(__name__)

POLL_S = 0.2  # how often progress and source status are read while waiting on a phase


class MigrationRunner(MigrationSession):
    """Carries out (or resumes) one app's migration through the control agent. Never decides."""

    @property
    def recovery(self) -> Recovery:
        """What follows a failed step or the operator's abort (recovery.py), through this runner."""
        return Recovery(self)

    # -- entry points -----------------------------------------------------------------------------

    def start(self, query: str, to_partitions: int, strategy: str, by: str,
              shape: ExecutorShape | None = None) -> Journal:
        get_strategy(strategy)  # an unknown one: UnknownStrategy (a MigrationError) naming the known ones
        current = self.store.read()
        if current is not None and current.active:
            raise MigrationBusy(f"migration {current.id} of {self.app.name} is still {current.status} "
                                f"(phase {current.next})")
        if current is not None and current.open:
            raise MigrationBusy(f"migration {current.id} of {self.app.name} needs attention ({current.detail}): "
                                "first " + " or ".join(f"`{c}`" for c in operator_commands(current)))
        if shape is not None and shape == ExecutorShape(self.app.executor_cores, self.app.executor_memory_mb):
            shape = None  # already this shape
        self._check_restartable(query, shape is not None)
        from_partitions = self.current_partitions(query)
        if from_partitions == to_partitions and shape is None:
            raise MigrationError(f"{self.app.name}/{query} already has {to_partitions} state partitions"
                                 " (and the executor shape asked for, if any)")
        if shape is not None and self.restart_app is None:
            raise MigrationError("a new executor shape needs a whole-application restart, which this caller "
                                 "cannot do (it has no way to submit the app)")
        now = time.time()
        journal = Journal(id=f"mig-{int(now * 1000)}", app=self.app.name, query=query, strategy=strategy,
                          from_partitions=from_partitions, to_partitions=to_partitions, requested_at=now,
                          by=by, epoch=self.epoch, shape=asdict(shape) if shape else None)
        journal.marks["input_at_request"] = self._input_position()
        # The run that is stopped: a batch of another run after the stop is the restarted one's.
        journal.marks["run_id_at_request"] = self.query_progress(query).get("run_id")
        self._complete(journal, "requested")
        after_step("requested")
        return self.run(journal)

    def run(self, journal: Journal) -> Journal:
        """Carry out the remaining phases; after a failed step, recover (recovery.py): the journal
        returned is `done` or `done_degraded`, any other end raises MigrationError."""
        steps: dict[str, Callable[[Journal], None]] = {
            "paused": self._pause, "drained": self._drain, "stopped": self._stop, "captured": self._capture,
            "repartitioned": self._repartition, "restarted": self._restart, "resumed": self._resume,
            "restored": self._restored, "done": self._await_first_output,
        }
        for phase in journal.remaining:
            journal.next = Phase(phase)
            self._write(journal)  # before the step: a successor knows what may have been under way
            try:
                before_step(phase)
                steps[phase](journal)
            except JournalFenced:
                raise  # no longer this leader's migration: no rollback, nothing more written
            except (MigrationError, AckTimeout, redis.RedisError) as exc:
                return self._fail(journal, phase, str(exc))
            after_step(phase)
            self._complete(journal, phase)
        journal.status = JournalStatus.DONE
        journal.marks["metrics"] = phase_metrics(journal)
        self._write(journal)
        log.info("migration.done", app=self.app.name, id=journal.id, strategy=journal.strategy,
                 **journal.marks["metrics"])
        return journal

    def resume(self, migration_id: str | None = None) -> Journal | None:
        """Complete a migration a dead leader left running or recovering (None if there is none);
        with `migration_id` (the operator's `--resume`), walk any open one's remaining phases to done."""
        journal = self.store.read()
        if migration_id is not None:
            journal = check_operable(journal, self.app.name, migration_id, "resume")
        elif journal is None or not journal.active:
            return None
        log.warning("migration.resume", app=self.app.name, id=journal.id, phase=journal.next, status=journal.status,
                    completed=list(journal.phases), previous_epoch=journal.epoch, epoch=self.epoch,
                    operator=migration_id is not None)
        journal.marks.setdefault("resumed_by", []).append({"epoch": self.epoch, "at": time.time(),
                                                           "phase": journal.next, "status": journal.status})
        journal.epoch = self.epoch
        if journal.status == "recovering" and migration_id is None:
            return self.recovery.proceed(journal)  # a takeover: in the way the last runner was trying
        if journal.status != "running":
            self.recovery.reopen(journal)  # the operator's: the remaining phases, to done
        return self.run(journal)

    def abort(self, migration_id: str) -> Journal:
        """The operator's `--abort`: back to the old partitions where safe, else forward; the query
        running and the sources resumed, the journal `aborted` (MigrationError: it needs attention)."""
        journal = check_operable(self.store.read(), self.app.name, migration_id, "abort")
        log.warning("migration.abort", app=self.app.name, id=journal.id, phase=journal.next, status=journal.status,
                    epoch=self.epoch)
        journal.marks["aborted_by"] = {"epoch": self.epoch, "at": time.time(), "phase": journal.next,
                                       "status": journal.status}
        journal.epoch = self.epoch
        recovery = journal.marks.get("recovery")
        if journal.status == "recovering" and recovery is not None and recovery["goal"] == "abort":
            return self.recovery.proceed(journal)
        return self.recovery.abort(journal)

    def _check_restartable(self, query: str, whole_app: bool) -> None:
        """Refuse, before anything stops, a migration that could lose, duplicate or wreck: the query
        (and with a new shape, every query of the app, all restarted with the driver) must replay
        from its checkpoint. A query the agent has not reported is left to the agent's own checks."""
        queries = read_queries(self.redis, self.prefix, self.app.name)
        lossy_ok = self.app.allow_lossy_restart
        info = queries.get(query)
        problem = None if info is None else info.why_not_migratable(lossy_ok)
        if problem is not None:
            raise MigrationError(f"{self.app.name}/{query} cannot be migrated: {problem}")
        restarted = [info] if info is not None else []
        if whole_app:
            restarted = [q for q in queries.values() if q.status != "terminated"]
            for other in restarted:
                problem = other.why_not_app_restartable(lossy_ok)
                if problem is not None:
                    raise MigrationError(f"{self.app.name} cannot be restarted for a new executor shape: "
                                         f"query {other.name} {problem}")
        for each in restarted:  # only reached with the override when any source does not replay
            lossy = each.not_replayable()
            if lossy:
                log.warning("migration.lossy_restart_allowed", app=self.app.name, query=each.name,
                            sources=[source for source, _why in lossy],
                            reason="apps[].allow_lossy_restart is true: what these sources held at the stop is lost")

    # -- steps ------------------------------------------------------------------------------------

    def _pause(self, journal: Journal) -> None:
        self._command("pause_sources", {})
        journal.marks["input_at_pause"] = self._input_position()

    def _drain(self, journal: Journal) -> None:
        """Wait until the query has processed everything it admitted (no batch running, nothing
        admitted left); for one query that is the end of its running batch. A query whose sources
        cannot be paused never runs dry: its stop waits for the batch boundary instead."""
        if not self.pausable(journal.query):
            journal.marks["drain"] = "sources cannot be paused: the stop waits for an idle trigger"
            return
        deadline = time.monotonic() + self.mcfg.phase_timeout_s
        while True:
            status = self.query_status(journal.query)
            if status is None:
                return  # already stopped (a resumed migration): nothing in flight
            if not status.get("isTriggerActive") and not status.get("isDataAvailable"):
                return
            if time.monotonic() > deadline:
                raise MigrationError(f"{journal.query} did not drain within {self.mcfg.phase_timeout_s:g} s")
            time.sleep(POLL_S)

    def _stop(self, journal: Journal) -> None:
        kind, args = get_strategy(journal.strategy).stop_command(journal.query, self.mcfg.phase_timeout_s)
        if kind == "stop_query":
            args = {**args, "idle_wait_s": self.mcfg.idle_trigger_wait_s}
        # The agent answers once the query stopped: give it the stop's own time and the ack's.
        journal.marks["stop"] = self._command(kind, args, timeout_s=self.mcfg.phase_timeout_s
                                              + self.cfg.actuator.ack_timeout_s)
        if not self.pausable(journal.query):
            return
        # What the stopped run had admitted but not finished: recomputed after the restart (an
        # aborted run's abandoned batch); zero for a stop at a batch boundary.
        status = read_source_status(self.redis, self.prefix, self.app.name, journal.query)
        parts = self.app.source_partitions
        latest = StreamOffsets.from_json(status.latest or {}, parts).total
        processed = StreamOffsets.from_json(status.processed or status.committed or {}, parts).total
        journal.marks["replayed_records"] = max(latest - processed, 0)

    def _capture(self, journal: Journal) -> None:
        """The positions of the input that arrived but was not processed (admitted to a batch or
        not), into the DataStore: the records themselves stay in the replayable input streams and
        are not copied (for a source that cannot be paused: its last reported positions and
        backlog). `captured_records` counts them, `captured_in_flight_records` those admitted."""
        if not self.pausable(journal.query):
            fields = self.query_progress(journal.query)
            captured_any = {"sources": json.loads(fields.get("sources") or "[]"), "captured_at": time.time(),
                            "batch_id": fields.get("batch_id"), "what": "positions"}
            self.redis.set(datastore_key(self.prefix, self.app.name, journal.id), json.dumps(captured_any),
                           ex=int(self.mcfg.datastore_ttl_s))
            backlogs = [s.get("backlog_records") for s in captured_any["sources"]]
            journal.marks["captured_records"] = None if None in backlogs else sum(backlogs)
            return
        status = read_source_status(self.redis, self.prefix, self.app.name, journal.query)
        parts = self.app.source_partitions
        processed_json = StreamOffsets.from_json(status.processed or status.committed or {}, parts).to_json()
        latest_json = StreamOffsets.from_json(status.latest or {}, parts).to_json()
        input_position = self._input_position()
        captured_at = time.time()
        processed = StreamOffsets.from_json(processed_json, parts).total
        # A script app reading the Redis streams source has no app-wide input position: the source's own backlog.
        records = input_position - processed if input_position is not None else status.backlog
        in_flight_records = max(StreamOffsets.from_json(latest_json, parts).total - processed, 0)
        captured = {
            "processed": processed_json, "latest": latest_json, "input_position": input_position,
            "captured_at": captured_at,
            "what": "positions",  # the records stay in the input streams, read first after the restart
            "records": records, "in_flight_records": in_flight_records,
        }
        self.redis.set(datastore_key(self.prefix, self.app.name, journal.id), json.dumps(captured),
                       ex=int(self.mcfg.datastore_ttl_s))
        journal.marks["captured_records"] = records
        journal.marks["captured_in_flight_records"] = in_flight_records

    def _repartition(self, journal: Journal) -> None:
        if journal.from_partitions == journal.to_partitions:
            # Only the shape changes. Not even asked: after an abort, a repartition to the count the
            # checkpoint has would commit the aborted batch as empty (agent.py, _repartition).
            journal.marks["repartition"] = "unchanged"
            return
        detail = self._command("repartition", {
            "query": journal.query, "partitions": journal.to_partitions,
            # A query aborted mid-batch has a failed last batch: its strategy skips it (recomputed).
            "enforce_exactly_once_sink": get_strategy(journal.strategy).enforce_exactly_once_sink(),
        }, timeout_s=self.mcfg.phase_timeout_s)
        journal.marks["repartition"] = detail

    def _restart(self, journal: Journal) -> None:
        shape = new_shape(journal)
        if shape is not None:
            self._restart_application(journal, shape)
        else:
            detail = self._command("start_query", {"query": journal.query, "partitions": journal.to_partitions},
                                   timeout_s=self.mcfg.phase_timeout_s)
            journal.marks["restart"] = detail
            if isinstance(detail, dict) and detail.get("run_id"):
                journal.marks["run_id"] = detail["run_id"]
        # What arrived until the query ran again: held back by a migration that does not pause (DSM).
        journal.marks["input_at_restart"] = self._input_position()

    def _resume(self, journal: Journal) -> None:
        self._command("resume_sources", {})
        journal.marks["input_at_resume"] = self._input_position()

    def _restored(self, journal: Journal) -> None:
        """The new run is up with its state, as the strategy defines it (`MigrationStrategy.restored`)."""
        strategy = get_strategy(journal.strategy)
        deadline = time.monotonic() + self.mcfg.phase_timeout_s
        while True:
            if strategy.restored(self, journal):
                return
            if time.monotonic() > deadline:
                raise MigrationError(f"the restarted {journal.query} produced no batch within "
                                     f"{self.mcfg.phase_timeout_s:g} s")
            time.sleep(POLL_S)

    def _await_first_output(self, journal: Journal) -> None:
        """The end of the restore metric for every strategy (Shukla & Simmhan §4 (1)): the new run's
        first batch with input. DSM and CCR found it in `restored`; DCR, whose `restored` is the
        state loaded with the sources paused, meets it only after the resume. Waits at most the phase
        timeout; never fails the migration (no input, no output: restore is then not measured)."""
        if journal.marks.get("first_output_at") is not None or journal.marks.get("first_output") is not None:
            return  # timed at restore, or stated not measured there (an idle query)
        timeline = timeline_of(journal)
        deadline = time.monotonic() + self.mcfg.phase_timeout_s
        while True:
            point = first_output(self.batches_since(journal.query, journal.requested_at - CLOCK_MARGIN_S), timeline)
            if point is not None:
                journal.marks["first_output_at"] = point.committed_at_s
                return
            if idle_after_restart(self.query_status(journal.query), journal):
                return
            if time.monotonic() > deadline:
                journal.marks["first_output"] = (f"no batch with input from the restarted query within "
                                                 f"{self.mcfg.phase_timeout_s:g} s of its restore")
                return
            time.sleep(POLL_S)

    # -- plumbing ---------------------------------------------------------------------------------

    def _complete(self, journal: Journal, phase: str) -> None:
        now = time.time()
        journal.phases[phase] = now
        self._write(journal)
        previous = max((t for p, t in journal.phases.items() if p != phase), default=journal.requested_at)
        duration_s = now - previous if phase != "requested" else 0.0
        log.info("migration.phase", app=self.app.name, id=journal.id, strategy=journal.strategy, phase=phase,
                 duration_s=round(duration_s, 3))
        if self.on_phase is not None:
            self.on_phase(journal, phase, duration_s)

    def _fail(self, journal: Journal, phase: str, reason: str) -> Journal:
        log.error("migration.step_failed", app=self.app.name, id=journal.id, phase=phase, reason=reason)
        journal.detail = f"{phase}: {reason}"
        if not self.is_leader():
            # Fenced off: no recovery, the journal left running for a successor to finish. A
            # deposed leader's write is refused (JournalFenced, `migration.fenced`), not made.
            self._write(journal)
            raise MigrationError(f"migration {journal.id} stopped at {phase}: {reason} (no longer the leader)")
        return self.recovery.after_failure(journal, phase, reason)
