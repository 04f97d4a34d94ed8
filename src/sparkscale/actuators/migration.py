"""Migrations: a stateful query from N to M state partitions (Shukla & Simmhan, adapted to Spark).

A stateful Structured Streaming query's state partitions are fixed at its first run; changing them
means stopping the query, repartitioning its checkpointed state offline
(`spark._streamingCheckpointManager.repartition`, run by the in-driver agent) and restarting it.
How the stop and restart are done is the strategy (DESIGN.md, "Migration strategies"):

- DSM (§3.1, the default Storm rebalance): stop at once, abandoning the running batch; repartition
  with `enforce_exactly_once_sink=False` (the abandoned batch is skipped and recomputed); restart.
  Sources keep admitting: the restarted query catches up.
- DCR (§3.2, drain-checkpoint-restore): pause the sources; drain (the query finishes all it
  admitted); stop at that clean boundary (the last commit is the just-in-time checkpoint);
  repartition; restart; restore (the new run has loaded its state); then resume the sources.
- CCR (§3.3, capture-checkpoint-resume): pause and stop at the next batch boundary in one step,
  without waiting to drain; capture what arrived but was not processed (source offsets and stream
  positions) into the Redis DataStore; repartition; restart; resume at once: the captured records
  come first in the ordered input streams, so they are replayed before any newer one.

A migration may also give the executors a new shape (cores, memory): Spark fixes both for an
application's life, so then the restart step restarts the whole application (stop the driver,
submit it again with the new shape) instead of only the query; the strategies are the same, the
pause (in Redis) outlives the driver, and the partitions may stay as they are.

Each migration is a journal in ZooKeeper (`R/apps/{app}/migration`, JSON) whose `next` phase is
written before its step runs and whose `phases` record when each step completed. Every step is
idempotent (the agent answers "already" for a stopped query, an already repartitioned checkpoint
or a running query), so a daemon that dies at any phase is replaced by one that reads the journal
and completes the migration (`resume`). A failure before the state was repartitioned rolls back
(restart with the old partitions, resume the sources); after it, the migration can only go forward.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import redis
import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from sparkscale.config import AppConfig, Config
from sparkscale.pipeline.submit import ExecutorShape, running, store_shape
from sparkscale.protocol.commands import AckTimeout, send_command, wait_ack
from sparkscale.protocol.keys import datastore_key, input_stream_key, paused_key, progress_key
from sparkscale.protocol.streams import StreamOffsets, read_source_status, stored_partitions, stream_heads
from sparkscale.protocol.znodes import journal_path

log = structlog.get_logger(__name__)

Strategy = Literal["dsm", "dcr", "ccr"]
STRATEGIES: tuple[str, ...] = ("dsm", "dcr", "ccr")
PHASES: dict[str, tuple[str, ...]] = {
    "dsm": ("requested", "stopped", "repartitioned", "restarted", "restored", "done"),
    "dcr": ("requested", "paused", "drained", "stopped", "repartitioned", "restarted", "restored", "resumed", "done"),
    "ccr": ("requested", "paused", "stopped", "captured", "repartitioned", "restarted", "resumed", "restored", "done"),
}
POLL_S = 0.2  # how often progress and source status are read while waiting on a phase




class MigrationError(RuntimeError):
    """A step failed; the journal says where the migration stopped."""


class MigrationBusy(MigrationError):
    """Another migration of the app is running."""


@dataclass
class Journal:
    """One migration's record: what, which strategy, where it is, and the figures for its metrics."""

    id: str
    app: str
    query: str
    strategy: str
    from_partitions: int
    to_partitions: int
    requested_at: float
    by: str
    epoch: int
    status: str = "running"  # running | done | rolled_back | failed
    next: str = "requested"  # the phase whose step runs (or ran) now
    phases: dict[str, float] = field(default_factory=dict)  # phase -> completed at (seconds since the epoch)
    marks: dict[str, Any] = field(default_factory=dict)  # positions, run ids, figures for the metrics
    detail: str = ""
    shape: dict[str, int] | None = None  # a new executor shape (ExecutorShape fields): a whole-app restart

    @property
    def new_shape(self) -> ExecutorShape | None:
        return ExecutorShape(**self.shape) if self.shape else None

    def to_json(self) -> bytes:
        return json.dumps(asdict(self)).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Journal:
        return cls(**json.loads(data.decode()))

    @property
    def remaining(self) -> tuple[str, ...]:
        return tuple(p for p in PHASES[self.strategy] if p not in self.phases)

    def phase_durations(self) -> dict[str, float]:
        """Seconds each completed phase took (from the previous phase's completion)."""
        out: dict[str, float] = {}
        previous = self.requested_at
        for phase in PHASES[self.strategy]:
            if phase in self.phases:
                out[phase] = round(self.phases[phase] - previous, 3)
                previous = self.phases[phase]
        return out


