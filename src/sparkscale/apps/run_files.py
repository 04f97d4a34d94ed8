"""Where a managed pipeline's files are, under the run dir (`cluster.run_dir`/pipelines): its log,
the supervisor's record, the driver's record, its Spark properties and the marker its driver writes
once its queries run.
Shared by submitting (submit.py) and supervising (supervisor.py), which both read and write them."""

from __future__ import annotations

from pathlib import Path

from sparkscale.config import Config


def pipelines_dir(cfg: Config) -> Path:
    return cfg.cluster.run_path / "pipelines"


def log_path(cfg: Config, app_name: str) -> Path:
    return pipelines_dir(cfg) / f"{app_name}.log"


def started_marker(cfg: Config, app_name: str) -> Path:
    """Written by the driver once its queries run (agent/bootstrap.py), removed on its way out."""
    return pipelines_dir(cfg) / f"{app_name}.started"


def supervisor_record_path(cfg: Config, app_name: str) -> Path:
    """The supervisor's process (`submit.PipelineRecord`), written by `submit`."""
    return pipelines_dir(cfg) / f"{app_name}.json"


def driver_record_path(cfg: Config, app_name: str) -> Path:
    """The driver's process (`driver_record.DriverRecord`), written by its supervisor."""
    return pipelines_dir(cfg) / f"{app_name}.driver.json"


def spark_properties_path(cfg: Config, app_name: str) -> Path:
    """The driver's Spark configuration for spark-submit --properties-file (mode 0600: it may hold
    secrets; apps/spark_properties.py), written at each launch."""
    return pipelines_dir(cfg) / f"{app_name}.properties"
