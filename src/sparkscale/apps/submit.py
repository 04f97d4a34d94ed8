"""Submitting a managed pipeline to the standalone master, and stopping it again (head-node side).

The driver runs in client mode on this host (so the control agent in it can reach ZooKeeper and
Redis) under a supervisor of its own (apps/supervisor.py) that restarts it after a crash; the
supervisor's process is recorded (pid and start time) under the run dir, and the driver's by the
supervisor, so that `pipeline stop` stops exactly them and what they started.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil
import redis
import structlog

from sparkscale.apps import systemd_units
from sparkscale.apps.driver_record import current_driver
from sparkscale.apps.run_files import (
    driver_record_path,
    log_path,
    pipelines_dir,
    spark_properties_path,
    started_marker,
    supervisor_record_path,
)
from sparkscale.apps.spark_properties import submit_arguments, write_properties
from sparkscale.config import AppConfig, Config
from sparkscale.config.identities import IDENTITY_FILE_ENV, OPERATOR
from sparkscale.config.secrets import REDIS_PASSWORD_ENV, ZOOKEEPER_AUTH_ENV
from sparkscale.identity_setup import provision_app
from sparkscale.localenv.preflight import Tools, check_tools
from sparkscale.model.executor_shape import ExecutorShape
from sparkscale.processes import live_process, stop_trees, tail
from sparkscale.redisconn import connect_as
from sparkscale.store.base import ShapeStore
from sparkscale.store.redis_shapes import RedisShapes

log = structlog.get_logger(__name__)

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


class PipelineError(Exception):
    """A pipeline could not be submitted, or died while starting; the message carries its log tail."""


@dataclass
class PipelineRecord:
    app: str
    pid: int
    create_time: float
    log: str
    ui_port: int
    submitted_at: float


# The allocation manager's timeouts while it runs at the start only (`_dynamic_allocation_conf`).
START_ONLY_TIMEOUT = "365d"


def stored_shape(client: redis.Redis, prefix: str, app: str) -> ExecutorShape | None:
    return RedisShapes(client, prefix).stored_shape(app)


def store_shape(client: redis.Redis, prefix: str, app: str, shape: ExecutorShape, migration: str) -> None:
    RedisShapes(client, prefix).store_shape(app, shape, migration)


def with_stored_shape(app: AppConfig, client: redis.Redis, prefix: str) -> AppConfig:
    """`app` with the executor shape a migration gave it (what its executors really have)."""
    return with_shape(app, RedisShapes(client, prefix))


def with_shape(app: AppConfig, shapes: ShapeStore) -> AppConfig:
    """`app` with the executor shape `shapes` keeps for it, if any."""
    return shaped(app, shapes.stored_shape(app.name))


def shaped(app: AppConfig, shape: ExecutorShape | None) -> AppConfig:
    """`app` with `shape` (a stored one, read by the caller), if any."""
    return app if shape is None else app.model_copy(update=asdict(shape))


def current_shape(app: AppConfig) -> ExecutorShape:
    return ExecutorShape(app.executor_cores, app.executor_memory_mb)


def checkpoint_root(cfg: Config, app: AppConfig) -> Path:
    """Checkpoints of an app's queries: one directory per query below this one."""
    return cfg.cluster.run_path / "checkpoints" / app.name


def driver_ui_port(cfg: Config, app: AppConfig) -> int:
    """The app's UI (and REST API) port: 0 (any free one) unless `spark.driver_ui_port` fixes them,
    in config order from it."""
    if cfg.spark.driver_ui_port == 0:
        return 0
    return cfg.spark.driver_ui_port + [a.name for a in cfg.apps].index(app.name)


