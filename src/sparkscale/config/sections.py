"""The config's typed sections, each with defaults aimed at the embedded environment.

Unknown keys are errors: a typo must not be silently ignored in a tool that resizes production
pipelines. Names of policies, workloads and migration strategies are checked against their
registries (sparkscale.registry), and each policy's own section against the model it declares.
Where the services are (Spark, Redis, ZooKeeper) is connections.py's.
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from sparkscale.config.apps import AppConfig
from sparkscale.config.base import ConfigSection, _one_of
from sparkscale.config.connections import RedisConfig, SparkConfig, ZooKeeperConfig
from sparkscale.config.drivers import DriversConfig
from sparkscale.config.guards import GuardsConfig
from sparkscale.config.memory import MemoryPolicyConfig
from sparkscale.config.placement import PlacementConfig
from sparkscale.config.sectioned import SectionedConfig
from sparkscale.registry import POLICIES, STRATEGIES, WORKLOADS, Registry

_Section = ConfigSection
MAX_WORKER_CORES = 256


class ClusterConfig(_Section):
    """The embedded local environment that `sparkscale cluster up` starts."""

    run_dir: str = "~/.sparkscale/run"
    workers: int = Field(2, ge=1, le=16)
    # More cores than the machine has: operators that wait (sleep per record) rather than compute
    # can then scale past the physical cores. One count for every worker, or one per worker
    # (worker N: item N), e.g. [6, 3]: the master then places by free cores unevenly (bench placement).
    worker_cores: int | list[int] = 8
    worker_memory_mb: int = Field(8192, ge=512)
    worker_web_port: int = Field(8081, ge=1, le=65535)
    # The address worker i binds and advertises (and its executors with it): worker_hosts[i-1].
    # Empty: every worker on 127.0.0.1. Distinct loopback addresses (127.0.0.0/8 on Linux) make the
    # executors of one machine look like those of several hosts, so nothing can assume one host.
    worker_hosts: list[str] = Field(default_factory=list)
    # The CPUs worker N (item N) and so its executors may run on: `taskset -c` on its launch, whose
    # affinity the worker JVM and every process it forks inherit. [] = not pinned. [[0], [1]] gives
    # each worker a CPU of its own, so a worker's load is its own CPU's (bench placement).
    worker_cpus: list[list[int]] = Field(default_factory=list)
    java: str = "java"
    start_timeout_s: float = Field(120.0, gt=0)

    @field_validator("worker_hosts")
    @classmethod
    def _ipv4_literals(cls, value: list[str]) -> list[str]:
        for i, host in enumerate(value):
            try:
                ipaddress.IPv4Address(host)
            except ValueError:
                raise ValueError(f"worker_hosts[{i}] = {host!r} is not an IPv4 address such as 127.0.0.2") from None
        return value

    @field_validator("worker_cores")
    @classmethod
    def _core_counts(cls, value: int | list[int]) -> int | list[int]:
        for i, cores in enumerate([value] if isinstance(value, int) else value):
            if not 1 <= cores <= MAX_WORKER_CORES:
                where = "" if isinstance(value, int) else f"[{i}]"
                raise ValueError(f"worker_cores{where} = {cores}: expected 1 to {MAX_WORKER_CORES} cores")
        return value

    @field_validator("worker_cpus")
    @classmethod
    def _cpus_of_this_machine(cls, value: list[list[int]]) -> list[list[int]]:
        available = usable_cpus()
        for i, cpus in enumerate(value):
            if not cpus:
                raise ValueError(f"worker_cpus[{i}] is empty: give each worker at least one CPU, or [] for none pinned")
            for cpu in cpus:
                if cpu not in available:
                    raise ValueError(
                        f"worker_cpus[{i}] names CPU {cpu}, which this machine cannot run on: usable CPUs "
                        f"{','.join(map(str, sorted(available)))} (os.cpu_count() = {os.cpu_count()})")
        return value

    @model_validator(mode="after")
    def _one_host_per_worker(self) -> ClusterConfig:
        if self.worker_hosts and len(self.worker_hosts) != self.workers:
            raise ValueError(
                f"worker_hosts lists {len(self.worker_hosts)} address(es) but workers is {self.workers}: "
                "give one address per worker, or none (every worker on 127.0.0.1)"
            )
        if isinstance(self.worker_cores, list) and len(self.worker_cores) != self.workers:
            raise ValueError(
                f"worker_cores lists {len(self.worker_cores)} count(s) but workers is {self.workers}: "
                "give one count per worker, or a single number for all"
            )
        if self.worker_cpus and len(self.worker_cpus) != self.workers:
            raise ValueError(
                f"worker_cpus lists {len(self.worker_cpus)} CPU set(s) but workers is {self.workers}: "
                "give one list of CPUs per worker (e.g. [[0], [1]]), or [] for none pinned"
            )
        return self

    @property
    def run_path(self) -> Path:
        return Path(self.run_dir).expanduser()

    def worker_host(self, number: int) -> str:
        """The address of worker `number` (1-based, as the services are named)."""
        return self.worker_hosts[number - 1] if self.worker_hosts else "127.0.0.1"

    def cores_of(self, number: int) -> int:
        """The cores worker `number` (1-based) advertises to the master."""
        return self.worker_cores if isinstance(self.worker_cores, int) else self.worker_cores[number - 1]

    def cpus_of(self, number: int) -> list[int]:
        """The CPUs worker `number` (1-based) is pinned to; [] = not pinned."""
        return list(self.worker_cpus[number - 1]) if self.worker_cpus else []


def usable_cpus() -> set[int]:
    """The CPUs this process may run on (its affinity, which `taskset` cannot widen), else all of
    os.cpu_count()'s."""
    if hasattr(os, "sched_getaffinity"):
        return set(os.sched_getaffinity(0))
    return set(range(os.cpu_count() or 1))


