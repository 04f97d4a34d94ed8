"""Restart-aware catch-up for DS2 (`policy.ds2.restart_aware`, `policy.ds2.payback_horizon_s`):
which change a decision foresees, what it costs in seconds of stall (policies/change_costs.py),
and whether a migration pays that cost back (Flink's autoscaler sizes for rate x restart time /
catch-up time, with the restart time measured per job). Pure; ds2.py calls it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sparkscale.model.snapshot import Snapshot
from sparkscale.policies.change_costs import (
    EXECUTOR_ADD,
    EXECUTOR_REMOVE,
    MIGRATION_PREFIX,
    ChangeCost,
    cost_s,
    migration_kind,
)
from sparkscale.policies.ds2_model import Ds2Estimate, num
from sparkscale.policies.history import DecisionHistory


def needs_migration(est: Ds2Estimate) -> bool:
    """Some measured stage has fewer partitions than its π: DS2 asks for a repartition."""
    return any(not op.source and op.required is not None and op.parallelism < op.optimal_parallelism
               for op in est.operators)


def foreseen_kind(est: Ds2Estimate, current_cores: int, strategy: str | None) -> str | None:
    """The change a decision sized without any stall makes: a migration when it repartitions (the
    query restarts: that stall dominates), else adding or removing executors (None: no change).
    Read before the scalability coefficient and the utilisation band, which only temper it."""
    if needs_migration(est):
        return migration_kind(strategy) if strategy else MIGRATION_PREFIX
    cores = est.cores_for_partitions if est.cores_for_partitions is not None else est.cores_needed
    if cores > current_cores:
        return EXECUTOR_ADD
    if cores < current_cores:
        return EXECUTOR_REMOVE
    return None


def change_cost(est: Ds2Estimate, current_cores: int, history: DecisionHistory,
                defaults: Mapping[str, float]) -> ChangeCost | None:
    """The cost of the change `est` foresees for this app (None: it foresees none)."""
    kind = foreseen_kind(est, current_cores, history.migration_strategy)
    if kind is None:
        return None
    return cost_s(history, kind, defaults, defaults.get(MIGRATION_PREFIX, 0.0))


def arrival_rps(snapshot: Snapshot) -> float:
    """Records/s arriving at the snapshot's sources."""
    return sum(op.arrival_rate or 0.0 for op in snapshot.operators if op.source)


@dataclass(frozen=True)
class Payback:
    """A migration's balance over the horizon: records/s it gains, records its stall loses."""

    gain_rps: float | None  # None: the capacity is unknown (an unmeasured stage)
    lost_records: float
    horizon_s: float
    cost: ChangeCost

    @property
    def pays(self) -> bool:
        """Unknown gains are not held against the migration (DS2 asked for it on measured rates)."""
        return self.gain_rps is None or self.gain_rps * self.horizon_s > self.lost_records

    def explain(self) -> str:
        gain = "unknown" if self.gain_rps is None else f"{num(self.gain_rps)} rec/s"
        gained = "" if self.gain_rps is None else f" = {num(self.gain_rps * self.horizon_s)} records"
        verdict = "pays back" if self.pays else "does not pay back"
        return (f"migration payback: it gains {gain} x {self.horizon_s:g} s horizon{gained}; its stall loses "
                f"{num(self.lost_records)} records ({self.cost.explain()}): it {verdict}")


def payback(est: Ds2Estimate, snapshot: Snapshot, cores: int, partitions: Mapping[str, int], horizon_s: float,
            cost: ChangeCost) -> Payback:
    """What repartitioning to `partitions` gains on `cores` cores: the source records/s taken in with
    them over those taken in without (each at most the target rate: more capacity than the load
    gains nothing), against the records arriving during its stall."""
    target = est.source_target_rate
    before = est.capacity_rps(cores)
    after = est.capacity_rps(cores, partitions)
    gain = None if before is None or after is None else max(min(after, target) - min(before, target), 0.0)
    return Payback(gain, arrival_rps(snapshot) * cost.seconds, horizon_s, cost)
