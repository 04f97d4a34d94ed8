"""The `apps` section: one managed application each, what its driver runs and its executor range."""

from __future__ import annotations

import os
import re
from enum import StrEnum
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from sparkscale.config.base import ConfigSection as _Section
from sparkscale.config.base import _one_of
from sparkscale.config.periods import ExcludedPeriods
from sparkscale.partitions import many_divisor_count
from sparkscale.registry import WORKLOADS

MAX_PARTITIONS = 4096  # state/shuffle partitions of a query
# Far beyond any cluster, yet small enough that core and executor arithmetic stays within floats.
MAX_EXECUTORS = 1_000_000  # executors of one app
MAX_EXECUTOR_CORES = 10_000  # cores of one executor


def app_name_problem(name: str) -> str | None:
    """Why `name` cannot name an app (it is part of Redis keys, znodes and paths), or None. A
    snapshot file's `app` is checked with the same rule, since `plan` looks the app up by it."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", name):
        return "expected letters, digits, '_', '.', '-' (at most 64)"
    return None


class DagConfig(_Section):
    """The Shukla-Simmhan micro-DAGs: shape, and each operator's per-record cost and selectivity."""

    shape: Literal["linear", "diamond", "star"] = Field("linear", description="The micro-DAG's shape.")
    # A sleep costs no CPU, so scaling past the machine's 2 physical cores is real.
    cost_ms_per_record: float = Field(5.0, ge=0, description=(
        "Cost of each operator per record: a sleep, in milliseconds (it costs no CPU)."))
    selectivity: float = Field(1.0, gt=0, description="Records out per record in, for every stateless operator.")
    key_space: int = Field(100, ge=1, description="Distinct keys of the stateful operator.")


class TaxiConfig(_Section):
    """DEBS 2015 query 1: top-10 routes over a sliding window."""

    window_minutes: int = Field(30, ge=1, description="Length of the sliding window, in minutes.")
    slide_minutes: int = Field(1, ge=1, description="How far the window slides, in minutes.")
    top_n: int = Field(10, ge=1, description="How many of the most frequent routes each window reports.")
    # The data set has ~5 trips a second.
    sim_seconds_per_record: float = Field(0.2, gt=0, description=(
        "Event time the trip generator advances per record, in seconds."))


class DynamicAllocationConfig(_Section):
    """Spark's own dynamic allocation for this app instead of sparkscale's executor scaling (the
    `spark-dra` baseline of `sparkscale bench scaling`): executors between min and max_executors,
    shuffle tracking on, no daemon needed. The daemon must not manage such an app's executors."""

    enabled: bool = Field(False, description=(
        "Use Spark's dynamic allocation for this app instead of sparkscale's executor scaling (a baseline "
        "to compare with; the daemon does not scale such an app's executors)."))
    executor_idle_timeout_s: float = Field(60.0, gt=0, description=(
        "An executor idle this many seconds is removed (spark.dynamicAllocation.executorIdleTimeout)."))
    scheduler_backlog_timeout_s: float = Field(1.0, gt=0, description=(
        "Tasks pending this many seconds request more executors "
        "(spark.dynamicAllocation.schedulerBacklogTimeout)."))


class AppMode(StrEnum):
    """What the daemon does with an app (`apps[].mode`)."""

    ACT = "act"  # plan, log and carry out
    ADVISE = "advise"  # plan and log (the action log, the metrics), carry out nothing: loop.dry_run for one app
    OBSERVE = "observe"  # collect and log snapshots only: no plan, no decision written