class LoopConfig(_Section):
    """The MAPE loop: how often it runs, what it looks at, and how long it waits after acting."""

    interval_s: float = Field(10.0, gt=0)
    window_s: float = Field(30.0, gt=0)
    cooldown_s: float = Field(60.0, ge=0)
    stabilization_s: float = Field(60.0, ge=0)
    dry_run: bool = False
    # The daemon host's CPU: 0 = the change since the previous cycle (no wait); > 0 = a blocking
    # sample of this many seconds in each cycle (what the cycle did before; kept for comparison).
    host_cpu_sample_s: float = Field(0.0, ge=0, le=5)
    # Read where the app's executors run from the standalone master's and workers' /json/ (one
    # request to the master and one per alive worker a cycle) for the spread rule; off: no rule.
    cluster_view: bool = True
    # One read of the cluster view serves every app's cycle for this long (0: each cycle reads its own).
    cluster_view_max_age_s: float = Field(2.0, ge=0)


class PolicyConfig(SectionedConfig):
    """`name` is a registered policy (sparkscale.policies); every policy's own settings are the
    section `policy.<its name>`, validated by the model the policy declares (`config_model`), so a
    new policy brings its settings with it. A section left out has its model's defaults."""

    registry: ClassVar[Registry[Any]] = POLICIES

    name: str = "ds2"
    target_utilization: float = Field(0.8, ge=0.01, le=1)  # below 1 %, every need overflows
    # A band around it (policies/band.py; DS2 applies it): no change while the projected utilisation
    # of the current cores is inside; below the minimum, down to the fewest cores at most `maximum`
    # busy. Both null (the default): no band, every change of the target is acted on.
    utilization_min: float | None = Field(None, ge=0, le=1)
    utilization_max: float | None = Field(None, gt=0, le=1)
    memory: MemoryPolicyConfig = Field(default_factory=MemoryPolicyConfig)  # config/memory.py

    @field_validator("name")
    @classmethod
    def _registered(cls, value: str) -> str:
        return _one_of(value, sorted(POLICIES.names()))

    @model_validator(mode="after")
    def _band(self) -> PolicyConfig:
        lo, hi = self.utilization_min, self.utilization_max
        if (lo is None) != (hi is None):
            raise ValueError("utilization_min and utilization_max go together: set both or neither")
        if lo is not None and hi is not None and not lo < self.target_utilization <= hi:
            raise ValueError(f"expected utilization_min < target_utilization <= utilization_max "
                             f"(got {lo:g}, {self.target_utilization:g}, {hi:g})")
        return self


