"""sparkscale: an autoscaling control loop (MAPE) for stateful Spark Structured Streaming pipelines."""

from __future__ import annotations

import importlib.metadata
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # PySpark only on the driver side: names for the checker, nothing imported
    from pyspark.sql import SparkSession

    from sparkscale.agent.loop import ControlAgent

# One version, pyproject's, as the installed distribution records it (`sparkscale --version` too).
try:
    __version__ = importlib.metadata.version("sparkscale")
except importlib.metadata.PackageNotFoundError:  # imported from a checkout that was never installed
    __version__ = "0+unknown"


def attach(spark: SparkSession, app: str, config: str | None = None,
           overrides: list[str] | None = None) -> ControlAgent:
    """Put this driver under sparkscale's management as app `app` (one line, before starting any
    query): `sparkscale.attach(spark, app="clicks")`. Returns the control agent. Imports PySpark only
    when called, so the head side never does."""
    from sparkscale.agent.attach import attach as _attach

    return _attach(spark, app, config, overrides)
