"""One cycle's decision for one app: the planner's plan for the app's snapshot, what its first
change should bring, and what is done about it (the mode). The facts the action log, the log line
and the status are made from, each by its own consumer."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from sparkscale.config import AppConfig, AppMode
from sparkscale.model.plan import Plan
from sparkscale.model.snapshot import Snapshot
from sparkscale.policies.outcomes import Expectation

Role = Literal["leader", "standby"]
# no_change: nothing to do; dry_run: would act (loop.dry_run, or the app's mode advise); acted:
# carried out (the leader); standby: would act, but another daemon leads the app; observe: the
# app's mode is observe: snapshots only, no plan made, no decision written.
Mode = Literal["no_change", "dry_run", "acted", "standby", "observe"]


def app_mode(app: AppConfig, dry_run: bool) -> AppMode:
    """The app's mode as the loop runs it: `loop.dry_run` (`dry_run`) makes an acting app advise;
    an observed app stays observed (it does even less)."""
    if dry_run and app.mode == AppMode.ACT:
        return AppMode.ADVISE
    return app.mode


@dataclass(frozen=True)
class Decision:
    app: str
    role: Role
    epoch: int | None  # the app's lock's, as this daemon holds it (None: not held)
    snapshots: tuple[Snapshot, ...]  # one per query
    snapshot: Snapshot  # the app's: every query's operators, the executors once
    partitions: Mapping[str, int]  # each query's state partitions now
    plan: Plan
    expected: Expectation | None
    mode: Mode

    @property
    def decided_at(self) -> float:
        """The snapshot's time: the decision is about the window it describes."""
        return self.snapshot.taken_at

    @property
    def diagnosis(self) -> str | None:
        return self.expected.diagnosis if self.expected else self.plan.observation.diagnosis

    @property
    def target_executors(self) -> int | None:
        """The executor count the plan's scale action sets (None: it sets none)."""
        scale = next((a for a in self.plan.actions if a.type == "scale_executors"), None)
        return scale.to if scale is not None else None
