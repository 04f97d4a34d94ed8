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
from typing import Literal

from pydantic import Field, field_validator, model_validator

from sparkscale.config.apps import AppConfig
from sparkscale.config.base import ConfigSection, _one_of
from sparkscale.config.connections import RedisConfig, SparkConfig, ZooKeeperConfig
from sparkscale.config.drivers import DriversConfig
from sparkscale.config.guards import GuardsConfig
from sparkscale.config.placement import PlacementConfig
from sparkscale.config.policy import PolicyConfig
from sparkscale.registry import STRATEGIES, WORKLOADS

_Section = ConfigSection
MAX_WORKER_CORES = 256


class ClusterConfig(_Section):
    """The embedded local environment that `sparkscale cluster up` starts."""

    run_dir: str = Field("~/.sparkscale/run", description=(
        "Where the embedded environment keeps its configs, data, logs and recorded pids."))
    workers: int = Field(2, ge=1, le=16, description="Number of Spark standalone workers `cluster up` starts.")
    # Uneven counts make the master place by free cores unevenly (bench placement).
    worker_cores: int | list[int] = Field(8, examples=[[6, 3]], description=(
        "Cores each worker declares (1 to 256): one number for every worker, or one per worker (worker N: "
        "item N). More than the machine has on purpose: operators that wait (a sleep per record) rather "
        "than compute can then scale past the physical cores."))
    worker_memory_mb: int = Field(8192, ge=512, description="Memory each worker offers to executors, in MiB.")
    worker_web_port: int = Field(8081, ge=1, le=65535, description=(
        "Web UI port of worker 1; worker N uses worker_web_port + N - 1."))
    # Distinct loopback addresses make the executors of one machine look like those of several
    # hosts, so that nothing can assume one host.
    worker_hosts: list[str] = Field(default_factory=list, examples=[["127.0.0.2", "127.0.0.3"]], description=(
        "The IPv4 address each worker (and its executors) binds and advertises, one per worker; [] = every "
        "worker on 127.0.0.1. On Linux all of 127.0.0.0/8 is loopback, so [127.0.0.2, 127.0.0.3] makes one "
        "machine look like two hosts."))
    # `taskset -c` on the worker's launch, whose affinity the worker JVM and every process it forks
    # inherit (bench placement gives each worker a CPU of its own).
    worker_cpus: list[list[int]] = Field(default_factory=list, examples=[[[0], [1]]], description=(
        "The CPUs each worker and its executors may run on, one list per worker (launched under "
        "`taskset -c`, from util-linux); [] = not pinned. Each CPU must be one this machine can run on."))
    java: str = Field("java", description="The Java 17+ executable: a path, or a name found on PATH.")
    start_timeout_s: float = Field(120.0, gt=0, description=(
        "How long `cluster up` waits for every service to answer, in seconds."))

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

    interval_s: float = Field(10.0, gt=0, description="One cycle per managed app every this many seconds.")
    window_s: float = Field(30.0, gt=0, description="The observation window a snapshot covers, in seconds.")
    cooldown_s: float = Field(60.0, ge=0, description=(
        "After an executor change, no reversal of it (and no migration) for this many seconds; a further "
        "step the same way is taken on the first window that began after the change was done."))
    stabilization_s: float = Field(60.0, ge=0, description=(
        "After a migration, no decision for that app for this many seconds."))
    dry_run: bool = Field(False, description="Decide and log, never act (every app at least `advise`).")
    # A blocking sample is what the cycle did before; kept for comparison.
    host_cpu_sample_s: float = Field(0.0, ge=0, le=5, description=(
        "The daemon host's CPU: 0 = the background sampler's latest reading (about 1 s old; no wait in the "
        "cycle); above 0, a blocking sample of this many seconds in each cycle."))
    cluster_view: bool = Field(True, description=(
        "Read where each app's executors run from the standalone master's and each alive worker's /json/ "
        "(one request each a cycle), for the spread rule (guards.spread_executors); false: no requests, "
        "no spread rule. A master web UI the daemon cannot reach costs up to spark.rest_timeout_s a cycle."))
    cluster_view_max_age_s: float = Field(2.0, ge=0, description=(
        "One read of the cluster view serves every app's cycle for this many seconds (0: each cycle reads "
        "its own), so with N apps the master and workers are asked once, not N times; an older view is "
        "read again in the background, and the first is begun as the daemon starts (cycles before it ends "
        "go on without it, as when the master does not answer)."))