def spark_conf(cfg: Config, app: AppConfig) -> dict[str, str]:
    """The Spark configuration of a managed pipeline (RocksDB state, decommissioning: the
    migrations restart queries from their checkpoints and the agent removes executors gracefully)."""
    return {
        "spark.app.name": app.name,
        # The most the daemon may ask (one executor of headroom: a replacement starts before the
        # executor it replaces leaves); the first launch is initial_executors (_dynamic_allocation_conf).
        "spark.cores.max": str((app.max_executors + 1) * app.executor_cores),
        "spark.executor.cores": str(app.executor_cores),
        "spark.executor.memory": f"{app.executor_memory_mb}m",
        "spark.driver.memory": "1g",
        # Scale-in is a graceful decommission (the lazy kill of N-Storm), not a kill.
        "spark.decommission.enabled": "true",
        "spark.storage.decommission.enabled": "true",
        "spark.storage.decommission.shuffleBlocks.enabled": "true",
        # A decommissioned executor exits only after a migration round finds nothing left to move,
        # and rounds are this far apart (30 s by default: a scale-down took 31 s to show). Streaming
        # state lives in the checkpoint and no batch caches RDD blocks, so rounds are cheap.
        "spark.storage.decommission.replicationReattemptInterval": "1s",
        "spark.storage.decommission.rddBlocks.enabled": "false",
        # A bound: an executor still decommissioning after this long is killed by the driver.
        "spark.executor.decommission.forceKillTimeout": "60s",
        "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
        # The RSS of each executor's process tree (JVM, Python workers) in its REST figures, read
        # by the monitor on whatever host the executor runs (monitors/executor_figures.py).
        "spark.executor.processTreeMetrics.enabled": "true",
        **_dynamic_allocation_conf(app),
        # Only read at a query's first start; afterwards the checkpoint's value wins.
        "spark.sql.shuffle.partitions": str(app.shuffle_partitions),
        "spark.sql.adaptive.enabled": "false",
        # Event-time windows (taxi) and their printed bounds must not depend on the host's zone.
        "spark.sql.session.timeZone": "UTC",
        # 0: any free port; the agent publishes the URL it got (protocol.keys.driver_key).
        "spark.ui.port": str(driver_ui_port(cfg, app)),
        # Nobody who reaches the UI may kill its jobs and stages (Spark's default is true).
        "spark.ui.killEnabled": "false",
        **({"spark.driver.host": cfg.spark.driver_host} if cfg.spark.driver_host else {}),
        **({"spark.driver.bindAddress": cfg.spark.driver_bind_address} if cfg.spark.driver_bind_address else {}),
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        **app.spark_conf,  # the operator's own settings win
    }


def _dynamic_allocation_conf(app: AppConfig) -> dict[str, str]:
    """Spark's own dynamic allocation (the `spark-dra` baseline); with shuffle tracking, as the
    standalone master has no external shuffle service here.

    Without it (sparkscale sizes the app) Spark's allocation manager is still on, for the start
    only: in standalone mode it alone gives the master an initial executor limit
    (StandaloneSchedulerBackend); without one the master launches up to spark.cores.max at once,
    max_executors + 1 JVMs that the agent then trims (82 s of both cores of a 2-core machine before
    wordcount held its one executor). The agent stops the manager as it starts, before any job
    (agent/executors.py); the manager's timeouts are a year, so that it removes nothing before.
    A `spark_conf` of the operator's own wins (barrier-mode jobs need `enabled: false`)."""
    dra = app.dynamic_allocation
    if dra.enabled:
        least, most = app.min_executors, app.max_executors
        idle, backlog = f"{dra.executor_idle_timeout_s:g}s", f"{dra.scheduler_backlog_timeout_s:g}s"
    else:  # for the start only: the agent stops the manager; until then it removes and asks for nothing
        least, most, idle, backlog = 0, app.max_executors + 1, START_ONLY_TIMEOUT, START_ONLY_TIMEOUT
    return {
        "spark.dynamicAllocation.enabled": "true",
        "spark.dynamicAllocation.shuffleTracking.enabled": "true",
        "spark.dynamicAllocation.minExecutors": str(least),
        "spark.dynamicAllocation.maxExecutors": str(most),
        "spark.dynamicAllocation.initialExecutors": str(app.initial_executors),
        "spark.dynamicAllocation.executorIdleTimeout": idle,
        "spark.dynamicAllocation.schedulerBacklogTimeout": backlog,
    }