class JournalStore:
    def __init__(self, zk: KazooClient, root: str, app: str):
        self.zk = zk
        self.path = journal_path(root, app)

    def read(self) -> Journal | None:
        try:
            data, _stat = self.zk.get(self.path)
        except NoNodeError:
            return None
        return Journal.from_json(data) if data else None

    def write(self, journal: Journal) -> None:
        try:
            self.zk.set(self.path, journal.to_json())
        except NoNodeError:
            try:
                self.zk.create(self.path, journal.to_json(), makepath=True)
            except NodeExistsError:
                self.zk.set(self.path, journal.to_json())


PhaseCallback = Callable[[Journal, str, float], None]


class MigrationRunner:
    """Carries out (or resumes) one app's migration through the control agent. Never decides."""

    def __init__(self, cfg: Config, app: AppConfig, zk: KazooClient, redis_client: redis.Redis, epoch: int,
                 is_leader: Callable[[], bool], on_phase: PhaseCallback | None = None,
                 restart_app: Callable[[], Any] | None = None):
        """`restart_app` restarts the whole application (stop its driver, submit it again): needed
        for a migration that changes the executor shape."""
        self.cfg = cfg
        self.app = app
        self.zk = zk
        self.redis = redis_client
        self.epoch = epoch
        self.is_leader = is_leader
        self.on_phase = on_phase
        self.restart_app = restart_app
        self.root = cfg.zookeeper.root
        self.prefix = cfg.redis.key_prefix
        self.store = JournalStore(zk, self.root, app.name)
        self.mcfg = cfg.migration

    # -- entry points -----------------------------------------------------------------------------

    def start(self, query: str, to_partitions: int, strategy: str, by: str,
              shape: ExecutorShape | None = None) -> Journal:
        if strategy not in STRATEGIES:
            raise MigrationError(f"unknown strategy {strategy!r} (expected one of {', '.join(STRATEGIES)})")
        current = self.store.read()
        if current is not None and current.status == "running":
            raise MigrationBusy(f"migration {current.id} of {self.app.name} is still running (phase {current.next})")
        from_partitions = self.current_partitions(query)
        if shape is not None and shape == ExecutorShape(self.app.executor_cores, self.app.executor_memory_mb):
            shape = None  # already this shape
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
        self._complete(journal, "requested")
        _fault_hold("requested")
        return self.run(journal)

    def run(self, journal: Journal) -> Journal:
        """Carry out the remaining phases; roll back or stop with the journal saying where."""
        steps: dict[str, Callable[[Journal], None]] = {
            "paused": self._pause, "drained": self._drain, "stopped": self._stop, "captured": self._capture,
            "repartitioned": self._repartition, "restarted": self._restart, "resumed": self._resume,
            "restored": self._restored, "done": lambda j: None,
        }
        for phase in journal.remaining:
            journal.next = phase
            self._write(journal)  # before the step: a successor knows what may have been under way
            try:
                steps[phase](journal)
            except (MigrationError, AckTimeout, redis.RedisError) as exc:
                return self._fail(journal, phase, str(exc))
            _fault_hold(phase)
            self._complete(journal, phase)
        journal.status = "done"
        journal.marks["metrics"] = phase_metrics(journal)
        self._write(journal)
        log.info("migration.done", app=self.app.name, id=journal.id, strategy=journal.strategy,
                 **journal.marks["metrics"])
        return journal

    def resume(self) -> Journal | None:
        """Complete a migration a dead leader left running (None if there is none)."""
        journal = self.store.read()
        if journal is None or journal.status != "running":
            return None
        log.warning("migration.resume", app=self.app.name, id=journal.id, phase=journal.next,
                    completed=list(journal.phases), previous_epoch=journal.epoch, epoch=self.epoch)
        journal.marks.setdefault("resumed_by", []).append({"epoch": self.epoch, "at": time.time(),
                                                           "phase": journal.next})
        journal.epoch = self.epoch
        return self.run(journal)

    def current_partitions(self, query: str) -> int:
        """The query's state partitions: as last repartitioned, else its progress, else the config."""
        stored = stored_partitions(self.redis, self.prefix, self.app.name, query)
        if stored is not None:
            return stored
        progress = self.redis.hget(progress_key(self.prefix, self.app.name, query), "state_partitions")
        return int(progress) if progress else self.app.shuffle_partitions

    # -- steps ------------------------------------------------------------------------------------

    def _pause(self, journal: Journal) -> None:
        self._command("pause_sources", {})
        journal.marks["input_at_pause"] = self._input_position()

    def _drain(self, journal: Journal) -> None:
        """DCR: wait until the query has processed everything it admitted (no batch running, nothing
        admitted left); for one query that is the end of its running batch."""
        deadline = time.monotonic() + self.mcfg.phase_timeout_s
        while True:
            status = self._query_status(journal.query)
            if status is None:
                return  # already stopped (a resumed migration): nothing in flight
            if not status.get("isTriggerActive") and not status.get("isDataAvailable"):
                return
            if time.monotonic() > deadline:
                raise MigrationError(f"{journal.query} did not drain within {self.mcfg.phase_timeout_s:g} s")
            time.sleep(POLL_S)

    def _stop(self, journal: Journal) -> None:
        if journal.strategy == "dsm":
            detail = self._command("abort_query", {"query": journal.query, "hold": True})
        else:
            detail = self._command("stop_query", {"query": journal.query, "hold": True,
                                                  "timeout_s": self.mcfg.phase_timeout_s})
        journal.marks["stop"] = detail
        # What the stopped run had admitted but not finished: recomputed after the restart (DSM's
        # abandoned batch); zero for a stop at a batch boundary.
        status = read_source_status(self.redis, self.prefix, self.app.name, journal.query)
        parts = self.app.source_partitions
        latest = StreamOffsets.from_json(status.latest or {}, parts).total
        processed = StreamOffsets.from_json(status.processed or status.committed or {}, parts).total
        journal.marks["replayed_records"] = max(latest - processed, 0)

    def _capture(self, journal: Journal) -> None:
        """CCR: the admitted-but-unprocessed and arrived-but-unadmitted input, into the DataStore."""
        status = read_source_status(self.redis, self.prefix, self.app.name, journal.query)
        parts = self.app.source_partitions
        captured = {
            "processed": StreamOffsets.from_json(status.processed or status.committed or {}, parts).to_json(),
            "latest": StreamOffsets.from_json(status.latest or {}, parts).to_json(),
            "input_position": self._input_position(),
            "captured_at": time.time(),
        }
        captured["records"] = captured["input_position"] - StreamOffsets.from_json(captured["processed"], parts).total
        self.redis.set(datastore_key(self.prefix, self.app.name, journal.id), json.dumps(captured),
                       ex=int(self.mcfg.datastore_ttl_s))
        journal.marks["captured_records"] = captured["records"]

    def _repartition(self, journal: Journal) -> None:
        if journal.from_partitions == journal.to_partitions:
            # Only the shape changes. Not even asked: after an abort, a repartition to the count the
            # checkpoint has would commit the aborted batch as empty (agent.py, _repartition).
            journal.marks["repartition"] = "unchanged"
            return
        detail = self._command("repartition", {
            "query": journal.query, "partitions": journal.to_partitions,
            # A query stopped mid-batch (DSM) has a failed last batch: skip it, it is recomputed.
            "enforce_exactly_once_sink": journal.strategy != "dsm",
        }, timeout_s=self.mcfg.phase_timeout_s)
        journal.marks["repartition"] = detail

    def _restart(self, journal: Journal) -> None:
        shape = journal.new_shape
        if shape is not None:
            self._restart_application(journal, shape)
            return
        detail = self._command("start_query", {"query": journal.query, "partitions": journal.to_partitions},
                               timeout_s=self.mcfg.phase_timeout_s)
        journal.marks["restart"] = detail
        if isinstance(detail, dict) and detail.get("run_id"):
            journal.marks["run_id"] = detail["run_id"]

    def _restart_application(self, journal: Journal, shape: ExecutorShape) -> None:
        """A new executor shape: keep it (every later submit uses it), then stop the driver and submit
        the app again; the new driver starts the query from its (repartitioned) checkpoint, its
        sources still paused if the strategy paused them. Idempotent: a driver submitted after the
        repartition already runs with the shape."""
        assert self.restart_app is not None, "checked in start()"
        store_shape(self.redis, self.prefix, self.app.name, shape, journal.id)
        record = running(self.cfg, self.app.name)
        since = journal.phases.get("repartitioned", journal.requested_at)
        if record is not None and record.submitted_at > since:
            journal.marks.setdefault("app_restarted_at", record.submitted_at)
            return
        if not self.is_leader():
            raise MigrationError("restart not done: no longer the leader")
        journal.marks["app_restart_started_at"] = time.time()
        self._write(journal)
        self.restart_app()
        journal.marks["app_restarted_at"] = time.time()
        journal.marks["shape"] = asdict(shape)

    def _resume(self, journal: Journal) -> None:
        self._command("resume_sources", {})
        journal.marks["input_at_resume"] = self._input_position()

    def _restored(self, journal: Journal) -> None:
        """The new run is up with its state: its first batch with input (DCR, sources still paused:
        the run has left initialisation and waits for data)."""
        deadline = time.monotonic() + self.mcfg.phase_timeout_s
        run_id = journal.marks.get("run_id")
        restarted_at = journal.marks.get("app_restarted_at")
        while True:
            if journal.strategy == "dcr":
                status = self._query_status(journal.query)
                if status is not None and status.get("message") != "Initializing sources":
                    return
            else:
                progress = self.redis.hgetall(progress_key(self.prefix, self.app.name, journal.query))
                new_run = (progress.get("run_id") == run_id if restarted_at is None
                           else float(progress.get("published_at", 0)) >= restarted_at)  # a new driver's run
                if new_run and int(progress.get("num_input_rows", 0)) > 0:
                    journal.marks["first_output_at"] = float(progress.get("published_at", time.time()))
                    return
                if run_id is None and restarted_at is None and self._query_status(journal.query) is not None:
                    return  # resumed without a run id (the agent's answer was lost): the query runs
            if time.monotonic() > deadline:
                raise MigrationError(f"the restarted {journal.query} produced no batch within "
                                     f"{self.mcfg.phase_timeout_s:g} s")
            time.sleep(POLL_S)

    # -- plumbing ---------------------------------------------------------------------------------

    def _command(self, kind: str, args: dict[str, Any], timeout_s: float | None = None) -> Any:
        if not self.is_leader():
            raise MigrationError(f"{kind} not sent: no longer the leader")
        name = send_command(self.zk, self.root, self.app.name, kind, args, self.epoch)
        ack = wait_ack(self.zk, self.root, self.app.name, name, timeout_s or self.cfg.actuator.ack_timeout_s)
        if not ack.ok:
            raise MigrationError(f"{kind} refused: {ack.detail}")
        return ack.detail

    def _query_status(self, query: str) -> dict[str, Any] | None:
        report = self._command("report", {})
        for q in report.get("queries", []):
            if q.get("name") == query:
                return q.get("status") or {}
        return None

    def _input_position(self) -> int:
        keys = [input_stream_key(self.prefix, self.app.name, i) for i in range(self.app.source_partitions)]
        return sum(h.entries_added for h in stream_heads(self.redis, keys))

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

    def _write(self, journal: Journal) -> None:
        self.store.write(journal)

    def _fail(self, journal: Journal, phase: str, reason: str) -> Journal:
        log.error("migration.step_failed", app=self.app.name, id=journal.id, phase=phase, reason=reason)
        journal.detail = f"{phase}: {reason}"
        if "repartitioned" in journal.phases or not self.is_leader():
            # Past the point of no return (or fenced off): leave it running for a successor to finish.
            journal.status = "failed" if self.is_leader() else "running"
            self._write(journal)
            raise MigrationError(f"migration {journal.id} stopped at {phase}: {reason}")
        # Roll back: the checkpoint still has the old partitions; start the query and resume.
        try:
            self._command("start_query", {"query": journal.query, "partitions": journal.from_partitions},
                          timeout_s=self.mcfg.phase_timeout_s)
        except (MigrationError, AckTimeout) as exc:
            journal.status = "failed"
            journal.detail += f"; rollback failed: {exc}"
            self._write(journal)
            self._resume_anyway(journal)
            raise MigrationError(f"migration {journal.id} failed at {phase} and could not roll back: {exc}") from None
        self._command("resume_sources", {})
        journal.status = "rolled_back"
        self._write(journal)
        log.warning("migration.rolled_back", app=self.app.name, id=journal.id, phase=phase)
        raise MigrationError(f"migration {journal.id} rolled back at {phase}: {reason}")


    def _resume_anyway(self, journal: Journal) -> None:
        """A failed rollback must not leave the sources paused for good (the pause lives in Redis and
        outlives the driver): resuming loses nothing, the input waits in the streams."""
        try:
            self._command("resume_sources", {})
        except (MigrationError, AckTimeout) as exc:
            log.error("migration.resume_failed", app=self.app.name, id=journal.id, error=str(exc),
                      paused_key=paused_key(self.prefix, self.app.name))