class AppConfig(_Section):
    """One managed application: which pipeline it runs, how it reads and writes, its executor range."""

    name: str = Field(examples=["wordcount"], description=(
        "The app's name, unique in the file: letters, digits, '_', '.', '-' (at most 64); it names the "
        "app's Redis keys and znodes."))
    # Shipped workloads are plug-ins (sparkscale_lab.pipelines.workloads).
    script: str | None = Field(None, examples=["/opt/jobs/sessions.py"], description=(
        "Your own PySpark script, run by the driver as __main__ with `args`; give script or pipeline, not both."))
    args: list[str] = Field(default_factory=list, examples=[["--input", "/data/in"]], description=(
        "Arguments of the script."))
    spark_conf: dict[str, str] = Field(default_factory=dict, examples=[{"spark.sql.adaptive.enabled": "false"}],
                                       description="Spark properties, as spark-submit --conf, over sparkscale's.")
    py_files: list[str] = Field(default_factory=list, examples=[["/opt/jobs/helpers.zip"]], description=(
        "Files put on the driver's and executors' Python path, as spark-submit --py-files."))
    pipeline: str | None = Field(None, examples=["taxi_top_routes"], description=(
        "A shipped pipeline to run (wordcount, taxi_top_routes, dag); wordcount when neither script nor "
        "pipeline is given."))
    min_executors: int = Field(1, ge=0, description="The fewest executors the daemon may leave the app.")
    max_executors: int = Field(8, ge=1, le=MAX_EXECUTORS, description="The most executors the daemon may give the app.")
    initial_executors: int = Field(1, ge=0, description=(
        "Executors requested at start-up, within [min_executors, max_executors]."))
    executor_cores: int = Field(1, ge=1, le=MAX_EXECUTOR_CORES, description="Cores of each executor.")
    executor_memory_mb: int = Field(1024, ge=256, description="Memory of each executor (spark.executor.memory), in MB.")
    source_partitions: int = Field(4, ge=1, le=256, description=(
        "Input streams <key_prefix><app>:in:0 .. N-1 of a shipped pipeline, one Spark input partition each."))
    max_records_per_batch: int = Field(20000, ge=1, description=(
        "Most records a micro-batch admits over all input partitions."))
    trigger_interval_s: float = Field(1.0, gt=0, description="Micro-batch trigger interval, in seconds.")
    # An int once validated. Many divisors, so that executor changes alone keep partitions per core
    # even (two-tier scaling).
    shuffle_partitions: int | None = Field(None, ge=1, le=MAX_PARTITIONS, examples=[24], description=(
        "State/shuffle partitions at a query's first start (later changed only by a migration). null: the "
        "first count >= max_executors x executor_cores with many divisors (12 for 8 cores); a script's own "
        "spark.sql.shuffle.partitions in spark_conf wins."))
    dag: DagConfig = Field(DagConfig(), description="The Shukla-Simmhan micro-DAGs (pipeline: dag).")
    taxi: TaxiConfig = Field(TaxiConfig(), description="DEBS 2015 query 1, top routes (pipeline: taxi_top_routes).")
    dynamic_allocation: DynamicAllocationConfig = Field(DynamicAllocationConfig(), description=(
        "Spark's own dynamic allocation instead of sparkscale's executor scaling."))
    allow_lossy_restart: bool = Field(False, description=(
        "Restart (migrate) a query even when one of its sources does not replay from its checkpointed "
        "offsets (a socket, an in-memory stream, an unknown source): what the old run held is lost, and "
        "each use is logged. Off: such a query gets executor scaling only; a migration of it is refused."))
    mode: AppMode = Field(AppMode.ACT, description=(
        "act: decide and carry out; advise: decide and log, carry out nothing (loop.dry_run for this app "
        "only); observe: collect and log snapshots, no decision."))
    excluded_periods: ExcludedPeriods = Field(default_factory=list, examples=[["Mon-Fri 08:00-09:30 Europe/Berlin"]],
                                        description=(
        "This app's own windows without scaling actions, besides guards.excluded_periods (same syntax: "
        "`<days> HH:MM-HH:MM [ZONE]`, UTC when no zone is named); [] = none of its own."))

    @field_validator("pipeline")
    @classmethod
    def _pipeline(cls, value: str | None) -> str | None:
        return None if value is None else _one_of(value, sorted(WORKLOADS.known_names()))

    @field_validator("script")
    @classmethod
    def _script(cls, value: str | None) -> str | None:
        if value is None:
            return None
        path = Path(value).expanduser()
        if not path.is_file():
            raise ValueError(f"{value} does not exist or is not a file")
        if not os.access(path, os.R_OK):
            raise ValueError(f"{value} is not readable")
        return str(path.resolve())

    @field_validator("py_files")
    @classmethod
    def _py_files(cls, value: list[str]) -> list[str]:
        missing = [f for f in value if not Path(f).expanduser().exists()]
        if missing:
            raise ValueError(f"{', '.join(missing)} does not exist")
        return [str(Path(f).expanduser().resolve()) for f in value]

    @property
    def runs_script(self) -> bool:
        return self.script is not None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        problem = app_name_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _range(self) -> AppConfig:
        if self.script is not None and self.pipeline is not None:
            raise ValueError("give either script (your own job) or pipeline (a shipped one), not both")
        if self.script is None and self.pipeline is None:
            object.__setattr__(self, "pipeline", "wordcount")
        given = self.spark_conf.get("spark.sql.shuffle.partitions")
        if given is not None and not (given.isascii() and given.isdigit() and 1 <= int(given) <= MAX_PARTITIONS):
            raise ValueError(f"spark_conf: spark.sql.shuffle.partitions: expected an integer in [1, {MAX_PARTITIONS}] "
                             f"(got {given!r})")
        if self.shuffle_partitions is None:
            # Capped as the key itself is: more cores than that share the partitions unevenly.
            object.__setattr__(self, "shuffle_partitions", int(given) if given is not None else min(
                many_divisor_count(self.max_executors * self.executor_cores, at_most=MAX_PARTITIONS), MAX_PARTITIONS))
        if self.min_executors > self.max_executors:
            raise ValueError(
                f"min_executors ({self.min_executors}) is above max_executors ({self.max_executors})"
            )
        if not self.min_executors <= self.initial_executors <= self.max_executors:
            raise ValueError(
                f"initial_executors ({self.initial_executors}) is outside "
                f"[min_executors, max_executors] = [{self.min_executors}, {self.max_executors}]"
            )
        return self
