"""Spark's own placement: the master places executors (spreadOutApps, workerSelectionPolicy) and
nothing is moved. The baseline of `bench placement`."""

from __future__ import annotations

from typing import Any, ClassVar

from sparkscale.policies.placement.base import register_placement
from sparkscale.policies.placement.model import ClusterModel, PlacementPlan

SPARK_DEFAULT = "spark-default"


@register_placement
class SparkDefault:
    name: ClassVar[str] = SPARK_DEFAULT
    config_model: ClassVar[Any] = None

    def place(self, model: ClusterModel, settings: Any) -> PlacementPlan:
        return PlacementPlan(policy=self.name, reason="the master's placement, unchanged")
