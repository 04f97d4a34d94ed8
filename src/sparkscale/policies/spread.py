"""Spread a stateful app's executors over the standalone workers. Pure; runs after the policy (and
two-tier), before the guards, so every guard applies to the move it adds.

E-Storm's replica-aware placement (Liu et al., §IV-A, Algorithm 1) gives each node a capacity of
ceil(n / n_m) of a fleet's tasks, so that a node's crash costs at most its share. Spark keeps no
replica of a state partition: a lost executor's partitions are reloaded from the checkpoint by
whichever executor gets their tasks. What bounds a worker's loss is the share of the app's executors
(and so of its live state partitions) it holds. The standalone master spreads executors at launch
(`spark.deploy.spreadOutApps`) but never rebalances: after a worker dies and returns, an app's
executors stay crowded on the survivors.

The rule, on `extensions["cluster"]` (`sparkscale.model.placement`): n executors over the w ALIVE workers
that hold one or have room for one more; the spread is broken when a worker holds more than
ceil(n / w) while another holds fewer and has room (free cores and memory for one executor of the
app's shape). Then one `replace_executor` of the newest executor on the most crowded worker: the
actuator first asks for one executor more, which the master places (spreadOutApps with the default
CORES_FREE_DESC: the worker with the most free cores, usually the under-filled one), then
decommissions the old one; when a move leaves the counts as they were, no
further move for `guards.spread_hold_s` after it (read back from the decision history: each move
records its counts in the plan's observation). Only for an app with a stateful query, at most one
move a cycle, never in a cycle whose plan changes something already, nor while asked-for executors
are still starting (a replace sets the target to the registered count plus one and would cancel
them). The guards
hold it while an action is in progress, in the cooldown, before a fresh window and around a
migration.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sparkscale.config import GuardsConfig
from sparkscale.model.fields import FieldError
from sparkscale.model.placement import Placement, WorkerSlots, executor_order, placement_of
from sparkscale.model.plan import Action, Plan
from sparkscale.model.snapshot import ExecutorFigures, Snapshot
from sparkscale.model.snapshot_merge import query_extensions
from sparkscale.policies.guards import GuardInput
from sparkscale.policies.history import DecisionHistory, PastDecision

SPREAD_DIAGNOSIS = "executor_spread"


@dataclass(frozen=True)
class Spread:
    """How the app's executors sit on the workers that can hold them."""

    executors: int  # n
    counts: Mapping[str, int]  # candidate worker id -> the app's executors on it
    cap: int  # ceil(n / w)
    crowded: WorkerSlots  # the worker holding the most
    target: WorkerSlots | None  # the emptiest worker below the cap with room; None: none has room
    newest: str  # the newest executor on the crowded worker
    cores: int = 1  # an executor's cores (the app's shape)

    @property
    def workers(self) -> int:  # w
        return len(self.counts)

    @property
    def excess(self) -> int:
        """Executors above the cap, over all workers: a move that helps lowers it."""
        return sum(max(c - self.cap, 0) for c in self.counts.values())

    @property
    def at_risk(self) -> float:
        """The share of the app's executors (and so, about, of its state partitions) the crowded worker holds."""
        return self.counts[self.crowded.id] / self.executors

    def describe(self) -> str:
        return (", ".join(f"{w} {c}" for w, c in self.counts.items())
                + f" ({self.executors} executors over {self.workers} workers, at most {self.cap} each)")


def stateful_queries(snapshot: Snapshot) -> tuple[str, ...]:
    """The snapshot's queries that keep state: those with state partitions (the agent's query
    listing, else the progress reports)."""
    out = []
    for name, extensions in query_extensions(snapshot).items():
        for key in ("query", "progress"):
            section = extensions.get(key)
            partitions = section.get("state_partitions") if isinstance(section, Mapping) else None
            if isinstance(partitions, int) and not isinstance(partitions, bool) and partitions > 0:
                out.append(name)
                break
    return tuple(out)


def judge_spread(placement: Placement, executors: Sequence[ExecutorFigures]) -> Spread | str | None:
    """The spread when it is broken, None when it holds (or one executor), or why it cannot be judged."""
    if placement.error:
        return f"no cluster view ({placement.error})"
    if placement.unreachable:
        return f"worker(s) {', '.join(placement.unreachable)} did not answer: their executors are unknown"
    active = {e.id: e for e in executors}
    located = placement.worker_of()
    unplaced = sorted(set(active) - set(located), key=executor_order)
    if unplaced:
        return f"executor(s) {', '.join(unplaced)} run on no ALIVE worker that answered"
    if len(active) < 2:
        return None
    cores = max(e.cores for e in executors)
    memory = placement.executor_memory_mb
    mine = {w.id: [e for e in w.executors if e in active] for w in placement.workers}
    candidates = [w for w in placement.workers if mine[w.id] or w.has_room(cores, memory)]
    cap = math.ceil(len(active) / len(candidates))
    counts = {w.id: len(mine[w.id]) for w in candidates}
    crowded = max(candidates, key=lambda w: (counts[w.id], w.id))
    if counts[crowded.id] <= cap:
        return None
    below = [w for w in candidates if counts[w.id] < cap and w.has_room(cores, memory)]
    target = min(below, key=lambda w: (counts[w.id], -w.cores_free, w.id)) if below else None
    return Spread(len(active), counts, cap, crowded, target, max(mine[crowded.id], key=executor_order), cores)