def submit_command(
    cfg: Config, app: AppConfig, config_path: str | None, overrides: list[str], tools: Tools, properties: Path
) -> list[str]:
    """spark-submit's command line; the Spark configuration is in the `properties` file (written by
    `write_properties`), not on it: `ps` shows command lines to every user of the host."""
    argv = [str(tools.spark_submit), "--master", cfg.spark.master_url, "--deploy-mode", "client",
            *submit_arguments(properties)]
    if app.py_files:
        argv += ["--py-files", ",".join(app.py_files)]
    # The driver's main program: starts the agent, then runs the app's script (or the shipped job).
    argv.append(str(Path(__file__).parent.parent / "agent" / "bootstrap.py"))
    argv += ["--app", app.name]
    if config_path:
        argv += ["--config", str(Path(config_path).resolve())]
    for item in overrides:
        argv += ["--set", item]
    return argv


def launch_driver(cfg: Config, app_name: str, config_path: str | None, overrides: list[str]) -> subprocess.Popen[bytes]:
    """Start the app's driver (spark-submit in client mode) as a child of the caller, the supervisor
    (apps/supervisor.py); its output goes to the app's log. The executor shape is the one a
    migration stored, if any, else the config's. With `security.identity_dir`, the app's agent
    identity, Redis user and znode ACLs are made first (identity_setup.py) and the driver is given
    only its own secret's path."""
    identity_file = provision_app(cfg, app_name)
    client = connect_as(cfg, OPERATOR)
    try:
        app = with_stored_shape(cfg.app(app_name), client, cfg.redis.key_prefix)
    finally:
        client.close()
    directory = pipelines_dir(cfg)
    directory.mkdir(parents=True, exist_ok=True)
    tools = check_tools(cfg.cluster.java, cfg.spark.home)  # runs `java -version`: once per launch
    properties = write_properties(spark_properties_path(cfg, app_name), spark_conf(cfg, app))
    argv = submit_command(cfg, app, config_path, list(overrides), tools, properties)
    with open(log_path(cfg, app_name), "ab") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=driver_environment(cfg, tools, identity_file), cwd=directory)


def driver_environment(cfg: Config, tools: Tools, identity_file: Path | None = None) -> dict[str, str]:
    """The driver's environment: this one (without role identities its agent reads sparkscale's
    secrets from it), with SPARK_LOCAL_IP at `spark.driver_bind_address`, the address Spark binds the
    driver's UI to. With `identity_file` (its agent's own secret) the shared secrets are left out."""
    shared = {REDIS_PASSWORD_ENV, ZOOKEEPER_AUTH_ENV} if identity_file is not None else set()
    return {
        **{name: value for name, value in os.environ.items() if name not in shared},
        **({"SPARK_LOCAL_IP": cfg.spark.driver_bind_address} if cfg.spark.driver_bind_address else {}),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_HOME": str(tools.spark_home),
        **({IDENTITY_FILE_ENV: str(identity_file)} if identity_file is not None else {}),
    }


def supervisor_command(cfg: Config, app_name: str, config_path: str | None, overrides: list[str]) -> list[str]:
    """`sparkscale pipeline run APP` with the same config and overrides, as this Python runs it."""
    argv = [sys.executable, "-m", "sparkscale", "pipeline", "run", app_name]
    if config_path:
        argv += ["--config", str(Path(config_path).resolve())]
    for item in overrides:
        argv += ["--set", item]
    return argv


