"""Two-tier scaling: executors move freely, a query's state partitions only when they must.

A query's partitions stay put while its partitions per core stay within a band
(`guards.partitions_per_core_min` .. `_max`): executor changes alone then keep the work even (a
count with many divisors, `sparkscale.partitions`, makes that true for most core counts). When the
plan's executor target would leave the band, the step adds one migration of the query to a count
with many divisors back inside it: more partitions when there would be fewer than cores (cores
idle in every shuffled stage), fewer when each core would run many small tasks per stage. A plan
that migrates already (DS2's partition-bound stages) is left alone, and so is an app of several
queries: they share the cores in time, so one query's partitions below the app's cores leave
nothing idle (DS2 still migrates a query it finds partition-bound). Pure; runs before the
guards, so the cooldown and the migration guards apply to what it adds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from sparkscale.config import AppConfig
from sparkscale.model.plan import Action, Plan
from sparkscale.model.snapshot import Snapshot
from sparkscale.model.snapshot_merge import query_names, split_operator
from sparkscale.partitions import many_divisor_count


def band_migrations(plan: Plan, snapshot: Snapshot, app: AppConfig, partitions: Mapping[str, int], low: float,
                    high: float, unmigratable: Mapping[str, str], max_partitions: int = 4096) -> Plan:
    """`plan` with a migration for each query whose partitions per core leave [low, high] on the
    plan's executor target (one explanation line each)."""
    if len(partitions) != 1 or any(a.type == "set_parallelism" for a in plan.actions):
        return plan
    scale = next((a for a in plan.actions if a.type == "scale_executors" and a.to is not None), None)
    executors = scale.to if scale is not None else len(snapshot.executors)
    cores = max(1, (executors or 0) * app.executor_cores)
    names = query_names(snapshot)
    added: list[Action] = []
    notes: list[str] = []
    for query, current in partitions.items():
        per_core = current / cores
        if low <= per_core <= high or query in unmigratable:
            continue
        # Back inside the band: at least one partition per core; from above, to its geometric middle.
        wanted = cores * (low if per_core < low else math.sqrt(low * high))
        need = max(1, math.ceil(wanted - 1e-9))
        # Above the cap the answer is the cap; searching a count with many divisors up there first
        # would take as long as the (configurable) band makes the number large.
        target = max_partitions if need >= max_partitions else min(many_divisor_count(need), max_partitions)
        stage = _shuffled_stage(snapshot, names, query, current)
        if target == current or stage is None:
            continue
        added.append(Action.set_parallelism(
            stage, current, target, f"two-tier: {current} partitions on {cores} cores is {per_core:.3g} per core, "
                                    f"outside [{low:g}, {high:g}]: {target} partitions"))
        notes.append(f"two-tier: query {query} has {current} partitions for {cores} cores ({per_core:.3g} per core, "
                     f"band [{low:g}, {high:g}]): migrate to {target}")
    return plan.with_actions([*plan.actions, *added], notes) if added else plan


def _shuffled_stage(snapshot: Snapshot, names: tuple[str, ...], query: str, partitions: int) -> str | None:
    """A non-source operator of `query` running on its `partitions` (the Spark mapping's anchor)."""
    for op in snapshot.operators:
        if op.source or op.parallelism != partitions:
            continue
        try:
            owner, _stage = split_operator(names, op.id)
        except KeyError:
            continue
        if owner == query:
            return op.id
    return None
