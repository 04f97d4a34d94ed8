"""What every guard reads (`GuardInput`) and the action-list helpers they share, apart from the
guards themselves so that each guard module (guards.py's order) can import them without a cycle.
Pure."""

from __future__ import annotations

from dataclasses import dataclass

from sparkscale.config import AppConfig
from sparkscale.model.plan import Action
from sparkscale.model.snapshot import Snapshot
from sparkscale.policies.history import DecisionHistory


@dataclass(frozen=True)
class GuardInput:
    """What the guards know besides the plan. Times are seconds since the epoch on the snapshot
    clock; "now" is `snapshot.taken_at`."""

    snapshot: Snapshot
    history: DecisionHistory
    app: AppConfig
    migration_running: bool = False
    last_migration_end: float | None = None
    # When the last action was carried out; None = the last history plan with a change (dry runs
    # and failed actions are known only to the daemon, which should then pass this).
    last_action_at: float | None = None

    @property
    def now(self) -> float:
        return self.snapshot.taken_at

    @property
    def executors(self) -> int:
        return len(self.snapshot.executors)

    @property
    def requested(self) -> int | None:
        """Executors asked of Spark (the snapshot's, else the history's); None: unknown."""
        app = self.snapshot.extensions.get("app")
        value = app.get("requested_executors") if isinstance(app, dict) else None
        return int(value) if isinstance(value, int) else self.history.requested_executors


def target(actions: list[Action], current: int) -> int:
    """The executor count the actions ask for (the current one when they scale nothing)."""
    for a in actions:
        if a.type == "scale_executors" and a.to is not None:
            return a.to
    return current


def replace_scale(actions: list[Action], new: Action | None) -> list[Action]:
    """`actions` with its scale_executors action replaced by `new` (or dropped, for None)."""
    out = [a for a in actions if a.type != "scale_executors"]
    if new is not None:
        index = next((i for i, a in enumerate(actions) if a.type == "scale_executors"), len(out))
        out.insert(min(index, len(out)), new)
    return out


def scale(actions: list[Action]) -> Action | None:
    """The actions' scale_executors action (None: they scale nothing)."""
    return next((a for a in actions if a.type == "scale_executors"), None)


def drop_changes(actions: list[Action], notes: list[str], why: str) -> list[Action]:
    """Only the warnings of `actions`; a "guard <why>: dropped ..." note when something went."""
    changes = [a for a in actions if a.type != "warn"]
    if changes:
        notes.append(f"guard {why}: dropped " + ", ".join(a.summary() for a in changes))
    return [a for a in actions if a.type == "warn"]


def cut_scale_up(actions: list[Action], action: Action, given: GuardInput, to: int, warning: Action,
                 because: str) -> list[Action]:
    """`actions` with their scale-up `action` dropped (when `to` is no more than the executors now) or
    cut to `to` ("REASON; `because`"), and `warning` added: what the quotas and the cluster's room do."""
    if to <= given.executors:
        return [*replace_scale(actions, None), warning]
    cut = Action.scale_executors(action.from_ if action.from_ is not None else given.executors, to,
                                 f"{action.reason}; {because}")
    return [*replace_scale(actions, cut), warning]