def submit(
    cfg: Config, app_name: str, config_path: str | None = None, overrides: list[str] | None = None,
    wait_s: float = 180.0,
) -> PipelineRecord:
    """Start the app's driver under its supervisor (`drivers.supervisor`: a process in a session of its
    own, or the app's systemd unit) and return once its queries run (or raise)."""
    cfg.app(app_name)  # KeyError for an unknown app, before anything starts
    current = running(cfg, app_name)
    if current is not None:
        raise PipelineError(f"{app_name} already runs (pid {current.pid}); `sparkscale pipeline stop {app_name}` first")
    directory = pipelines_dir(cfg)
    directory.mkdir(parents=True, exist_ok=True)
    started_marker(cfg, app_name).unlink(missing_ok=True)
    driver_record_path(cfg, app_name).unlink(missing_ok=True)
    logfile = log_path(cfg, app_name)
    if cfg.drivers.supervisor == "systemd":
        systemd_units.start(cfg.drivers.unit(app_name))
        pid = systemd_units.main_pid(cfg.drivers.unit(app_name))
        proc: subprocess.Popen[bytes] | None = None
    else:
        with open(logfile, "ab") as out:
            proc = subprocess.Popen(supervisor_command(cfg, app_name, config_path, list(overrides or [])),
                                    stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True, cwd=directory)
        pid = proc.pid
    record = PipelineRecord(
        app=app_name, pid=pid, create_time=psutil.Process(pid).create_time(), log=str(logfile),
        ui_port=driver_ui_port(cfg, cfg.app(app_name)), submitted_at=time.time(),
    )
    supervisor_record_path(cfg, app_name).write_text(json.dumps(asdict(record)))
    log.info("pipeline.submitted", app=app_name, supervisor_pid=pid, supervisor=cfg.drivers.supervisor,
             log=str(logfile), ui_port=record.ui_port)
    _wait_started(cfg, record, proc, wait_s)
    return record


def _wait_started(cfg: Config, record: PipelineRecord, proc: subprocess.Popen[bytes] | None, wait_s: float) -> None:
    """The driver writes `<app>.started` once its queries run; wait for that or for its supervisor's
    end (a driver that fails before its queries start is not restarted)."""
    marker = started_marker(cfg, record.app)
    deadline = time.monotonic() + wait_s
    while not marker.exists():
        ended = proc.poll() is not None if proc is not None else _live(record) is None
        if ended:
            code = proc.returncode if proc is not None else "?"
            raise PipelineError(f"{record.app} exited with code {code} while starting; its log:\n"
                                f"{tail(Path(record.log), 40)}")
        if time.monotonic() > deadline:
            raise PipelineError(f"{record.app} did not start its queries within {wait_s:.0f} s; its log:\n"
                                f"{tail(Path(record.log), 40)}")
        time.sleep(0.5)
    log.info("pipeline.running", app=record.app, startup_s=round(time.time() - record.submitted_at, 1))


def restart(cfg: Config, app_name: str, config_path: str | None, overrides: list[str] | tuple[str, ...],
            wait_s: float = 300.0) -> PipelineRecord:
    """Stop the app's driver (if it runs) and submit it again: a whole-application restart."""
    stop(cfg, app_name)
    return submit(cfg, app_name, config_path, list(overrides), wait_s=wait_s)


def running(cfg: Config, app_name: str) -> PipelineRecord | None:
    """The app's supervisor record while it (or, its supervisor gone, its driver) runs."""
    path = supervisor_record_path(cfg, app_name)
    try:
        record = PipelineRecord(**json.loads(path.read_text()))
    except FileNotFoundError:
        return None
    return record if _live(record) is not None or current_driver(cfg, app_name) is not None else None


def stop(cfg: Config, app_name: str) -> bool:
    """Stop the app's driver and what it started; True if it was running."""
    path = supervisor_record_path(cfg, app_name)
    started_marker(cfg, app_name).unlink(missing_ok=True)
    try:
        record = PipelineRecord(**json.loads(path.read_text()))
    except FileNotFoundError:
        return False
    if cfg.drivers.supervisor == "systemd":
        was = systemd_units.stop(cfg.drivers.unit(app_name))
    else:
        procs = [p for p in (_live(record), _driver_process(cfg, app_name)) if p is not None]
        stop_trees(procs)  # the supervisor and its driver (which outlives a killed supervisor)
        was = bool(procs)
    if was:
        log.info("pipeline.stopped", app=app_name, pid=record.pid)
    path.unlink(missing_ok=True)
    driver_record_path(cfg, app_name).unlink(missing_ok=True)
    return was


def _driver_process(cfg: Config, app_name: str) -> psutil.Process | None:
    driver = current_driver(cfg, app_name)
    return None if driver is None else live_process(driver.pid, driver.create_time)


def _live(record: PipelineRecord) -> psutil.Process | None:
    return live_process(record.pid, record.create_time)
