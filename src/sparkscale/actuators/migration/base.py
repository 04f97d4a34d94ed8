"""What a migration strategy is, and how the runner finds one by name.

A strategy is the phase table the runner walks ("requested" first, "done" last, each phase one of
the runner's steps: PHASE_STEPS) and the few choices in which strategies differ: how the query is
stopped, whether the repartition enforces the exactly-once sink, and what "restored" means. The
runner (runner.py) has the steps and never looks at a strategy's name.

To add a strategy: write a subclass of `MigrationStrategy` with a `name` and a `phases` table,
override the choices it makes differently from the defaults, decorate it with `@register_strategy`,
and either import its module before the lookup or name it by an entry point of the group
`sparkscale.migration_strategies` (a third-party package declares
`[project.entry-points."sparkscale.migration_strategies"] mine = "mypkg.mystrategy"`); entry points
are loaded once, on the first lookup. The built-in strategies (dsm.py, dcr.py, ccr.py) register when
the package `sparkscale.actuators.migration` is imported.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

import structlog

from sparkscale.monitors.migration_metrics import CLOCK_MARGIN_S, first_output, timeline_of
from sparkscale.registry import STRATEGIES

if TYPE_CHECKING:
    from sparkscale.model.journal import Journal
    from sparkscale.monitors.batch_points import BatchPoint

log = structlog.get_logger(__name__)

# The phases the runner has a step for, in no particular order: a phase table is made of these.
PHASE_STEPS: frozenset[str] = frozenset({"requested", "paused", "drained", "stopped", "captured", "repartitioned",
                                         "restarted", "resumed", "restored", "done"})


class MigrationError(RuntimeError):
    """A step failed; the journal says where the migration stopped."""


class MigrationBusy(MigrationError):
    """Another migration of the app is running."""


class UnknownStrategy(MigrationError, LookupError):
    """No migration strategy is registered under the name."""


class UnknownMigration(MigrationError, LookupError):
    """The operator named a migration the app's journal does not hold, or one that already ended."""


class RestoreProbe(Protocol):
    """What a strategy may read to decide that the restarted query is restored (the runner is one)."""

    def query_status(self, query: str) -> dict[str, Any] | None:
        """The query's status in the driver (the agent's report); None when it does not run."""
        ...

    def batches_since(self, query: str, since_s: float) -> list[BatchPoint]:
        """The query's batches as the agent published them (its progress history) since `since_s`."""
        ...


class MigrationStrategy:
    """A migration strategy: its phase table and its choices. The defaults are those of a strategy
    that stops at a batch boundary (DCR, CCR); override what differs."""

    name: ClassVar[str]
    # The ordered phases the runner carries out: "requested" first, "done" last.
    phases: ClassVar[tuple[str, ...]]

    def stop_command(self, query: str, timeout_s: float) -> tuple[str, dict[str, Any]]:
        """The agent command (and its args) that stops the query and holds it stopped. Default: stop
        at the next batch boundary, nothing abandoned."""
        return "stop_query", {"query": query, "hold": True, "timeout_s": timeout_s}

    def enforce_exactly_once_sink(self) -> bool:
        """Whether the repartition enforces the exactly-once sink (the checkpoint's last batch is
        committed). Default: yes, the query was stopped at a batch boundary."""
        return True

    def waits_for_boundary(self) -> bool:
        """Whether the stop waits for the running batch to end (`boundary_wait_s`). Default: yes."""
        return True

    def restored(self, probe: RestoreProbe, journal: Journal) -> bool:
        """One look at whether the restarted query is up with its state (the runner polls this until
        the phase timeout). Default: the new run's first batch with input, found in the progress
        history (its commit is recorded as `first_output_at`, the end of the restore metric); a query
        resumed without a run id (the agent's answer was lost) counts once it runs."""
        timeline = timeline_of(journal)
        point = first_output(probe.batches_since(journal.query, journal.requested_at - CLOCK_MARGIN_S), timeline)
        if point is not None:
            journal.marks["first_output_at"] = point.committed_at_s
            return True
        status = probe.query_status(journal.query)
        if journal.marks.get("run_id") is None and journal.marks.get("app_restarted_at") is None and status is not None:
            return True
        return idle_after_restart(status, journal)


# A restarted query that looked for input and found none this long is restored: nothing waits to be
# recomputed or replayed, and its state loads with its next batch. Longer than a trigger's round trip,
# so that a query which is about to see input (sources just resumed) is not taken for an idle one.
IDLE_RESTORED_S = 5.0
_IDLE_MESSAGE = "Waiting for data to arrive"  # Spark's status once a trigger found no new offsets


def idle_after_restart(status: dict[str, Any] | None, journal: Journal, now_s: float | None = None) -> bool:
    """The restarted query runs and has found no input for `IDLE_RESTORED_S` (kept in the journal's
    marks, so a resumed migration counts on). Such a migration is restored without a first output:
    the restore time is then stated as not measured, instead of a wait for input that may never come."""
    now_s = time.time() if now_s is None else now_s
    if status is None or status.get("isDataAvailable") or status.get("message") == "Initializing sources":
        journal.marks.pop("idle_since", None)  # not running, not up yet, or input came
        return False
    # A trigger that looks for offsets and finds none ("Getting offsets from ...", data not available)
    # is still idle: an idle query polls all the time. The idle time starts at Spark's own word for it.
    if "idle_since" not in journal.marks and status.get("message") != _IDLE_MESSAGE:
        return False
    since = journal.marks.setdefault("idle_since", now_s)
    if now_s - since < IDLE_RESTORED_S:
        return False
    journal.marks["first_output"] = (f"not measured: the restarted query ran and saw no new input for "
                                     f"{IDLE_RESTORED_S:g} s, so no batch with input came to time the restore by")
    return True


S = TypeVar("S", bound=type[MigrationStrategy])

def register_strategy(cls: S) -> S:
    """Class decorator: make `cls` (instantiated without arguments) available as `get_strategy(cls.name)`.
    Registering a different class under a name already taken is an error."""
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name:
        raise TypeError(f"{cls.__qualname__} has no `name` (a non-empty str class attribute)")
    _check_phases(cls, getattr(cls, "phases", None))
    STRATEGIES.register(name, cls)
    return cls


def get_strategy(name: str) -> MigrationStrategy:
    """The strategy registered as `name` (an instance; strategies hold no state)."""
    try:
        strategy: MigrationStrategy = STRATEGIES.get(name)()
        return strategy
    except KeyError:
        raise UnknownStrategy(f"unknown strategy {name!r} (expected one of {', '.join(STRATEGIES.names())})") from None


def registered_strategies() -> tuple[str, ...]:
    """The registered strategies' names, in registration order (the built-ins first: dsm, dcr, ccr)."""
    return STRATEGIES.names()


def phases_of(name: str) -> tuple[str, ...]:
    """The phase table of the strategy registered as `name`."""
    return get_strategy(name).phases


def _check_phases(cls: type, phases: object) -> None:
    if not isinstance(phases, tuple) or not phases or not all(isinstance(p, str) for p in phases):
        raise TypeError(f"{cls.__qualname__} has no `phases` (a tuple of phase names)")
    if phases[0] != "requested" or phases[-1] != "done":
        raise ValueError(f"{cls.__qualname__}.phases must start with 'requested' and end with 'done': {phases}")
    unknown = [p for p in phases if p not in PHASE_STEPS]
    if unknown or len(set(phases)) != len(phases):
        raise ValueError(f"{cls.__qualname__}.phases must name each of the runner's steps at most once "
                         f"({', '.join(sorted(PHASE_STEPS))}): {phases}")