class QuotasConfig(_Section):
    """Totals over every managed app together (policies/quotas.py): a scale-up that would take
    them over a quota is cut to what fits, or held, with a warning naming the quota. Null, the
    default: no quota, as before (the cluster's own room still binds: policies/capacity.py)."""

    max_cores: int | None = Field(None, ge=1)  # executor cores of all managed apps
    # spark.executor.memory of all managed apps' executors, in MB (the JVM overhead not counted).
    max_memory_mb: int | None = Field(None, ge=256)


class OutcomesConfig(_Section):
    """How the daemon judges an executed action (Dhalion's action log and blocklist, for every policy)."""

    # Judge an action this many loop windows after it showed in Spark (so the figures are all post-action).
    evaluation_windows: int = Field(3, ge=1)
    # An action met its expected outcome when it brought at least this fraction of the expected change
    # (or the app keeps up by then).
    fraction: float = Field(0.5, gt=0, le=1)
    # A scale-up is ineffective (and blocks further scale-ups of the app for blocklist_ttl_s) when the
    # capacity grew by less than this fraction of the gain expected (Flink's scaling-effectiveness).
    effectiveness: float = Field(0.1, ge=0, le=1)
    # How long an action that fell short stays blocked for its app and diagnosis, in seconds.
    blocklist_ttl_s: float = Field(600.0, gt=0)


class ActuatorConfig(_Section):
    """Carrying out executor changes through the in-driver control agent."""

    # The agent must acknowledge a command within this time, or the action failed.
    ack_timeout_s: float = Field(30.0, gt=0)
    # The change must show in the driver's Spark REST API within this time, or the action failed.
    confirm_timeout_s: float = Field(180.0, gt=0)


class MigrationConfig(_Section):
    """Changing a stateful query's partitions (actuators/migration/)."""

    # How a plan's set_parallelism is carried out: a registered strategy (dsm | dcr | ccr built in).
    strategy: str = "ccr"
    # Each phase (drain, stop at a boundary, repartition, restart, first batch) must end within this.
    phase_timeout_s: float = Field(180.0, gt=0)
    # A query whose sources cannot be paused is stopped at an idle trigger if one comes within this;
    # else inside its batch, which the restart recomputes (as DSM).
    idle_trigger_wait_s: float = Field(10.0, gt=0)
    # Captured input records kept in the Redis DataStore this long after a CCR migration.
    datastore_ttl_s: float = Field(86400.0, gt=0)
    # Rate stabilisation (Shukla & Simmhan §4 (6)): output rate within this fraction of the expected
    # (input) rate ...
    stable_tolerance: float = Field(0.2, gt=0, lt=1)
    # ... for this long (the paper's 60 s); the figure is the start of that window, from the request.
    stable_window_s: float = Field(60.0, gt=0)
    # After a migration ends, wait at most this long for catch-up, recovery and stabilisation (the
    # leading daemon records them in the journal; they are dated from the request: the batches since
    # then are read too). The migration itself returns once done, without waiting for them.
    measure_timeout_s: float = Field(300.0, gt=0)

    @field_validator("strategy")
    @classmethod
    def _registered(cls, value: str) -> str:
        return _one_of(value, STRATEGIES.names())


