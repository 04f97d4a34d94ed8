"""A migration's journal: what, which strategy, where it is, and the marks its metrics come from.

The journal is JSON in ZooKeeper (`R/apps/{app}/migration`); its persistence, fenced writes and
metrics are `actuators/migration/journal.py`. Here is the record alone, with its JSON generated
from the annotations (`model/codec.py`), so that the runner, the recovery, the monitors and the CLI
read one contract. `marks` is a TypedDict: a plain dict at run time (the runner sets and pops its
keys as it goes), with every key's type written down and checked when a journal is read.

The phase table of a migration is its strategy's, found in the strategy registry
(`sparkscale/registry.py`, which imports the strategies by name when first asked).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import ConfigDict, with_config
from typing_extensions import TypedDict

from sparkscale.model.codec import Codec, Json, one_of
from sparkscale.model.fields import FieldError
from sparkscale.registry import STRATEGIES


class JournalStatus(StrEnum):
    """Where a migration stands (docs/internals.md, "The migration journal")."""

    RUNNING = "running"
    RECOVERING = "recovering"
    NEEDS_ATTENTION = "needs_attention"
    FAILED = "failed"  # written only by versions before the recovery (actuators/migration/recovery.py)
    DONE = "done"
    DONE_DEGRADED = "done_degraded"
    ROLLED_BACK = "rolled_back"
    ABORTED = "aborted"


# Active: a runner carries it on, and a new leader resumes it. Open: not ended, so no other
# migration of the app starts and the operator may `--resume` or `--abort` it.
ACTIVE = (JournalStatus.RUNNING, JournalStatus.RECOVERING)
NEEDS_ATTENTION = (JournalStatus.NEEDS_ATTENTION, JournalStatus.FAILED)
OPEN = (*ACTIVE, *NEEDS_ATTENTION)
ENDED = (JournalStatus.DONE, JournalStatus.DONE_DEGRADED, JournalStatus.ROLLED_BACK, JournalStatus.ABORTED)


class Phase(StrEnum):
    """The phases the runner has a step for (actuators/migration/runner.py); a strategy's phase
    table is made of these, "requested" first and "done" last."""

    REQUESTED = "requested"
    PAUSED = "paused"
    DRAINED = "drained"
    STOPPED = "stopped"
    CAPTURED = "captured"
    REPARTITIONED = "repartitioned"
    RESTARTED = "restarted"
    RESUMED = "resumed"
    RESTORED = "restored"
    DONE = "done"


# Read as the enum, written as the string it is (the runner may set either).
PhaseName = Annotated[Phase, one_of(Phase)]
StatusName = Annotated[JournalStatus, one_of(JournalStatus)]


# -- marks -----------------------------------------------------------------------------------------
# Keys a newer writer adds are kept (extra="allow"); every key of a mark may be absent, as in a
# journal written before it existed.


@with_config(ConfigDict(extra="allow"))
class StopMark(TypedDict, total=False):
    """The agent's answer to the stop (`stop_query`, or DSM's `abort_query`)."""

    query: str
    stopped: bool
    already_stopped: bool  # a successor's stop: the query was stopped before
    held: bool
    last_batch_id: int | None
    waited_s: float  # for the running batch to end
    pausable: bool
    inside_batch: bool  # no boundary came: the stop landed inside a batch
    checkpoint: str | None
    notes: list[str]
    batch_was_running: bool  # abort_query: a batch was abandoned
    stop_s: float


class StepMark(TypedDict, total=False):
    """One agent command of a recovery attempt."""

    step: str
    began_at: float
    at: float
    ok: bool
    detail: Json  # the agent's answer
    error: str


class AttemptMark(TypedDict, total=False):
    """One way tried back to a running app: its partitions and its steps."""

    way: Literal["forward", "back"]
    partitions: int
    steps: list[StepMark]
    error: str


class RecoveryMark(TypedDict, total=False):
    """A recovery after a failed step or the operator's abort (actuators/migration/recovery.py)."""

    goal: Literal["recover", "abort"]
    reason: str
    at: PhaseName  # the phase whose step failed
    phase_reached: PhaseName | None
    state_moved: bool
    began_at: float
    epoch: int
    attempts: list[AttemptMark]
    skipped: dict[str, str]  # way -> why it could not be taken
    sources_resumed: bool
    ended_at: float


