"""The one config file: typed sections, defaults for the embedded environment, clear errors.

Every key has a default aimed at the embedded local environment (`sparkscale cluster up`), so a
file that names only what a user changes is valid. Unknown keys are errors: a typo must not be
silently ignored in a tool that resizes production pipelines.
"""

from __future__ import annotations

import copy
import difflib
import re
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

PIPELINES = ("wordcount", "taxi_top_routes", "dag")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SparkConfig(_Section):
    """Where the Spark standalone master is, and how the daemon talks to drivers' REST APIs."""

    master_url: str = "spark://127.0.0.1:7077"
    master_web_url: str = "http://127.0.0.1:8080"
    driver_ui_port: int = Field(4040, ge=1, le=65535)
    rest_timeout_s: float = Field(5.0, gt=0)
    home: str | None = None

    @field_validator("master_url")
    @classmethod
    def _spark_url(cls, value: str) -> str:
        if not re.fullmatch(r"spark://[^:/\s]+:\d{1,5}", value):
            raise ValueError("expected spark://HOST:PORT")
        return value

    @field_validator("master_web_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not re.fullmatch(r"https?://[^:/\s]+:\d{1,5}/?", value):
            raise ValueError("expected http://HOST:PORT")
        return value.rstrip("/")

    @property
    def master_host(self) -> str:
        return self.master_url.removeprefix("spark://").rsplit(":", 1)[0]

    @property
    def master_port(self) -> int:
        return int(self.master_url.rsplit(":", 1)[1])

    @property
    def master_web_port(self) -> int:
        return int(self.master_web_url.rsplit(":", 1)[1])


class ClusterConfig(_Section):
    """The embedded local environment that `sparkscale cluster up` starts."""

    run_dir: str = "~/.sparkscale/run"
    workers: int = Field(2, ge=1, le=16)
    # More cores than the machine has: operators that wait (sleep per record) rather than compute
    # can then scale past the physical cores.
    worker_cores: int = Field(8, ge=1, le=256)
    worker_memory_mb: int = Field(8192, ge=512)
    worker_web_port: int = Field(8081, ge=1, le=65535)
    java: str = "java"
    start_timeout_s: float = Field(120.0, gt=0)

    @property
    def run_path(self) -> Path:
        return Path(self.run_dir).expanduser()


class RedisConfig(_Section):
    host: str = "127.0.0.1"
    # Not 6379: Debian's redis-server package starts a system Redis there.
    port: int = Field(6380, ge=1, le=65535)
    db: int = Field(0, ge=0)
    key_prefix: str = "sparkscale:"
    socket_timeout_s: float = Field(5.0, gt=0)


class ZooKeeperConfig(_Section):
    hosts: str = "127.0.0.1:2181"
    root: str = "/sparkscale"
    session_timeout_s: float = Field(10.0, ge=2)

    @field_validator("hosts")
    @classmethod
    def _hosts(cls, value: str) -> str:
        for hostport in value.split(","):
            if not re.fullmatch(r"[^:/\s,]+:\d{1,5}", hostport):
                raise ValueError("expected HOST:PORT[,HOST:PORT...]")
        return value

    @field_validator("root")
    @classmethod
    def _root(cls, value: str) -> str:
        if not value.startswith("/") or value != "/" and value.endswith("/"):
            raise ValueError("expected an absolute znode path such as /sparkscale")
        return value

    @property
    def first_host(self) -> str:
        return self.hosts.split(",")[0].rsplit(":", 1)[0]

    @property
    def first_port(self) -> int:
        return int(self.hosts.split(",")[0].rsplit(":", 1)[1])


class DagConfig(_Section):
    """The Shukla-Simmhan micro-DAGs: shape, and each operator's per-record cost and selectivity."""

    shape: Literal["linear", "diamond", "star"] = "linear"
    # A sleep per record: costs no CPU, so scaling past the machine's 2 physical cores is real.
    cost_ms_per_record: float = Field(5.0, ge=0)
    selectivity: float = Field(1.0, gt=0)  # records out per record in, for every stateless operator
    key_space: int = Field(100, ge=1)  # distinct keys of the stateful operator


class TaxiConfig(_Section):
    """DEBS 2015 query 1: top-10 routes over a sliding window."""

    window_minutes: int = Field(30, ge=1)
    slide_minutes: int = Field(1, ge=1)
    top_n: int = Field(10, ge=1)
    # Event time the trip generator advances per record (the data set has ~5 trips a second).
    sim_seconds_per_record: float = Field(0.2, gt=0)


class DynamicAllocationConfig(_Section):
    """Spark's own dynamic allocation for this app instead of sparkscale's executor scaling (the
    `spark-dra` baseline of `sparkscale bench scaling`): executors between min and max_executors,
    shuffle tracking on, no daemon needed. The daemon must not manage such an app's executors."""

    enabled: bool = False
    # An executor idle this long is removed (spark.dynamicAllocation.executorIdleTimeout).
    executor_idle_timeout_s: float = Field(60.0, gt=0)
    # Pending tasks for this long request more executors (spark.dynamicAllocation.schedulerBacklogTimeout).
    scheduler_backlog_timeout_s: float = Field(1.0, gt=0)


class AppConfig(_Section):
    """One managed application: which pipeline it runs, how it reads and writes, its executor range."""

    name: str
    pipeline: Literal["wordcount", "taxi_top_routes", "dag"] = "wordcount"
    min_executors: int = Field(1, ge=0)
    max_executors: int = Field(8, ge=1)
    initial_executors: int = Field(1, ge=0)
    executor_cores: int = Field(1, ge=1)
    executor_memory_mb: int = Field(1024, ge=256)
    source_partitions: int = Field(4, ge=1, le=256)  # input streams <app>:in:0..N-1
    max_records_per_batch: int = Field(20000, ge=1)
    trigger_interval_s: float = Field(1.0, gt=0)
    shuffle_partitions: int = Field(4, ge=1, le=4096)  # state/shuffle partitions at first start
    dag: DagConfig = DagConfig()
    taxi: TaxiConfig = TaxiConfig()
    dynamic_allocation: DynamicAllocationConfig = DynamicAllocationConfig()

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", value):
            raise ValueError("expected letters, digits, '_', '.', '-' (at most 64)")
        return value

    @model_validator(mode="after")
    def _range(self) -> AppConfig:
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


class LoopConfig(_Section):
    """The MAPE loop: how often it runs, what it looks at, and how long it waits after acting."""

    interval_s: float = Field(10.0, gt=0)
    window_s: float = Field(30.0, gt=0)
    cooldown_s: float = Field(60.0, ge=0)
    stabilization_s: float = Field(60.0, ge=0)
    dry_run: bool = False


class Ds2Config(_Section):
    catch_up_s: float = Field(60.0, gt=0)
    min_parallelism: int = Field(1, ge=1)
    max_parallelism: int = Field(64, ge=1)

    @model_validator(mode="after")
    def _range(self) -> Ds2Config:
        if self.min_parallelism > self.max_parallelism:
            raise ValueError("min_parallelism is above max_parallelism")
        return self


class DhalionConfig(_Section):
    skew_ratio: float = Field(2.0, gt=1)
    slow_instance_ratio: float = Field(2.0, gt=1)
    over_provisioned_utilization: float = Field(0.5, gt=0, lt=1)
    # Backpressure from the backlog: the total source backlog grew over this many windows (this one included).
    backlog_growth_windows: int = Field(3, ge=2)


class ThresholdRule(_Section):
    """`metric op value` for `for_windows` windows -> change executors by `executors_delta`."""

    metric: Literal["cpu", "batch_ratio", "backlog", "memory"]
    op: Literal[">", ">=", "<", "<="]
    value: float
    for_windows: int = Field(1, ge=1)
    executors_delta: int

    @field_validator("executors_delta")
    @classmethod
    def _nonzero(cls, value: int) -> int:
        if value == 0:
            raise ValueError("a rule must change the executor count (non-zero)")
        return value


class ThresholdConfig(_Section):
    # "dstreams": the old DStreams allocator (up above 0.9 of the batch interval, down below 0.3,
    # one executor at a time); "custom": only `rules`.
    preset: Literal["dstreams", "custom"] = "dstreams"
    rules: list[ThresholdRule] = []


class PolicyConfig(_Section):
    name: Literal["ds2", "dhalion", "threshold"] = "ds2"
    target_utilization: float = Field(0.8, gt=0, le=1)
    ds2: Ds2Config = Ds2Config()
    dhalion: DhalionConfig = DhalionConfig()
    threshold: ThresholdConfig = ThresholdConfig()


class GuardsConfig(_Section):
    """Limits on every policy's plan (sparkscale.policies.guards). The cooldown after an action and
    the stabilisation after a migration are `loop.cooldown_s` and `loop.stabilization_s`."""

    # Scale down only after every recommendation for this long was below the current count, and then
    # to the largest of them (0 = scale down at once).
    scale_down_delay_s: float = Field(120.0, ge=0)
    # One step changes the executor count by at most these factors (x up, / down), and by at least 1.
    max_scale_up_factor: float = Field(2.0, ge=1)
    max_scale_down_factor: float = Field(2.0, ge=1)


class OutcomesConfig(_Section):
    """How the daemon judges an executed action (Dhalion's action log and blocklist, for every policy)."""

    # Judge an action this many loop windows after it showed in Spark (so the figures are all post-action).
    evaluation_windows: int = Field(3, ge=1)
    # An action met its expected outcome when it brought at least this fraction of the expected change
    # (or the app keeps up by then).
    fraction: float = Field(0.5, gt=0, le=1)
    # How long an action that fell short stays blocked for its app and diagnosis, in seconds.
    blocklist_ttl_s: float = Field(600.0, gt=0)


class ActuatorConfig(_Section):
    """Carrying out executor changes through the in-driver control agent."""

    # The agent must acknowledge a command within this time, or the action failed.
    ack_timeout_s: float = Field(30.0, gt=0)
    # The change must show in the driver's Spark REST API within this time, or the action failed.
    confirm_timeout_s: float = Field(180.0, gt=0)


class MigrationConfig(_Section):
    """Changing a stateful query's partitions (actuators/migration.py)."""

    # How a plan's set_parallelism is carried out: dsm | dcr | ccr.
    strategy: Literal["dsm", "dcr", "ccr"] = "ccr"
    # Each phase (drain, stop at a boundary, repartition, restart, first batch) must end within this.
    phase_timeout_s: float = Field(180.0, gt=0)
    # Captured input records kept in the Redis DataStore this long after a CCR migration.
    datastore_ttl_s: float = Field(86400.0, gt=0)
    # Rate stabilisation: output within this fraction of the input rate ...
    stable_tolerance: float = Field(0.2, gt=0, lt=1)
    # ... for this long.
    stable_window_s: float = Field(60.0, gt=0)
    # After a migration, follow the query at most this long to measure catch-up, recovery and stabilisation.
    measure_timeout_s: float = Field(300.0, gt=0)


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


class LoggingConfig(_Section):
    level: Literal["debug", "info", "warning", "error"] = "info"
    stderr: bool = True
    # auto: human-readable when stderr is a terminal, JSON lines otherwise (journald, pipes).
    stderr_format: Literal["auto", "json", "console"] = "auto"
    file: str | None = None


class Config(_Section):
    spark: SparkConfig = SparkConfig()
    cluster: ClusterConfig = ClusterConfig()
    redis: RedisConfig = RedisConfig()
    zookeeper: ZooKeeperConfig = ZooKeeperConfig()
    apps: list[AppConfig] = [AppConfig(name="wordcount")]
    loop: LoopConfig = LoopConfig()
    policy: PolicyConfig = PolicyConfig()
    guards: GuardsConfig = GuardsConfig()
    outcomes: OutcomesConfig = OutcomesConfig()
    actuator: ActuatorConfig = ActuatorConfig()
    migration: MigrationConfig = MigrationConfig()
    action_log: ActionLogConfig = ActionLogConfig()
    metrics: MetricsConfig = MetricsConfig()
    daemon: DaemonConfig = DaemonConfig()
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
        if name in PIPELINES:
            return self.model_copy(update={"apps": [*self.apps, AppConfig(name=name, pipeline=name)]})
        self.app(name)  # raises, naming the configured apps
        return self


# ---------------------------------------------------------------------------------------------
# Loading and errors


@dataclass(frozen=True)
class ConfigProblem:
    """One thing wrong with a config: where it came from, which key, what it held, what is wanted."""

    source: str
    key: str
    message: str
    value: Any = None
    has_value: bool = False

    def __str__(self) -> str:
        got = f" (got {self.value!r})" if self.has_value else ""
        key = f"{self.key}: " if self.key else ""
        return f"{self.source}: {key}{self.message}{got}"


class ConfigError(Exception):
    """A config that cannot be used; `str()` lists every problem, one per line."""

    def __init__(self, problems: list[ConfigProblem]):
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


def load_config(path: str | Path | None = None, overrides: typing.Sequence[str] = ()) -> Config:
    """Read a YAML config (or only defaults when `path` is None) and apply `--set` overrides."""
    source = str(path) if path is not None else "<defaults>"
    raw: dict[str, Any] = {}
    if path is not None:
        raw = _read_yaml(Path(path))
    set_keys = [_apply_override(raw, item) for item in overrides]
    try:
        return Config.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError([_problem(err, source, set_keys) for err in exc.errors()]) from None


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError([ConfigProblem(str(path), "", f"cannot read file: {exc.strerror}")]) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError([ConfigProblem(where, "", f"invalid YAML: {problem}")]) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError([ConfigProblem(str(path), "", "expected a mapping of sections at the top level")])
    return data


_DEFAULTS_JSON: dict[str, Any] | None = None


def _apply_override(raw: dict[str, Any], item: str) -> str:
    """Apply one `dotted.key=value` to the raw config; list items are addressed by index or name."""
    global _DEFAULTS_JSON
    key, sep, text = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError([ConfigProblem("--set", item, "expected KEY=VALUE, e.g. policy.target_utilization=0.7")])
    try:
        value = yaml.safe_load(text) if text.strip() else ""
    except yaml.YAMLError:
        value = text
    if isinstance(value, (dict, list)) and not text.strip().startswith(("{", "[")):
        value = text  # `prefix=foo:` is the string "foo:", not the mapping {"foo": None}
    if _DEFAULTS_JSON is None:
        _DEFAULTS_JSON = Config().model_dump(mode="json")
    parts = key.split(".")
    resolved: list[str] = []  # the key as validation errors will name it (list items by index)
    node: Any = raw
    default: Any = _DEFAULTS_JSON
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if isinstance(node, list):
            index = _list_index(node, part)
            if index is None:
                raise ConfigError([ConfigProblem("--set", key, f"no list item {part!r} (use an index or a name)")])
            resolved.append(str(index))
            if last:
                node[index] = value
            else:
                node, default = node[index], None
            continue
        if not isinstance(node, dict):
            raise ConfigError([ConfigProblem("--set", key, f"{'.'.join(parts[:i])} is not a section")])
        resolved.append(part)
        if last:
            node[part] = value
            break
        child_default = default.get(part) if isinstance(default, dict) else None
        if part not in node:
            # A list the file did not mention starts from its default (e.g. the default apps).
            node[part] = copy.deepcopy(child_default) if isinstance(child_default, list) else {}
        node, default = node[part], child_default
    return ".".join(resolved)


def _list_index(items: list[Any], part: str) -> int | None:
    if part.isdigit():
        return int(part) if int(part) < len(items) else None
    for i, item in enumerate(items):
        if isinstance(item, dict) and item.get("name") == part:
            return i
    return None


def _problem(err: Any, source: str, set_keys: list[str]) -> ConfigProblem:
    loc = tuple(err["loc"])
    key = ".".join(str(p) for p in loc)
    if any(key == k or key.startswith(k + ".") or k.startswith(key + ".") for k in set_keys):
        source = "--set"
    kind = err["type"]
    if kind == "extra_forbidden":
        fields = _fields_at(loc[:-1])
        close = difflib.get_close_matches(str(loc[-1]), fields, n=1, cutoff=0.6)
        hint = f"; did you mean {'.'.join([*map(str, loc[:-1]), close[0]])!r}?" if close else ""
        known = f" (known keys here: {', '.join(sorted(fields))})" if fields and not close else ""
        return ConfigProblem(source, key, f"unknown key{hint}{known}")
    message = err["msg"]
    if kind == "value_error":
        message = message.removeprefix("Value error, ")
    elif kind == "literal_error":
        message = message.replace("Input should be", "expected one of")
    else:
        message = message.replace("Input should be", "expected")
    value = err.get("input")
    # A whole section's value (from a cross-field check) would bury the message: leave it out.
    shown = "input" in err and kind != "missing" and not isinstance(value, (dict, list))
    return ConfigProblem(source, key, message, value, shown)


def _fields_at(loc: tuple[Any, ...]) -> list[str]:
    """Field names of the section that `loc` points at (for "did you mean")."""
    model: Any = Config
    for part in loc:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(part) if _is_model(model) else None
        if field is None:
            return []
        model = _unwrap(field.annotation)
    return list(model.model_fields) if _is_model(model) else []


def _unwrap(annotation: Any) -> Any:
    origin = typing.get_origin(annotation)
    if origin in (list, typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            if _is_model(_unwrap(arg)):
                return _unwrap(arg)
    return annotation


def _is_model(obj: Any) -> bool:
    return isinstance(obj, type) and issubclass(obj, BaseModel)
