"""An app's share of the cluster's placement plan, added to its own plan before the guards. Pure.

The placement policy decides for the whole cluster (`PlacementPlan`); each app's cycle carries out
its part through the same path as everything else (guards, blocklist, action log): a `Move` of one
of its executors becomes a `replace_executor` (make-before-break: one more executor lands where the
master puts it, the policy's target, then the old one is decommissioned), a `CountChange` (EDRP)
replaces the scaling policy's executor count (a scale-in names the executors the plan removes),
and for an app the plan sizes without a change (`PlacementPlan.sized`) the scaling policy's count
change is dropped: two deciders would undo each other every cycle. A move waits while this
cycle's plan changes something already or executors are still starting (a replacement sets the
target to the registered count plus one and would cancel them), as the spread rule does.
"""

from __future__ import annotations

from sparkscale.model.plan import Action, Plan
from sparkscale.policies.guard_input import GuardInput
from sparkscale.policies.guard_input import replace_scale as _replace_scale
from sparkscale.policies.guard_input import scale as _scale
from sparkscale.policies.placement.model import CountChange, PlacementPlan

PLACEMENT_DIAGNOSIS = "placement"


def _chosen_removals(count: CountChange, given: GuardInput) -> tuple[str, ...]:
    """The executors a pure scale-in decommissions, as the plan chose them (EDRP's q: the newest on
    the workers its solution empties; the agent alone would take the app's newest, wherever they
    run). Empty, and so the agent's choice, when the plan mixes additions with removals (carried
    out as one count: adds first would move the landing worker) or the executors changed since."""
    removed = given.executors - count.executors_target
    ids = tuple(k.id for k in count.remove)
    current = {e.id for e in given.snapshot.executors}
    if removed <= 0 or len(ids) != removed or count.executors_now != given.executors or not set(ids) <= current:
        return ()
    return ids


def placement_actions(plan: Plan, given: GuardInput, cluster: PlacementPlan | None) -> Plan:
    """`plan` with this app's moves and count from `cluster` (module docstring)."""
    if cluster is None:
        return plan
    app = given.app.name
    notes: list[str] = []
    actions = list(plan.actions)
    count = next((c for c in cluster.counts if c.app == app), None)
    if count is not None and count.executors_target != given.executors:
        chosen = Action.scale_executors(given.executors, count.executors_target,
                                        f"placement {cluster.policy}: {count.reason or cluster.reason}",
                                        _chosen_removals(count, given))
        actions = _replace_scale(actions, chosen)
        notes.append(f"placement {cluster.policy}: {count.executors_now} -> {count.executors_target} executors "
                     f"(the cluster-wide plan; the scaling policy's count is replaced)")
    elif app in cluster.sized and (scale := _scale(actions)) is not None:
        actions = _replace_scale(actions, None)
        notes.append(f"placement {cluster.policy}: keeps {given.executors} executors (the cluster-wide plan "
                     f"decides this app's count; the scaling policy's {scale.summary()} is not carried out)")
    moves = [m for m in cluster.moves if m.key.app == app]
    if moves:
        move = moves[0]
        seen = f"placement {cluster.policy}: move executor {move.key.id} {move.source} -> {move.target}"
        changes = [a for a in actions if a.type != "warn"]
        requested = given.requested
        if changes:
            notes.append(f"{seen}; not moved: this cycle's plan changes "
                         f"{', '.join(a.summary() for a in changes)} already")
        elif requested is not None and requested > given.executors:
            notes.append(f"{seen}; not moved: {requested - given.executors} of the {requested} executors asked "
                         "for are still starting")
        else:
            actions.append(Action.replace_executor(move.key.id, move.reason or cluster.reason))
            notes.append(seen)
            return plan.with_actions(actions, notes, diagnosis=PLACEMENT_DIAGNOSIS,
                                     figures={k: v for k, v in cluster.figures.items() if isinstance(v, (int, float))})
    return plan.with_actions(actions, notes) if notes else plan