FAULT_HOLD_ENV = "SPARKSCALE_MIGRATION_HOLD"


def _fault_hold(phase: str) -> None:
    """Fault injection for crash tests: with SPARKSCALE_MIGRATION_HOLD=<phase> in its environment,
    the process stops for good right after that phase's step ran and before it is recorded (for
    `requested`: right after the journal was created), so a test can SIGKILL it at exactly that
    point: the step done, but not known to be done."""
    if os.environ.get(FAULT_HOLD_ENV) == phase:
        log.warning("migration.fault_hold", phase=phase, env=FAULT_HOLD_ENV)
        threading.Event().wait()


def phase_metrics(journal: Journal) -> dict[str, float | int | None]:
    """The metrics known when the migration ends (the seed's; catch-up and later ones need the
    query's progress afterwards: `measure_after`)."""
    p = journal.phases
    d = journal.phase_durations()
    first_output = journal.marks.get("first_output_at") or p.get("restored")
    rebalance = [d.get(x) for x in ("stopped", "repartitioned", "restarted")]
    return {
        "restore_s": round(first_output - journal.requested_at, 3) if first_output else None,
        "drain_s": d.get("drained"),
        "capture_s": d.get("captured"),
        "rebalance_s": round(sum(x for x in rebalance if x is not None), 3),
        "total_s": round(p["done"] - journal.requested_at, 3) if "done" in p else None,
        "captured_records": journal.marks.get("captured_records"),
    }


