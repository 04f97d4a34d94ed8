"""How the loop learns from what it did (Dhalion §4's action log and blocklist; Flink's scaling
effectiveness detection): executed decisions judged at their due time (daemon/evaluator.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from sparkscale.config import AppConfig, OutcomesConfig
from sparkscale.model.plan import Action
from sparkscale.model.snapshot import Snapshot
from sparkscale.policies.history import ScalingObservation
from sparkscale.policies.outcomes import Expectation


@dataclass
class PendingOutcome:
    """An executed decision waiting to be judged at `due_at` (seconds since the epoch)."""

    decision_id: str
    expected: Expectation
    action: Action
    due_at: float
    policy: str | None = None
    query: str | None = None


class OutcomeJudge(Protocol):
    def judge_due(self, app: AppConfig, pending: list[PendingOutcome], snapshot: Snapshot, cfg: OutcomesConfig,
                  now: float | None = None, task_overhead: bool = True) -> list[ScalingObservation]:
        """Judge, and remove from `pending`, what is due at `now` (capacities measured with the model
        DS2 expected them by: `task_overhead`, policies/ds2.py `capacity_task_overhead`); what it
        taught about scalability."""
        ...
