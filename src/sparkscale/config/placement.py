"""`placement`: which cluster placement policy runs (sparkscale.policies.placement) and how the
standalone master places executors (what a plan's additions must agree with)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from sparkscale.config.base import _one_of
from sparkscale.config.sectioned import SectionedConfig
from sparkscale.registry import PLACEMENT_POLICIES, Registry


class PlacementConfig(SectionedConfig):
    """`name`: a registered placement policy (`spark-default` moves nothing itself: the master
    places, and the spread rule keeps a stateful app's executors spread); its settings are the
    section `placement.<name>`. `worker_selection_policy` must be the master's own
    `spark.deploy.workerSelectionPolicy` (it is read by the master at start, not per app)."""

    registry: ClassVar[Registry[Any]] = PLACEMENT_POLICIES

    name: str = Field("spark-default", description=(
        "The cluster placement policy, a registered one: spark-default (the master places executors; the "
        "spread rule keeps a stateful app's executors spread), otd (N-Storm's online task deployment: one "
        "executor move a round) or edrp (Cardellini et al.: executor counts and placement of every app "
        "together, a MILP weighing response time, cost and reconfiguration downtime)."))
    worker_selection_policy: Literal["CORES_FREE_DESC", "CORES_FREE_ASC", "MEMORY_FREE_DESC", "MEMORY_FREE_ASC",
                                     "WORKER_ID"] = Field("CORES_FREE_DESC", description=(
        "The standalone master's own spark.deploy.workerSelectionPolicy (set in SPARK_MASTER_OPTS; read by "
        "the master at start): a plan may add an executor only where the master will put it."))
    every_cycles: int = Field(1, ge=1, description="Plan the cluster once per this many cycles (loop.interval_s each).")
    # SPARK_WORKER_CORES oversubscribed: the master alone counts the advertised cores.
    host_cpus: dict[str, int] = Field(default_factory=dict, examples=[{"10.0.0.5": 8}], description=(
        "Where a worker advertises more cores than its host has CPUs, the host's CPUs, so that a worker's "
        "load is its busy cores over them; hosts not listed: the worker's cores."))

    @field_validator("host_cpus")
    @classmethod
    def _cpus(cls, value: dict[str, int]) -> dict[str, int]:
        if bad := {h: n for h, n in value.items() if n < 1}:
            raise ValueError(f"host_cpus {bad}: a host has at least 1 CPU")
        return value

    @field_validator("name")
    @classmethod
    def _registered(cls, value: str) -> str:
        return _one_of(value, sorted(PLACEMENT_POLICIES.names()))