class QuotasConfig(_Section):
    """Totals over every managed app together (policies/quotas.py): a scale-up that would take
    them over a quota is cut to what fits, or held, with a warning naming the quota. Null, the
    default: no quota, as before (the cluster's own room still binds: policies/capacity.py)."""

    max_cores: int | None = Field(None, ge=1, examples=[32], description=(
        "Most executor cores of all managed apps together; null = no quota."))
    max_memory_mb: int | None = Field(None, ge=256, examples=[65536], description=(
        "Most spark.executor.memory of all managed apps' executors together, in MB (JVM overhead not "
        "counted); null = no quota."))


class OutcomesConfig(_Section):
    """How the daemon judges an executed action (Dhalion's action log and blocklist, for every policy)."""

    evaluation_windows: int = Field(3, ge=1, description=(
        "Judge an action this many loop windows after it showed in Spark (so the figures are all post-action)."))
    fraction: float = Field(0.5, gt=0, le=1, description=(
        "An action met its expected outcome when it brought at least this fraction of the expected change "
        "(or the app keeps up by then)."))
    # Flink's scaling-effectiveness.
    effectiveness: float = Field(0.1, ge=0, le=1, description=(
        "A scale-up is ineffective (and blocks further scale-ups of the app for blocklist_ttl_s) when the "
        "capacity grew by less than this fraction of the gain expected."))
    blocklist_ttl_s: float = Field(600.0, gt=0, description=(
        "How long an action that fell short stays blocked for its app and diagnosis, in seconds."))


class ActuatorConfig(_Section):
    """Carrying out executor changes through the in-driver control agent."""

    ack_timeout_s: float = Field(30.0, gt=0, description=(
        "The control agent must acknowledge a command within this many seconds, or the action failed."))
    confirm_timeout_s: float = Field(180.0, gt=0, description=(
        "The change must show in the driver's Spark REST API within this many seconds, or the action failed."))


class MigrationConfig(_Section):
    """Changing a stateful query's partitions (actuators/migration/)."""

    strategy: str = Field("ccr", description=(
        "How a plan's set_parallelism (new state partitions) is carried out: a registered strategy "
        "(dsm, dcr and ccr are built in)."))
    phase_timeout_s: float = Field(180.0, gt=0, description=(
        "Each phase (drain, stop at a boundary, repartition, restart, first batch) must end within this "
        "many seconds."))
    idle_trigger_wait_s: float = Field(10.0, gt=0, description=(
        "A query whose sources cannot be paused (files, Kafka) is stopped at an idle trigger if one comes "
        "within this many seconds, else inside its batch, which the restart recomputes (as DSM)."))
    datastore_ttl_s: float = Field(86400.0, gt=0, description=(
        "Captured input records are kept in the Redis DataStore this many seconds after a CCR migration."))
    # Shukla & Simmhan §4 (6).
    stable_tolerance: float = Field(0.2, gt=0, lt=1, description=(
        "Rate stabilisation: the output rate within this fraction of the expected (input) rate ..."))
    stable_window_s: float = Field(60.0, gt=0, description=(
        "... for this many seconds (the paper's 60 s); the figure is the start of that window, from the request."))
    # The leading daemon records them in the journal, dated from the request (the batches since then
    # are read too).
    measure_timeout_s: float = Field(300.0, gt=0, description=(
        "After a migration ends, wait at most this many seconds for catch-up, recovery and stabilisation "
        "to be measured; `migrate` itself returns without waiting for them."))

    @field_validator("strategy")
    @classmethod
    def _registered(cls, value: str) -> str:
        return _one_of(value, STRATEGIES.names())


class ActionLogConfig(_Section):
    """The action log: a Redis stream of decisions and outcomes, kept across restarts (AOF)."""

    max_entries: int = Field(100_000, ge=100, description=(
        "Trim the action log to about this many entries (Redis trims whole nodes) ..."))
    max_age_days: float = Field(30.0, gt=0, description="... and drop entries older than this many days.")
    snapshots_kept: int = Field(500, ge=0, description=(
        "Snapshots behind decisions kept per app (stream <key_prefix><app>:snapshots), newest first."))


class MetricsConfig(_Section):
    """Prometheus metrics over HTTP (GET /metrics)."""

    enabled: bool = Field(True, description="Serve Prometheus metrics at http://host:port/metrics.")
    host: str = Field("127.0.0.1", description="The address the metrics endpoint listens on.")
    port: int = Field(9464, ge=0, le=65535, description="The metrics port; 0 = any free port (logged at start).")


class DaemonConfig(_Section):
    """This daemon's identity among the daemons of one cluster."""

    id: str | None = Field(None, examples=["daemon-a"], description=(
        "This daemon's name in the leader lock and the action log; null = <hostname>:<pid>."))


