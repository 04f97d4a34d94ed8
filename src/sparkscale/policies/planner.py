"""The one decide path: policy -> two-tier partitions -> executor spread (or the app's part of the
placement policy's plan) -> guards -> the cluster's capacity -> blocklist -> Spark mapping.

The daemon, `sparkscale plan` and `sparkscale simulate` all call `decide` (or `decide_app` with the
snapshots of all the app's queries), so what `plan` shows offline is what the daemon would do given
the same snapshots and decision history. Pure: the caller brings the history (the daemon from Redis,
`plan` from `--history FILE` or empty) and owns time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sparkscale.config import AppConfig, Config
from sparkscale.model.plan import Action, Plan
from sparkscale.model.snapshot import Snapshot
from sparkscale.model.snapshot_merge import merge_snapshots, query_extensions, query_names, split_operator
from sparkscale.policies.base import get_policy
from sparkscale.policies.capacity import apply_capacity
from sparkscale.policies.guards import GuardInput, apply_guards
from sparkscale.policies.history import DecisionHistory
from sparkscale.policies.outcomes import drop_blocked
from sparkscale.policies.placement.apply import placement_actions
from sparkscale.policies.placement.model import PlacementPlan
from sparkscale.policies.placement.spark_default import SPARK_DEFAULT
from sparkscale.policies.spread import spread_moves
from sparkscale.policies.two_tier import band_migrations


def decide_app(snapshots: Sequence[Snapshot], history: DecisionHistory, config: Config, app: AppConfig,
               now: float | None = None, policy: str | None = None, cluster: PlacementPlan | None = None) -> Plan:
    """The plan for an app over all its queries: one decision on their merged snapshot (the
    executors are the app's, shared by every query), then one migration at most per query."""
    return decide(merge_snapshots(snapshots), history, config, app, now, policy, cluster)


def decide(snapshot: Snapshot, history: DecisionHistory, config: Config, app: AppConfig,
           now: float | None = None, policy: str | None = None, cluster: PlacementPlan | None = None) -> Plan:
    """The plan to carry out for `snapshot` (`policy` overrides `config.policy.name`; `now` defaults
    to the snapshot's time). `cluster`: the placement policy's plan for the whole cluster, of which
    this app's part is added; with a placement policy configured, it (not the spread rule) moves
    executors."""
    now = snapshot.taken_at if now is None else now
    names = query_names(snapshot)
    configured = app.shuffle_partitions
    assert configured is not None, "set by AppConfig's validation"
    current = {q: history.partitions.get(q, configured) for q in names}
    raw = get_policy(policy or config.policy.name).decide(snapshot, history, config.policy, app)
    raw = band_migrations(raw, snapshot, app, current, config.guards.partitions_per_core_min,
                          config.guards.partitions_per_core_max, not_migratable(snapshot))
    given = GuardInput(snapshot, history, app, migration_running=history.migration_running,
                       last_migration_end=history.last_migration_end, last_action_at=history.last_action_at)
    if config.placement.name == SPARK_DEFAULT:
        raw = spread_moves(raw, given, config.guards)
    else:
        raw = placement_actions(raw, given, cluster)
    guarded = apply_capacity(apply_guards(raw, given, config.guards, config.loop, config.policy.memory), given,
                             config.quotas, config.policy.memory)
    allowed = drop_blocked(guarded, history.blocklist, now)
    return map_to_spark(allowed, snapshot.query, current if len(names) > 1 else current[snapshot.query],
                        not_migratable(snapshot))


def not_migratable(snapshot: Snapshot) -> dict[str, str]:
    """Queries of the snapshot that a migration cannot be carried out on, with the reason the
    agent gave (no checkpoint location, started before the agent): the daemon plans none for them."""
    out = {}
    for name, extensions in query_extensions(snapshot).items():
        info = extensions.get("query")
        if isinstance(info, Mapping) and info.get("migratable") is False:
            out[str(name)] = str(info.get("not_migratable") or "the agent cannot migrate it")
    return out


def map_to_spark(plan: Plan, query: str, current_partitions: int | Mapping[str, int],
                 unmigratable: Mapping[str, str] | None = None) -> Plan:
    """A plan's `set_parallelism` wishes on stages as one migration per query.

    A policy names the operator (a stage of the snapshot) that is partition-bound, but a Spark
    query has one state/shuffle partition count for all its shuffled stages
    (`spark.sql.shuffle.partitions` at its first run, kept in the checkpoint): every such stage's
    wish becomes one `set_parallelism` of its query, to the largest count asked for, against that
    query's partitions now. `current_partitions` is the count of `query`, or, for a merged
    snapshot, each query's count by name (an operator's query is then its `"{query}/"` prefix).
    A stage with another count (the one reading the source has the source's partitions) cannot be
    changed by a migration, nor can a query in `unmigratable` (query -> why): such wishes are
    dropped, and the explanation says why."""
    asked = [a for a in plan.actions if a.type == "set_parallelism"]
    if not asked:
        return plan
    partitions = dict(current_partitions) if isinstance(current_partitions, Mapping) else {query: current_partitions}
    names = tuple(partitions)
    by_query: dict[str, list[tuple[Action, str]]] = {}
    notes: list[str] = []
    for action in asked:
        try:
            owner, stage = split_operator(names, action.operator or "")
        except KeyError as exc:
            notes.append(f"spark mapping: dropped {action.summary()}: {exc.args[0]}")
            continue
        current = partitions[owner]
        if owner in (unmigratable or {}):
            notes.append(f"spark mapping: dropped {action.summary()}: query {owner} cannot be migrated: "
                         f"{(unmigratable or {})[owner]}")
            continue
        if action.to is not None and action.from_ == current and action.to != current:
            by_query.setdefault(owner, []).append((action, stage))
        else:
            notes.append(f"spark mapping: dropped {action.summary()}: {action.operator} has {action.from_} "
                         f"partitions, not the {current} shuffle partitions of query {owner} (e.g. the source's): "
                         "a migration cannot change them")
    migrations: dict[int, Action] = {}  # id of the wish that stands for its query -> the migration
    for owner, wishes in by_query.items():
        target, stage = max(wishes, key=lambda w: w[0].to or 0)
        reasons = "; ".join(f"{s}: {a.reason}" for a, s in wishes)
        migration = Action("set_parallelism", operator=stage, from_=partitions[owner], to=target.to or 1,
                           reason=reasons, query=owner)
        migrations[id(target)] = migration
        notes.append(f"spark mapping: {', '.join(a.summary() for a, _s in wishes)} -> one migration of query "
                     f"{owner} to {migration.to} partitions")
    actions = [migrations[id(a)] if a.type == "set_parallelism" else a
               for a in plan.actions if a.type != "set_parallelism" or id(a) in migrations]
    return plan.with_actions(actions, notes)