def spread_moves(plan: Plan, given: GuardInput, guards: GuardsConfig) -> Plan:
    """`plan` with at most one `replace_executor` that restores the spread (module docstring), and
    an explanation line whenever the spread is broken or cannot be judged."""
    snapshot = given.snapshot
    if not guards.spread_executors or not stateful_queries(snapshot):
        return plan
    try:
        placement = placement_of(snapshot.extensions)
    except FieldError as exc:
        return plan.with_actions(plan.actions, [f"spread: not checked: {exc}"])
    if placement is None:  # loop.cluster_view is off, or a snapshot from before the view
        return plan
    spread = judge_spread(placement, snapshot.executors)
    if spread is None:
        return plan
    if isinstance(spread, str):
        return plan.with_actions(plan.actions, [f"spread: not checked: {spread}"])
    seen = f"spread: {spread.describe()}"
    why_not = _why_not_moved(plan, given, guards, spread)
    if why_not is not None:
        return plan.with_actions(plan.actions, [f"{seen}; {why_not}"])
    move = Action.replace_executor(spread.newest, _reason(spread, placement))
    return plan.with_actions(
        [*plan.actions, move], [f"{seen}: move executor {spread.newest} off {spread.crowded.id}"],
        diagnosis=SPREAD_DIAGNOSIS,
        figures={"spread_executors": spread.executors, "spread_workers": spread.workers,
                 "spread_excess": spread.excess, "spread_at_risk": round(spread.at_risk, 4)})


def _why_not_moved(plan: Plan, given: GuardInput, guards: GuardsConfig, spread: Spread) -> str | None:
    """Why this cycle leaves a broken spread as it is (None: move an executor now)."""
    if spread.target is None:
        return f"no worker below {spread.cap} has room for one more executor: nothing to move"
    if plan.changes:
        return f"not moved: this cycle's plan changes {', '.join(a.summary() for a in plan.changes)} already"
    requested = given.requested
    if requested is not None and requested > given.executors:
        return (f"not moved: {requested - given.executors} of the {requested} executors asked for are "
                "still starting")
    last = last_move(given.history, given.now - guards.spread_hold_s)
    if last is not None and _unchanged(last, spread):
        return (f"held: the move {given.now - last.decided_at:g} s ago left the counts as they were (still "
                "under way, failed, or the master placed the replacement on a crowded worker again); next try "
                f"{guards.spread_hold_s:g} s after it (guards.spread_hold_s)")
    return None


def last_move(history: DecisionHistory, since: float) -> PastDecision | None:
    """The newest spread move decided at or after `since` (a decision whose plan replaced an
    executor and recorded the spread's counts)."""
    for decision in reversed(history.decisions):
        if decision.decided_at < since:
            return None
        if ("spread_excess" in decision.observation.figures
                and any(a.type == "replace_executor" for a in decision.plan.changes)):
            return decision
    return None


def _unchanged(last: PastDecision, spread: Spread) -> bool:
    """The move did not improve the spread: the same executors over the same workers, no fewer above the cap."""
    figures = last.observation.figures
    return (figures.get("spread_executors") == spread.executors and figures.get("spread_workers") == spread.workers
            and (figures.get("spread_excess") or 0) <= spread.excess)


def _reason(spread: Spread, placement: Placement) -> str:
    crowded, target = spread.crowded, spread.target
    assert target is not None
    held = spread.counts[crowded.id]
    likely = _likely_worker(spread, placement)
    if likely == target.id:
        where = f"{likely} here"
    elif likely is not None:
        where = (f"which may be {likely} here rather than {target.id}; a move that changes nothing holds the next "
                 "for guards.spread_hold_s")
    else:
        where = "a tie here"
    return (f"spread: worker {crowded.id} ({crowded.host}) holds {held} of the app's {spread.executors} executors, "
            f"above ceil({spread.executors}/{spread.workers}) = {spread.cap} per worker, while {target.id} "
            f"({target.host}) holds {spread.counts[target.id]} and has room: losing {crowded.id} would lose "
            f"{held}/{spread.executors} = {spread.at_risk:.0%} of the executors and about that share of the state "
            f"partitions, reloaded from the checkpoint (Spark keeps no replica); target at most {spread.cap} per "
            f"worker (E-Storm's ceil(n/m)). Executor {spread.newest} is the newest there; a replacement is "
            f"asked for first and the master picks its worker (spreadOutApps with the default CORES_FREE_DESC: "
            f"the one with the most free cores, {where}), then executor {spread.newest} is decommissioned")


def _likely_worker(spread: Spread, placement: Placement) -> str | None:
    """Where CORES_FREE_DESC puts the replacement, asked for while the old executor still runs: of
    the workers with room, the one with the most free cores; None on a tie."""
    free = {w.id: w.cores_free for w in placement.workers if w.id in spread.counts}
    usable = {w: c for w, c in free.items() if c >= spread.cores}
    best = max(usable.values(), default=None)
    top = [w for w, c in usable.items() if c == best]
    return top[0] if len(top) == 1 else None
