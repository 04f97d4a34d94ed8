"""The one decide path: policy -> guards -> blocklist -> Spark mapping.

The daemon, `sparkscale plan` and `sparkscale simulate` all call `decide`, so what `plan` shows
offline is what the daemon would do given the same snapshot and decision history. Pure: the caller
brings the history (the daemon from Redis, `plan` from `--history FILE` or empty) and owns time.
"""

from __future__ import annotations

from sparkscale.config import AppConfig, Config
from sparkscale.plan import Action, Plan
from sparkscale.policies.base import get_policy
from sparkscale.policies.guards import GuardInput, apply_guards
from sparkscale.policies.history import DecisionHistory
from sparkscale.policies.outcomes import drop_blocked
from sparkscale.snapshot import Snapshot


def decide(snapshot: Snapshot, history: DecisionHistory, config: Config, app: AppConfig,
           now: float | None = None, policy: str | None = None) -> Plan:
    """The plan to carry out for `snapshot` (`policy` overrides `config.policy.name`; `now` defaults
    to the snapshot's time)."""
    now = snapshot.taken_at if now is None else now
    raw = get_policy(policy or config.policy.name).decide(snapshot, history, config.policy, app)
    guarded = apply_guards(raw, GuardInput(
        snapshot, history, app, migration_running=history.migration_running,
        last_migration_end=history.last_migration_end, last_action_at=history.last_action_at),
        config.guards, config.loop)
    allowed = drop_blocked(guarded, history.blocklist, now)
    return map_to_spark(allowed, snapshot.query, history.partitions.get(snapshot.query, app.shuffle_partitions))


def map_to_spark(plan: Plan, query: str, current_partitions: int) -> Plan:
    """A plan's `set_parallelism` wishes on stages as one migration of the query.

    A policy names the operator (a stage of the snapshot) that is partition-bound, but a Spark
    query has one state/shuffle partition count for all its shuffled stages
    (`spark.sql.shuffle.partitions` at its first run, kept in the checkpoint): every such stage's
    wish becomes one `set_parallelism` of the query, to the largest count asked for. A stage with
    another count (the one reading the source has the source's partitions) cannot be changed by a
    migration: its wish is dropped, and the explanation says why."""
    asked = [a for a in plan.actions if a.type == "set_parallelism"]
    if not asked:
        return plan
    wishes = [a for a in asked if a.to is not None and a.from_ == current_partitions and a.to != current_partitions]
    notes = [f"spark mapping: dropped {a.summary()}: {a.operator} has {a.from_} partitions, not the query's "
             f"{current_partitions} shuffle partitions (e.g. the source's): a migration cannot change them"
             for a in asked if a not in wishes]
    migration: Action | None = None
    target: Action | None = None
    if wishes:
        target = max(wishes, key=lambda a: a.to or 0)
        reasons = "; ".join(f"{a.operator}: {a.reason}" for a in wishes)
        migration = Action("set_parallelism", operator=target.operator, from_=current_partitions,
                           to=target.to or 1, reason=reasons, query=query)
        notes.append(f"spark mapping: {', '.join(a.summary() for a in wishes)} -> one migration of query "
                     f"{query} to {migration.to} partitions")
    actions: list[Action] = []
    for action in plan.actions:
        if action.type != "set_parallelism":
            actions.append(action)
        elif migration is not None and action is target:
            actions.append(migration)
    return plan.with_actions(actions, notes)
