"""How the loop decides (Flink's `ScalingMetricEvaluator` and `ScalingExecutor`'s planning half):
the app's plan from its snapshots and decision history (policies/planner.py's `decide_app`), and
the cluster-wide placement across the apps this daemon leads (daemon/cluster_planner.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from sparkscale.config import AppConfig, Config
from sparkscale.model.plan import Action, Plan
from sparkscale.model.snapshot import Snapshot
from sparkscale.policies.history import DecisionHistory
from sparkscale.policies.placement.model import PlacementPlan


class Planner(Protocol):
    """Pure: the same snapshots and history give the same plan (`sparkscale plan` shows it offline)."""

    def __call__(self, snapshots: Sequence[Snapshot], history: DecisionHistory, config: Config, app: AppConfig,
                 now: float | None = None, /, *, cluster: PlacementPlan | None = None) -> Plan:
        ...


class ClusterPlanning(Protocol):
    """The step across apps: what each app's cycle saw, and the placement plan of the cluster."""

    def observe(self, app: AppConfig, merged: Snapshot, led: Sequence[Snapshot] | None) -> None:
        """One app's cycle: its merged snapshot, and its query snapshots when this daemon leads it."""
        ...

    def claimed_elsewhere(self, app: str) -> int:
        """Cores other managed apps asked for that have not started yet (the capacity guard's input)."""
        ...

    def held_elsewhere(self, app: str) -> tuple[int, int]:
        """(cores, executor memory MB) the other managed apps hold or asked for (the quotas' input)."""
        ...

    def change_costs(self, app: str, strategy: str) -> dict[str, tuple[float, ...]]:
        """`app`'s measured stalls per kind of change (restart-aware catch-up, policies/change_costs.py)."""
        ...

    def plan(self, now: float) -> PlacementPlan | None:
        """The cluster plan in force at `now` (None: no placement policy, or nothing to place)."""
        ...

    def action_done(self, app: str, action: Action, started_at: float, ended_at: float) -> None:
        """An executor change of `app` ran from `started_at` to `ended_at` (epoch s): EDRP's downtime."""
        ...

    def forget(self, app: str) -> None:
        """The app is no longer managed."""
        ...
