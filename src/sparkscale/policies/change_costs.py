"""Measured change costs: how long a kind of change stalls an app's processing (Flink's autoscaler
measures the restart time per job for its catch-up sizing; EDRP's t_D per action kind, Cardellini
et al., Appendix A.1). DS2's restart-aware catch-up and its migration payback read them
(policies/ds2.py).

Pure. The samples travel in the decision history (`DecisionHistory.change_costs`, per kind, per
app): an executor change's stall is measured the way daemon/downtime_tracker.py measures EDRP's
(`executor_stall_s`: the longest batch from the action's start to a horizon after it, less the
median batch before it), a migration's from its journal's phase times (`migration_stall_s`).
`cost_s(kind)` is the median of the newest samples, else the configured default.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass

from sparkscale.model.journal import Journal, Phase
from sparkscale.model.plan import Action
from sparkscale.policies.history import DecisionHistory

EXECUTOR_ADD = "executor_add"
EXECUTOR_REMOVE = "executor_remove"
MIGRATION_PREFIX = "migration_"
RECENT = 5  # the newest samples a cost is the median of

# A migration's query processes nothing from the first of these phases ...
_STALL_FROM = (Phase.PAUSED, Phase.STOPPED)
# ... until the last of these completed.
_STALL_TO = (Phase.RESTARTED, Phase.RESUMED, Phase.RESTORED)


def migration_kind(strategy: str) -> str:
    """The kind of a migration carried out by `strategy` (dsm | dcr | ccr or a plug-in's)."""
    return MIGRATION_PREFIX + strategy


def change_kind(action: Action, strategy: str | None = None) -> str | None:
    """The kind of change `action` is (None: one that stalls nothing measured here). A
    set_parallelism is a migration by `strategy` (None: any strategy's)."""
    if action.type == "scale_executors" and action.from_ is not None and action.to is not None:
        if action.to == action.from_:
            return None
        return EXECUTOR_ADD if action.to > action.from_ else EXECUTOR_REMOVE
    if action.type == "set_parallelism":
        return MIGRATION_PREFIX + (strategy or "")
    return None


def executor_stall_s(longest_batch_s: float, median_batch_before_s: float) -> float:
    """An executor change's stall (daemon/downtime_tracker.py's method): the longest batch around it
    less the usual batch before it, never below 0."""
    return max(longest_batch_s - median_batch_before_s, 0.0)


def migration_stall_s(journal: Journal) -> float | None:
    """Seconds the migrated query processed nothing: from its pause or stop to its restart, resume or
    restore, whichever completed last (None: the journal has not got that far)."""
    starts = [journal.phases[p] for p in _STALL_FROM if p in journal.phases]
    ends = [journal.phases[p] for p in _STALL_TO if p in journal.phases]
    if not ends:
        return None
    start = min(starts) if starts else journal.requested_at
    return max(max(ends) - start, 0.0)


@dataclass(frozen=True)
class ChangeCost:
    """A kind of change's cost in seconds of stall, and where the figure came from."""

    kind: str
    seconds: float
    samples: int  # 0: the configured default

    def explain(self) -> str:
        source = (f"median of the last {self.samples} measured" if self.samples
                  else "configured default (none measured)")
        return f"{self.kind} costs {self.seconds:g} s of stall ({source})"


def cost_s(history: DecisionHistory, kind: str, defaults: Mapping[str, float], fallback_s: float) -> ChangeCost:
    """`kind`'s cost for this app: the median of its newest RECENT samples, else `defaults[kind]`,
    else `fallback_s`. A migration kind without a strategy ("migration_") pools every strategy's
    samples, oldest first as recorded per strategy."""
    if kind == MIGRATION_PREFIX:
        samples = [s for k, values in sorted(history.change_costs.items()) if k.startswith(MIGRATION_PREFIX)
                   for s in values]
    else:
        samples = list(history.change_costs.get(kind, ()))
    recent = samples[-RECENT:]
    if recent:
        return ChangeCost(kind, float(statistics.median(recent)), len(recent))
    default = defaults.get(kind, defaults.get(MIGRATION_PREFIX, fallback_s) if kind.startswith(MIGRATION_PREFIX)
                           else fallback_s)
    return ChangeCost(kind, default, 0)