class ActionLogConfig(_Section):
    """The action log: a Redis stream of decisions and outcomes, kept across restarts (AOF)."""

    # Trim to at most this many entries (approximately, as Redis trims whole nodes) ...
    max_entries: int = Field(100_000, ge=100)
    # ... and drop entries older than this many days.
    max_age_days: float = Field(30.0, gt=0)
    # Snapshots behind decisions kept per app (stream <prefix><app>:snapshots), newest first.
    snapshots_kept: int = Field(500, ge=0)


class MetricsConfig(_Section):
    """Prometheus metrics over HTTP (GET /metrics)."""

    enabled: bool = True
    host: str = "127.0.0.1"
    port: int = Field(9464, ge=0, le=65535)  # 0 = any free port (logged at start)


class DaemonConfig(_Section):
    # This daemon's name in the leader lock and the action log; null = <hostname>:<pid>.
    id: str | None = None


class SecurityConfig(_Section):
    """One identity per role (config/identities.py). identity_dir unset: one shared identity, as
    `zookeeper.auth_file` and `redis.password_file` give (or none)."""

    # A directory (mode 0700) of `<identity>.secret` files: daemon, operator, agent-<app>; made by
    # `sparkscale cluster up` (daemon, operator) and `pipeline submit` (the app's agent).
    identity_dir: str | None = None


class LoggingConfig(_Section):
    level: Literal["debug", "info", "warning", "error"] = "info"
    stderr: bool = True
    # auto: human-readable when stderr is a terminal, JSON lines otherwise (journald, pipes).
    stderr_format: Literal["auto", "json", "console"] = "auto"
    # What a console shows (logconsole.py): brief: one line per cycle and per action, warnings,
    # errors, the daemon's start and stop; all: every event. JSON output always has every event.
    console_events: Literal["brief", "all"] = "brief"
    file: str | None = None


class Config(_Section):
    spark: SparkConfig = SparkConfig()
    cluster: ClusterConfig = ClusterConfig()
    redis: RedisConfig = RedisConfig()
    zookeeper: ZooKeeperConfig = ZooKeeperConfig()
    apps: list[AppConfig] = [AppConfig(name="wordcount")]
    loop: LoopConfig = LoopConfig()
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    placement: PlacementConfig = Field(default_factory=PlacementConfig)
    guards: GuardsConfig = GuardsConfig()
    quotas: QuotasConfig = QuotasConfig()
    outcomes: OutcomesConfig = OutcomesConfig()
    actuator: ActuatorConfig = ActuatorConfig()
    migration: MigrationConfig = MigrationConfig()
    action_log: ActionLogConfig = ActionLogConfig()
    metrics: MetricsConfig = MetricsConfig()
    daemon: DaemonConfig = DaemonConfig()
    drivers: DriversConfig = DriversConfig()
    security: SecurityConfig = SecurityConfig()
    logging: LoggingConfig = LoggingConfig()

    @field_validator("apps")
    @classmethod
    def _unique_names(cls, apps: list[AppConfig]) -> list[AppConfig]:
        seen: set[str] = set()
        for app in apps:
            if app.name in seen:
                raise ValueError(f"app name {app.name!r} appears twice")
            seen.add(app.name)
        return apps

    def app(self, name: str) -> AppConfig:
        for app in self.apps:
            if app.name == name:
                return app
        known = ", ".join(a.name for a in self.apps) or "none"
        raise KeyError(f"no managed app named {name!r} (configured: {known})")

    def with_app(self, name: str) -> Config:
        """This config if it manages `name`; if `name` is a pipeline (`taxi_top_routes`), this
        config plus an app of that name running it with default settings; else KeyError."""
        if any(app.name == name for app in self.apps):
            return self
        if name in WORKLOADS.known_names():
            return self.model_copy(update={"apps": [*self.apps, AppConfig(name=name, pipeline=name)]})
        self.app(name)  # raises, naming the configured apps
        return self
