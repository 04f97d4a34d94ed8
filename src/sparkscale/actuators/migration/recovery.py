"""What a migration does when a step fails, and the operator's abort: never strand the app.

A stopped query and paused sources are what a migration leaves behind when it stops half-way, so
every path below ends with the sources resumed and, unless it ends `needs_attention`, the query
running:

- the checkpoint still has the old partitions (the failure came before `repartitioned`): start the
  query on them and resume the sources: `rolled_back` (an abort: `aborted`);
- after the repartition, a failure first finishes forward (start the query on the new partitions,
  or restart the application with its new shape; resume the sources): `done_degraded`, the failure
  kept in `detail`; then, where it is safe, rolls back (stop the query held, repartition back to the
  old count with the strategy's own offline repartition, start, resume): `rolled_back`. An abort
  tries the same two ways the other way round and ends `aborted`;
- neither worked: resume the sources anyway, keep the journal, log `migration.needs_attention`
  with the commands that go on (`sparkscale migrate --resume ID` / `--abort ID`): `needs_attention`.

While it runs the journal's status is `recovering` and `marks.recovery` records each attempt and
each step, before and after it runs, so a new leader goes on in the same direction (every step is
an idempotent agent command). A runner that lost its lock stops at once: its journal writes are
fenced (`JournalFenced`), and it sends nothing more.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Literal

import redis
import structlog

from sparkscale.actuators.migration.base import MigrationError, get_strategy
from sparkscale.actuators.migration.journal import JournalFenced, new_shape, operator_commands, phase_metrics
from sparkscale.actuators.migration.session import MigrationSession
from sparkscale.model.journal import AttemptMark, Journal, JournalStatus, Phase, StepMark
from sparkscale.protocol.commands import AckTimeout
from sparkscale.protocol.keys import paused_key

log = structlog.get_logger(__name__)

STEP_ERRORS = (MigrationError, AckTimeout, redis.RedisError)  # JournalFenced is re-raised before these
Way = Literal["forward", "back"]
FORWARD: Way = "forward"
BACK: Way = "back"
Step = tuple[str, Callable[[], Any]]


class Recovery:
    """Brings an app whose migration failed (or is aborted) back to a running query with its sources
    resumed, through the runner's agent commands; records every step in the journal."""

    def __init__(self, runner: MigrationSession):
        self.runner = runner

    # -- entry points -----------------------------------------------------------------------------

    def after_failure(self, journal: Journal, phase: str, reason: str) -> Journal:
        """A step failed and the runner still leads. Returns the journal ended `done_degraded`;
        raises MigrationError once it is `rolled_back` or `needs_attention`."""
        self._begin(journal, "recover", f"{phase}: {reason}")
        return self.proceed(journal)

    def abort(self, journal: Journal) -> Journal:
        """The operator's abort: returns the journal ended `aborted`; raises MigrationError when
        it needs attention."""
        self._begin(journal, "abort", "aborted by the operator")
        return self.proceed(journal)

    def proceed(self, journal: Journal) -> Journal:
        """Try the ways back to a running app in order; a successor goes on with the way its
        predecessor was trying."""
        rec = journal.marks["recovery"]
        ways = [BACK] if not rec["state_moved"] else [FORWARD, BACK] if rec["goal"] == "recover" else [BACK, FORWARD]
        if rec["attempts"] and rec["attempts"][-1]["way"] in ways:
            ways = ways[ways.index(rec["attempts"][-1]["way"]):]
        for way in ways:
            unsafe = self._unsafe(journal, way)
            if unsafe is not None:
                rec.setdefault("skipped", {})[way] = unsafe
                continue
            if self._attempt(journal, way):
                return self._end(journal, way)
        return self._needs_attention(journal)

    def reopen(self, journal: Journal) -> None:
        """The operator's resume of a migration that needs attention: its remaining phases run
        again; after a repartition back was tried, from the stop on (the checkpoint may have the
        old count: stop and repartition answer "already" when nothing is left to do)."""
        if back_repartition_tried(journal):
            plan = journal.phase_plan
            first = next((plan.index(p) for p in ("stopped", "repartitioned") if p in plan), len(plan))
            for phase in plan[first:]:
                journal.phases.pop(phase, None)
            journal.marks.pop("first_output_at", None)
        _archive(journal)
        journal.status = JournalStatus.RUNNING

    # -- the ways ---------------------------------------------------------------------------------

    def _begin(self, journal: Journal, goal: Literal["recover", "abort"], reason: str) -> None:
        _archive(journal)
        journal.status = JournalStatus.RECOVERING
        reached = journal.phase_reached
        journal.marks["recovery"] = {"goal": goal, "reason": reason, "at": journal.next,
                                     "phase_reached": None if reached is None else Phase(reached),
                                     "state_moved": self._state_moved(journal), "began_at": time.time(),
                                     "epoch": self.runner.epoch, "attempts": []}
        log.warning("migration.recovering", app=journal.app, query=journal.query, id=journal.id, goal=goal,
                    phase=journal.next, reason=reason, state_moved=journal.marks["recovery"]["state_moved"])
        self.runner._write(journal)  # fenced: a deposed runner stops here, having sent nothing

    def _state_moved(self, journal: Journal) -> bool:
        """Whether the checkpoint may have the new partitions: the repartition completed, or it was
        under way and the agent recorded the new count (its answer was lost)."""
        if "repartitioned" in journal.phases:
            return True
        if journal.next != "repartitioned" or journal.from_partitions == journal.to_partitions:
            return False
        try:
            return self.runner.current_partitions(journal.query) == journal.to_partitions
        except redis.RedisError:
            return False  # as before the recovery: the rollback's start takes the checkpoint's count

    def _unsafe(self, journal: Journal, way: Way) -> str | None:
        """Why `way` cannot be taken (None: it can)."""
        if way == FORWARD or not journal.marks["recovery"]["state_moved"]:
            return None
        if new_shape(journal) is not None:
            return "a new executor shape: the whole application was restarted with it (no way back here)"
        if journal.from_partitions == journal.to_partitions:
            return "the partitions did not change: nothing to repartition back"
        return None

    def _plan(self, journal: Journal, way: Way) -> list[Step]:
        """The agent commands of `way`, in order."""
        q, r, m = journal.query, self.runner, self.runner.mcfg
        resume: Step = ("resume_sources", self._resume)
        if not journal.marks["recovery"]["state_moved"]:
            return [("start_query", lambda: self._start(journal, journal.from_partitions)), resume]
        if way == FORWARD and new_shape(journal) is not None:
            return [("restart_application", lambda: self._restart_application(journal)), resume]
        target = journal.to_partitions if way == FORWARD else journal.from_partitions
        start: Step = ("start_query", lambda: self._start(journal, target))
        if way == FORWARD and not back_repartition_tried(journal):
            return [start, resume]  # the checkpoint has the new count; a running query answers "already"
        strategy = get_strategy(journal.strategy)
        kind, args = strategy.stop_command(q, m.phase_timeout_s)
        if kind == "stop_query":
            args = {**args, "idle_wait_s": m.idle_trigger_wait_s}
        stop: Step = (kind, lambda: r._command(kind, args, timeout_s=m.phase_timeout_s + r.cfg.actuator.ack_timeout_s))
        repartition: Step = ("repartition", lambda: r._command("repartition", {
            "query": q, "partitions": target, "enforce_exactly_once_sink": strategy.enforce_exactly_once_sink(),
        }, timeout_s=m.phase_timeout_s))
        return [stop, repartition, start, resume]

    def _attempt(self, journal: Journal, way: Way) -> bool:
        rec = journal.marks["recovery"]
        moved = rec["state_moved"]
        partitions = journal.to_partitions if way == FORWARD and moved else journal.from_partitions
        attempt: AttemptMark = {"way": way, "partitions": partitions, "steps": []}
        rec["attempts"].append(attempt)
        for name, step in self._plan(journal, way):
            entry: StepMark = {"step": name, "began_at": time.time()}
            attempt["steps"].append(entry)
            self.runner._write(journal)  # before the step: a successor knows what may have been under way
            try:
                entry["detail"] = step()
            except JournalFenced:
                raise
            except STEP_ERRORS as exc:
                entry.update({"ok": False, "error": str(exc), "at": time.time()})
                attempt["error"] = f"{name}: {exc}"
                log.warning("migration.recovery_step_failed", app=journal.app, id=journal.id, way=way, step=name,
                            partitions=partitions, error=str(exc))
                self.runner._write(journal)
                self._still_leading(journal)
                return False
            entry.update({"ok": True, "at": time.time()})
            log.info("migration.recovery_step", app=journal.app, id=journal.id, way=way, step=name,
                     partitions=partitions)
            if self.runner.on_phase is not None:
                self.runner.on_phase(journal, f"{way}:{name}", 0.0)
        self.runner._write(journal)
        return True

    def _end(self, journal: Journal, way: Way) -> Journal:
        rec = journal.marks["recovery"]
        status = (JournalStatus.ABORTED if rec["goal"] == "abort" else JournalStatus.DONE_DEGRADED if way == FORWARD
                  else JournalStatus.ROLLED_BACK)
        rec["ended_at"] = time.time()
        journal.status = status
        if status == "done_degraded":
            journal.marks["metrics"] = phase_metrics(journal)  # what is known; restore is not measured
        self.runner._write(journal)
        partitions = rec["attempts"][-1]["partitions"]
        log.warning(f"migration.{status}", app=journal.app, query=journal.query, id=journal.id, phase=rec["at"],
                    reason=rec["reason"], way=way, partitions=partitions)
        if status == "rolled_back":
            raise MigrationError(f"migration {journal.id} rolled back to {partitions} partitions, sources resumed: "
                                 f"{rec['reason']}")
        return journal

    def _needs_attention(self, journal: Journal) -> Journal:
        rec = journal.marks["recovery"]
        rec["sources_resumed"] = self.resume_anyway(journal)
        rec["ended_at"] = time.time()
        journal.status = JournalStatus.NEEDS_ATTENTION
        self.runner._write(journal)
        errors = "; ".join([f"{a['way']}: {a['error']}" for a in rec["attempts"] if a.get("error")]
                           + [f"{way} not tried: {why}" for way, why in rec.get("skipped", {}).items()])
        resume, abort = operator_commands(journal)
        log.error("migration.needs_attention", app=journal.app, query=journal.query, id=journal.id,
                  phase=journal.phase_reached, failed_phase=rec["at"], error=rec["reason"], recovery=errors,
                  sources_resumed=rec["sources_resumed"], resume=resume, abort=abort)
        raise MigrationError(f"migration {journal.id} of {journal.app}/{journal.query} needs attention: "
                             f"{rec['reason']} (recovery: {errors or 'none'}); sources "
                             f"{'resumed' if rec['sources_resumed'] else 'NOT resumed'}; go on with `{resume}` "
                             f"or `{abort}`")

    # -- steps ------------------------------------------------------------------------------------

    def _start(self, journal: Journal, partitions: int) -> Any:
        detail = self.runner._command("start_query", {"query": journal.query, "partitions": partitions},
                                      timeout_s=self.runner.mcfg.phase_timeout_s)
        if isinstance(detail, dict) and detail.get("run_id"):
            journal.marks["run_id"] = detail["run_id"]  # the run that is measured afterwards
        return detail

    def _restart_application(self, journal: Journal) -> str:
        shape = new_shape(journal)
        assert shape is not None
        self.runner._restart_application(journal, shape)
        return "application restarted with its new shape"

    def _resume(self) -> Any:
        return self.runner._command("resume_sources", {})

    def resume_anyway(self, journal: Journal) -> bool:
        """A failed migration must not leave the sources paused for good (the pause lives in Redis
        and outlives the driver): resuming loses nothing, the input waits in the streams."""
        try:
            self._resume()
            return True
        except (MigrationError, AckTimeout) as exc:
            log.error("migration.resume_failed", app=journal.app, id=journal.id, error=str(exc),
                      paused_key=paused_key(self.runner.prefix, journal.app))
            return False

    def _still_leading(self, journal: Journal) -> None:
        """After a failed step: a runner that lost its lock stops here (status left `recovering`
        for a successor; its write is refused when its lock znode is gone)."""
        if not self.runner.is_leader():
            self.runner._write(journal)
            raise MigrationError(f"migration {journal.id}: recovery stopped, no longer the leader")


def back_repartition_tried(journal: Journal) -> bool:
    """Whether any recovery of the journal sent a repartition back to the old count."""
    recoveries = [*journal.marks.get("recoveries", []), journal.marks.get("recovery") or {}]
    return any(step["step"] == "repartition" for rec in recoveries for attempt in rec.get("attempts", [])
               if attempt["way"] == BACK for step in attempt["steps"])


def _archive(journal: Journal) -> None:
    """Keep an earlier recovery's record (a migration resumed after it needed attention)."""
    if "recovery" in journal.marks:
        journal.marks.setdefault("recoveries", []).append(journal.marks.pop("recovery"))