@dataclass(frozen=True)
class _Sample:
    at: float
    processed: int
    arrived: int


def measure_after(cfg: Config, app: AppConfig, redis_client: redis.Redis, journal: Journal,
                  sample_s: float = 1.0) -> dict[str, float | int | None]:
    """Follow the query after a migration for the seed's remaining metrics (seconds from the request):

    - catch_up_s: the last record that arrived before the request is processed;
    - recovery_s: the last record that arrived before the sources resumed (what the migration held
      back and the restarted query replays first) is processed;
    - stabilization_s: from then on the processed rate stays within `stable_tolerance` of the input
      rate for `stable_window_s` (the start of that run).
    Gives up after `measure_timeout_s`, leaving what was not reached as None.
    """
    mcfg = cfg.migration
    prefix = cfg.redis.key_prefix
    keys = [input_stream_key(prefix, app.name, i) for i in range(app.source_partitions)]
    at_request = int(journal.marks.get("input_at_request", 0))
    held_back = int(journal.marks.get("input_at_resume", journal.marks.get("input_at_pause", at_request)))
    catch_up = recovery = stable_from = None
    samples: list[_Sample] = []
    deadline = time.monotonic() + mcfg.measure_timeout_s
    while time.monotonic() < deadline:
        now = time.time()
        status = read_source_status(redis_client, prefix, app.name, journal.query)
        processed = StreamOffsets.from_json(status.processed or status.committed or {}, app.source_partitions).total
        arrived = sum(h.entries_added for h in stream_heads(redis_client, keys))
        samples.append(_Sample(now, processed, arrived))
        if catch_up is None and processed >= at_request:
            catch_up = now - journal.requested_at
        if recovery is None and processed >= held_back:
            recovery = now - journal.requested_at
        if recovery is not None:
            stable_from = _stable_since(samples, mcfg.stable_tolerance, mcfg.stable_window_s)
            if stable_from is not None:
                break
        time.sleep(sample_s)  # a sampling period: rates need samples spread in time
    return {
        "catch_up_s": _round(catch_up),
        "recovery_s": _round(recovery),
        "stabilization_s": _round(stable_from - journal.requested_at if stable_from is not None else None),
        "replayed_records": journal.marks.get("replayed_records"),
    }


def _stable_since(samples: list[_Sample], tolerance: float, window_s: float,
                  rate_window_s: float = 10.0) -> float | None:
    """The start of a run of `window_s` (ending at the last sample) during which the processed rate
    over `rate_window_s` stayed within `tolerance` of the input rate; None if there is none yet.
    Rates are taken over several seconds because a micro-batch source advances in steps, one per
    batch: over a window shorter than a few batches the output rate swings even when it keeps up."""
    if not samples or samples[-1].at - samples[0].at < window_s:
        return None
    start = None
    for i, s in enumerate(samples):
        j = next((k for k in range(i, -1, -1) if s.at - samples[k].at >= rate_window_s), None)
        if j is None:
            continue
        dt = s.at - samples[j].at
        rate_in = (s.arrived - samples[j].arrived) / dt
        rate_out = (s.processed - samples[j].processed) / dt
        ok = abs(rate_out - rate_in) <= tolerance * max(rate_in, 1e-9) or (rate_in == 0 and rate_out == 0)
        if ok and start is None:
            start = samples[j].at
        elif not ok:
            start = None
    if start is not None and samples[-1].at - start >= window_s:
        return start
    return None


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 3)