class SecurityConfig(_Section):
    """One identity per role (config/identities.py). identity_dir unset: one shared identity, as
    `zookeeper.auth_file` and `redis.password_file` give (or none)."""

    identity_dir: str | None = Field(None, min_length=1, examples=["~/.sparkscale/identities"], description=(
        "One identity per role: a directory (mode 0700) of secret files `<identity>.secret` for the daemon, "
        "the operator (the CLI) and each app's agent (agent-<app>), made by `cluster up` and `pipeline "
        "submit`; ZooKeeper ACLs and Redis users give each role only what it needs. null = one shared "
        "identity (redis.password_file, zookeeper.auth_file) or none."))


class LoggingConfig(_Section):
    """Where the daemon and the commands log, and how."""

    level: Literal["debug", "info", "warning", "error"] = Field("info", description="The least severe level logged.")
    stderr: bool = Field(True, description="Log to stderr (journald collects it under systemd).")
    stderr_format: Literal["auto", "json", "console"] = Field("auto", description=(
        "auto: human-readable when stderr is a terminal, JSON lines otherwise (journald, pipes)."))
    # logconsole.py
    console_events: Literal["brief", "all"] = Field("brief", description=(
        "What a console shows: brief = one line per cycle per app and one per action (what, why, expected "
        "effect, the id for `sparkscale explain`), warnings, errors, the daemon's start and stop; all = every "
        "event. JSON output (stderr_format json, the file) always has every event with every field."))
    file: str | None = Field(None, examples=["/var/log/sparkscale/sparkscale.jsonl"], description=(
        "Also write JSON lines to this file; null = no file."))


class Config(_Section):
    """The whole config file: one section per concern, every key defaulted."""

    spark: SparkConfig = Field(SparkConfig(), description=(
        "Where the Spark standalone master is, and how the daemon reaches drivers' REST APIs."))
    cluster: ClusterConfig = Field(ClusterConfig(), description=(
        "The embedded local environment of `sparkscale cluster up|down|status`."))
    redis: RedisConfig = Field(RedisConfig(), description=(
        "The Redis that holds the input streams, sink outputs, progress reports, action log and blocklist."))
    zookeeper: ZooKeeperConfig = Field(ZooKeeperConfig(), description=(
        "The ZooKeeper that holds the leader lock, the commands to the agents and the migration journal."))
    apps: list[AppConfig] = Field([AppConfig(name="wordcount")], description=(
        "The managed applications, one item each. A list you give replaces the default one whole."))
    loop: LoopConfig = Field(LoopConfig(), description=(
        "The MAPE loop: how often it runs, what it looks at, and how long it waits after acting."))
    policy: PolicyConfig = Field(default_factory=PolicyConfig, description=(
        "Which policy decides, and its settings: each policy's own in the section `policy.<name>`."))
    placement: PlacementConfig = Field(default_factory=PlacementConfig, description=(
        "The cluster placement policy over every app this daemon leads, and how the standalone master "
        "places executors; each placement policy's settings in the section `placement.<name>`."))
    guards: GuardsConfig = Field(GuardsConfig(), description=(
        "Limits every policy's plan passes before it is carried out. The cooldown after an action is "
        "loop.cooldown_s, the stabilisation after a migration loop.stabilization_s, and executors stay "
        "within each app's [min_executors, max_executors]."))
    quotas: QuotasConfig = Field(QuotasConfig(), description=(
        "Totals over every managed app: a scale-up past one is cut to what fits, or held, with a warning."))
    outcomes: OutcomesConfig = Field(OutcomesConfig(), description=(
        "How an executed action is judged against the outcome its policy expected, and what an unmet one blocks."))
    actuator: ActuatorConfig = Field(ActuatorConfig(), description=(
        "Carrying out executor changes through the control agent in each driver."))
    migration: MigrationConfig = Field(MigrationConfig(), description=(
        "Changing a stateful query's state partitions: the strategy, its time limits and what is measured."))
    action_log: ActionLogConfig = Field(ActionLogConfig(), description=(
        "The action log: a Redis stream <key_prefix>actions of decisions and outcomes, kept across restarts."))
    metrics: MetricsConfig = Field(MetricsConfig(), description="Prometheus metrics over HTTP (GET /metrics).")
    daemon: DaemonConfig = Field(DaemonConfig(), description="This daemon's identity.")
    drivers: DriversConfig = Field(DriversConfig(), description=(
        "How managed drivers are kept running: each under a supervisor of its own that restarts it from its "
        "checkpoints after a crash, and outlives the daemon."))
    security: SecurityConfig = Field(SecurityConfig(), description=(
        "One identity per role for ZooKeeper and Redis (README \"Security\")."))
    logging: LoggingConfig = Field(LoggingConfig(), description="Where and how sparkscale logs.")

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
