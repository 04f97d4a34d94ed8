"""Spark's own placement: the master places executors (spreadOutApps, workerSelectionPolicy) and
nothing is moved. The baseline of `bench placement`."""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel

from sparkscale.policies.placement.base import register_placement
from sparkscale.policies.placement.model import ClusterModel, PlacementPlan

SPARK_DEFAULT = "spark-default"


@register_placement
class SparkDefault:
    name: ClassVar[str] = SPARK_DEFAULT
    config_model: ClassVar[None] = None

    def place(self, model: ClusterModel, settings: BaseModel | None) -> PlacementPlan:
        return PlacementPlan(policy=self.name, reason="the master's placement, unchanged")
