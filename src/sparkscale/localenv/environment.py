"""The embedded local environment: Spark standalone master and workers, Redis, ZooKeeper on loopback.

Each worker binds and advertises its own address (`cluster.worker_hosts`, default 127.0.0.1 for
all): its RPC, web UI and, through `--hostname` and the inherited SPARK_LOCAL_IP, the executors it
launches, so one machine can look like several hosts to Spark and to the monitor. With
`cluster.worker_cpus` each worker starts under `taskset -c`, so it and its executors run on its own
CPUs only, and `cluster.worker_cores` may give each worker its own advertised core count.

`up` starts what is not already running and waits until each service answers (probes.py); `down`
stops exactly the processes that `up` recorded (pid and start time, so a recycled pid is never
killed), with the processes they started themselves (a worker's executors), and nothing else.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import time
from collections.abc import Callable, Collection
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil
import structlog

from sparkscale.config import Config
from sparkscale.config.identities import DAEMON, OPERATOR
from sparkscale.config.secrets import role_credentials
from sparkscale.identity_setup import agent_identities, make_cluster_secrets, secure_cluster
from sparkscale.localenv.child_env import child_environment
from sparkscale.localenv.preflight import ZOOKEEPER_CLASSPATH, Tools, check_addresses, check_tools
from sparkscale.localenv.private_files import write_private
from sparkscale.localenv.probes import answered, master_json, port_open, redis_ping, worker_alive, zookeeper_ruok
from sparkscale.localenv.redis_auth import redis_auth_lines
from sparkscale.processes import live_process, stop_trees, tail

log = structlog.get_logger(__name__)

LOOPBACK = "127.0.0.1"


class EnvironmentStartError(Exception):
    """A service did not start or did not answer in time; the message says which and why."""


@dataclass
class ServiceSpec:
    """How to start one service and how to tell that it answers."""

    name: str
    argv: list[str]
    env: dict[str, str]
    workdir: Path
    ports: list[int]
    answers: Callable[[], bool]
    files: dict[Path, str] = field(default_factory=dict)
    host: str = LOOPBACK  # the address its ports are bound on
    spark: bool = False  # a Spark master or worker: it also gets the caller's Spark settings (child_env.py)

    @property
    def log_path(self) -> Path:
        return self.workdir / f"{self.name}.log"


@dataclass
class ServiceRecord:
    """What `up` wrote down about a process it started: enough to find it again and only it."""

    name: str
    pid: int
    create_time: float
    ports: list[int]
    log: str


@dataclass(frozen=True)
class ServiceStatus:
    name: str
    pid: int | None
    ports: list[int]
    running: bool
    answers: bool
    log: str | None
    host: str = LOOPBACK


class LocalEnvironment:
    """One embedded environment, rooted at `cluster.run_dir`."""

    def __init__(self, cfg: Config):
        self.cfg = cfg
        self.run_dir = cfg.cluster.run_path
        self.state_path = self.run_dir / "state.json"

    # -- public ---------------------------------------------------------------------------------

    def up(self, only: Collection[str] | None = None) -> list[ServiceStatus]:
        """Start whatever is not running, then wait until every service answers. Idempotent.
        `only`: just the services of these names (tests that need Redis and ZooKeeper alone)."""
        if self.cfg.redis.tls:
            raise EnvironmentStartError(
                "redis.tls is set, but the embedded Redis does not serve TLS: set redis.tls: false for "
                "`cluster up`, or point redis.* at a Redis of your own that does"
            )
        if self.cfg.zookeeper.tls:
            raise EnvironmentStartError(
                "zookeeper.tls is set, but the embedded ZooKeeper does not serve TLS: set zookeeper.tls: false "
                "for `cluster up`, or point zookeeper.* at a ZooKeeper of your own that does"
            )
        tools = check_tools(self.cfg.cluster.java, self.cfg.spark.home, pin_cpus=bool(self.cfg.cluster.worker_cpus))
        check_addresses(self.cfg.cluster.worker_host(i) for i in range(1, self.cfg.cluster.workers + 1))
        self.run_dir.mkdir(parents=True, exist_ok=True)
        make_cluster_secrets(self.cfg)  # before redis.conf is written: it names their users
        specs = [s for s in self.specs(tools) if only is None or s.name in only]
        deadline = time.monotonic() + self.cfg.cluster.start_timeout_s
        # Master first: a worker that finds no master waits 5-15 s before it tries again.
        first = [s for s in specs if not s.name.startswith("spark-worker")]
        workers = [s for s in specs if s.name.startswith("spark-worker")]
        for batch in (first, workers):
            for spec in batch:
                self._ensure_started(spec)
            for spec in batch:
                self._wait_answers(spec, deadline)
            if batch is first and {"zookeeper", "redis"} <= {spec.name for spec in first}:
                # Identities and ACLs before any worker (and so any driver) runs, and before we return.
                secure_cluster(self.cfg)
        return self.status()

    def down(self) -> list[str]:
        """Stop every recorded process with what it started; return the names stopped."""
        records = self._read_state()
        live = {name: proc for name, rec in records.items() if (proc := _live_process(rec)) is not None}
        # All at once: nothing here needs an order to shut down cleanly, and waiting on each in
        # turn would cost a poll interval per service.
        stop_trees(list(live.values()))
        for name in live:
            log.info("cluster.stopped", service=name, pid=records[name].pid)
        self._write_state({})
        return sorted(live, key=_stop_order)

    def status(self) -> list[ServiceStatus]:
        records = self._read_state()
        result = []
        for spec in self.specs(None):
            record = records.get(spec.name)
            running = record is not None and _live_process(record) is not None
            result.append(
                ServiceStatus(
                    name=spec.name,
                    pid=record.pid if record else None,
                    ports=record.ports if record else [],
                    running=running,
                    answers=running and answered(spec.answers),
                    log=record.log if record else None,
                    host=spec.host,
                )
            )
        return result

    def recorded_pids(self) -> list[int]:
        return [r.pid for r in self._read_state().values()]

    # -- services -------------------------------------------------------------------------------

    def specs(self, tools: Tools | None) -> list[ServiceSpec]:
        """The services of this environment, in start order. `tools` may be None for status only."""
        cfg = self.cfg
        spark_home = str(tools.spark_home) if tools else ""
        spark_class = str(tools.spark_class) if tools else ""
        java = tools.java if tools else "java"
        spark_env = {
            "SPARK_HOME": spark_home,
            "SPARK_CONF_DIR": str(self.run_dir / "spark" / "conf"),
            "SPARK_LOCAL_IP": LOOPBACK,
            "SPARK_LOG_DIR": str(self.run_dir / "spark"),
            # Executors start Python workers; they must use the interpreter that has sparkscale.
            "PYSPARK_PYTHON": sys.executable,
        }
        if tools and cfg.cluster.java != "java":
            spark_env["JAVA_HOME"] = str(Path(tools.java).resolve().parent.parent)

        specs = [
            ServiceSpec(
                name="zookeeper",
                argv=[
                    java, "-Xmx256m", "-cp", ZOOKEEPER_CLASSPATH,
                    "-Dzookeeper.admin.enableServer=false",
                    "org.apache.zookeeper.server.quorum.QuorumPeerMain",
                    str(self.run_dir / "zookeeper" / "zoo.cfg"),
                ],
                env={},
                workdir=self.run_dir / "zookeeper",
                ports=[cfg.zookeeper.first_port],
                answers=lambda: zookeeper_ruok(LOOPBACK, cfg.zookeeper.first_port),
                files={self.run_dir / "zookeeper" / "zoo.cfg": self._zoo_cfg()},
            ),
            ServiceSpec(
                name="redis",
                argv=[tools.redis_server if tools else "redis-server", str(self.run_dir / "redis" / "redis.conf")],
                env={},
                workdir=self.run_dir / "redis",
                ports=[cfg.redis.port],
                answers=lambda: redis_ping(cfg.redis, LOOPBACK, role_credentials(cfg, OPERATOR)),
                files={self.run_dir / "redis" / "redis.conf": self._redis_conf()},
            ),
            ServiceSpec(
                name="spark-master",
                argv=[
                    spark_class, "org.apache.spark.deploy.master.Master",
                    "--host", LOOPBACK, "--port", str(cfg.spark.master_port),
                    "--webui-port", str(cfg.spark.master_web_port),
                ],
                env=spark_env,
                workdir=self.run_dir / "spark",
                ports=[cfg.spark.master_port, cfg.spark.master_web_port],
                answers=lambda: master_json(cfg.spark.master_web_url).get("status") == "ALIVE",
                # Read by the master and the workers (SPARK_CONF_DIR): their UIs cannot kill apps.
                files={self.run_dir / "spark" / "conf" / "spark-defaults.conf": "spark.ui.killEnabled false\n"},
                spark=True,
            ),
        ]
        for i in range(1, cfg.cluster.workers + 1):
            # Distinct ports even on distinct addresses: one port plan for both layouts.
            web_port = cfg.cluster.worker_web_port + i - 1
            host = cfg.cluster.worker_host(i)
            workdir = self.run_dir / "spark" / f"worker-{i}"
            specs.append(
                ServiceSpec(
                    name=f"spark-worker-{i}",
                    argv=[
                        *pinned(cfg.cluster.cpus_of(i), tools.taskset if tools and tools.taskset else "taskset"),
                        spark_class, "org.apache.spark.deploy.worker.Worker",
                        # Spark passes this to the executors it launches as --hostname (their bind
                        # and advertised address); SPARK_LOCAL_IP below binds its web UI there.
                        "--host", host,
                        "--cores", str(cfg.cluster.cores_of(i)),
                        "--memory", f"{cfg.cluster.worker_memory_mb}M",
                        "--webui-port", str(web_port),
                        "--work-dir", str(workdir / "work"),
                        cfg.spark.master_url,
                    ],
                    env={**spark_env, "SPARK_LOCAL_IP": host},
                    workdir=workdir,
                    ports=[web_port],
                    answers=functools.partial(worker_alive, cfg.spark.master_web_url, host, web_port),
                    host=host,
                    spark=True,
                )
            )
        return specs

    def _zoo_cfg(self) -> str:
        zk = self.cfg.zookeeper
        return "\n".join(
            [
                "tickTime=2000",
                f"dataDir={self.run_dir / 'zookeeper' / 'data'}",
                f"clientPort={zk.first_port}",
                f"clientPortAddress={LOOPBACK}",
                "admin.enableServer=false",
                "4lw.commands.whitelist=ruok,srvr",
                # Allow sessions as long as the config asks for (maxSessionTimeout = 20 ticks by default).
                f"maxSessionTimeout={max(40000, int(zk.session_timeout_s * 2000))}",
                "",
            ]
        )

    def _redis_auth(self) -> list[str]:
        """redis.conf's users: with identities, those whose secrets exist (all of them once `up` made
        the daemon's and the operator's; `status` may run before)."""
        identity_dir = self.cfg.security.identity_dir
        if identity_dir is None:
            return redis_auth_lines(self.cfg.redis)
        known = [i for i in (DAEMON, OPERATOR, *agent_identities(identity_dir)) if i.secret_path(identity_dir).exists()]
        return redis_auth_lines(self.cfg.redis, known, identity_dir)

    def _redis_conf(self) -> str:
        return "\n".join(
            [
                f"bind {LOOPBACK}",
                f"port {self.cfg.redis.port}",
                "protected-mode yes",
                "daemonize no",
                f"dir {self.run_dir / 'redis'}",
                # The action log and blocklist must survive a restart (issue 5): append-only file on.
                "appendonly yes",
                "appendfsync everysec",
                'save ""',
                'logfile ""',
                # AUTH (redis.password_file / redis.username): this file is written with mode 0600.
                *self._redis_auth(),
                "",
            ]
        )

    # -- processes ------------------------------------------------------------------------------

    def _ensure_started(self, spec: ServiceSpec) -> None:
        records = self._read_state()
        record = records.get(spec.name)
        if record is not None and _live_process(record) is not None:
            log.info("cluster.already_running", service=spec.name, pid=record.pid)
            return
        for port in spec.ports:
            if port_open(spec.host, port):
                raise EnvironmentStartError(
                    f"{spec.name}: port {spec.host}:{port} is already in use by a process this environment "
                    f"did not start; stop it or choose other ports in the config"
                )
        spec.workdir.mkdir(parents=True, exist_ok=True)
        for path, text in spec.files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            write_private(path, text)
        (self.run_dir / "zookeeper" / "data").mkdir(parents=True, exist_ok=True)
        # Only the allowed part of this environment (no secrets of sparkscale's: child_env.py); a
        # worker's executors inherit the worker's.
        env = child_environment(spec.env, spec.spark)
        with open(spec.log_path, "ab") as out:
            proc = subprocess.Popen(
                spec.argv, cwd=spec.workdir, env=env, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )
        records[spec.name] = ServiceRecord(
            name=spec.name, pid=proc.pid, create_time=psutil.Process(proc.pid).create_time(),
            ports=spec.ports, log=str(spec.log_path),
        )
        self._write_state(records)
        log.info("cluster.started", service=spec.name, pid=proc.pid, ports=spec.ports)

    def _wait_answers(self, spec: ServiceSpec, deadline: float) -> None:
        delay = 0.1
        while True:
            record = self._read_state().get(spec.name)
            if record is None or _live_process(record) is None:
                raise EnvironmentStartError(f"{spec.name} exited during start-up; its log:\n{tail(spec.log_path)}")
            if answered(spec.answers):
                log.info("cluster.answers", service=spec.name, pid=record.pid)
                return
            if time.monotonic() > deadline:
                raise EnvironmentStartError(
                    f"{spec.name} did not answer within {self.cfg.cluster.start_timeout_s:.0f} s; "
                    f"its log:\n{tail(spec.log_path)}"
                )
            time.sleep(delay)
            delay = min(delay * 1.5, 1.0)

    def _read_state(self) -> dict[str, ServiceRecord]:
        try:
            data = json.loads(self.state_path.read_text())
        except FileNotFoundError:
            return {}
        return {name: ServiceRecord(**rec) for name, rec in data.items()}

    def _write_state(self, records: dict[str, ServiceRecord]) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps({n: asdict(r) for n, r in records.items()}, indent=2))
        tmp.replace(self.state_path)


# -- helpers --------------------------------------------------------------------------------------


def pinned(cpus: list[int], taskset: str = "taskset") -> list[str]:
    """The launch prefix that pins a worker to `cpus` ([] = none). It must be the launch command:
    `taskset` sets the affinity and execs spark-class, which execs the JVM, and the executors (and
    their Python workers) the JVM forks inherit it; setting it after the start (psutil's
    cpu_affinity) would pin only the one thread it names."""
    return [taskset, "-c", ",".join(str(c) for c in cpus)] if cpus else []


def _stop_order(name: str) -> tuple[int, str]:
    order = {"spark-worker": 0, "spark-master": 1, "redis": 2, "zookeeper": 3}
    return (order.get(name.rsplit("-", 1)[0] if name.startswith("spark-worker") else name, 9), name)


def _live_process(record: ServiceRecord) -> psutil.Process | None:
    return live_process(record.pid, record.create_time)