class TakeoverMark(TypedDict, total=False):
    """A leader that resumed or aborted the migration: its epoch, when, and what it found."""

    epoch: int
    at: float
    phase: PhaseName
    status: StatusName


@with_config(ConfigDict(extra="allow"))
class FollowUpMark(TypedDict, total=False):
    """The follow-up figures (monitors/migration_followup.py): pending, or measured with them."""

    status: Literal["pending", "measured"]
    measured_at: float


Metric = int | float | str | None  # seconds, records, or why a figure is not measured


@with_config(ConfigDict(extra="allow"))
class JournalMarks(TypedDict, total=False):
    """What the steps record: input positions, run ids, the agent's answers, times, the recovery
    and the metrics. Records ever arrived (`input_at_*`) are None where not known app-wide."""

    input_at_request: int | None
    input_at_pause: int | None
    input_at_restart: int | None
    input_at_resume: int | None
    run_id_at_request: str | None  # the run that is stopped
    run_id: str | None  # the restarted run, measured afterwards
    drain: str  # why there was no drain (sources that cannot be paused)
    stop: StopMark
    replayed_records: int  # admitted by the stopped run but not finished: recomputed
    captured_records: int | None  # arrived but not processed at the capture
    captured_in_flight_records: int  # of those, admitted to a batch
    repartition: Literal["unchanged"] | dict[str, Json]  # the agent's answer
    restart: Json  # the agent's answer to start_query
    app_restart_started_at: float
    app_restarted_at: float
    shape: dict[str, int]  # the executor shape the app was restarted with
    idle_since: float  # the restarted query found no input since
    first_output_at: float  # the new run's first batch with input: the end of restore
    first_output: str  # why restore is not measured
    recovery: RecoveryMark
    recoveries: list[RecoveryMark]  # earlier ones (a migration resumed after it needed attention)
    resumed_by: list[TakeoverMark]
    aborted_by: TakeoverMark
    metrics: dict[str, Metric]  # actuators/migration/journal.py: phase_metrics, and the follow-up's
    follow_up: FollowUpMark


# -- the journal -----------------------------------------------------------------------------------


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
    status: StatusName = JournalStatus.RUNNING  # one of OPEN or ENDED
    next: PhaseName = Phase.REQUESTED  # the phase whose step runs (or ran) now
    # phase -> completed at (seconds since the epoch); keys are Phase names, typed as the strings the
    # strategies' phase tables hold
    phases: dict[Annotated[str, one_of(Phase)], float] = field(default_factory=dict)
    marks: JournalMarks = field(default_factory=JournalMarks)
    detail: str = ""
    # A new executor shape (apps/submit.py's ExecutorShape fields; actuators/migration/journal.py's
    # new_shape): a whole-app restart.
    shape: dict[str, int] | None = None

    @property
    def active(self) -> bool:
        return self.status in ACTIVE

    @property
    def open(self) -> bool:
        return self.status in OPEN

    @property
    def needs_attention(self) -> bool:
        """Stopped short with the query perhaps not running: only the operator continues it."""
        return self.status in NEEDS_ATTENTION

    @property
    def phase_reached(self) -> str | None:
        """The last phase completed, in the strategy's order (None: not even `requested`)."""
        return next((p for p in reversed(self.phase_plan) if p in self.phases), None)

    def to_json(self) -> bytes:
        return JOURNAL_JSON.dumps(self).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Journal:
        """Raises JournalError naming the field of a journal that cannot be read."""
        return JOURNAL_JSON.loads(data)

    @property
    def phase_plan(self) -> tuple[str, ...]:
        """All the phases of the migration, in order: its strategy's phase table."""
        phases: tuple[str, ...] = STRATEGIES.get(self.strategy).phases
        return phases

    @property
    def remaining(self) -> tuple[str, ...]:
        return tuple(p for p in self.phase_plan if p not in self.phases)

    def phase_durations(self) -> dict[str, float]:
        """Seconds each completed phase took (from the previous phase's completion)."""
        out: dict[str, float] = {}
        previous = self.requested_at
        for phase in self.phase_plan:
            if phase in self.phases:
                out[phase] = round(self.phases[phase] - previous, 3)
                previous = self.phases[phase]
        return out


class JournalError(FieldError):
    """A journal that cannot be read: `path` names the field (`marks.recovery.attempts[0].way`)."""


JOURNAL_JSON: Codec[Journal] = Codec(Journal, JournalError, "journal")
