"""What the embedded environment needs from the machine, checked before anything starts.

Each missing piece is reported with the command that installs it, so a fresh machine gets a
useful answer instead of a Java stack trace in a log file.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import socket
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
# Debian's zookeeper package splits its dependencies (netty, slf4j, log4j, jute) over these.
ZOOKEEPER_CLASSPATH = "/usr/share/java/*:/usr/share/zookeeper/*"
MIN_JAVA = 17


class PreflightError(Exception):
    """Something the machine lacks; the message names the command that installs it."""


@dataclass(frozen=True)
class Tools:
    java: str
    java_major: int
    redis_server: str
    spark_home: Path
    taskset: str | None = None  # found only when workers are pinned (cluster.worker_cpus)

    @property
    def spark_class(self) -> Path:
        return self.spark_home / "bin" / "spark-class"

    @property
    def spark_submit(self) -> Path:
        return self.spark_home / "bin" / "spark-submit"


def spark_home(configured: str | None = None) -> Path:
    """SPARK_HOME: the configured one, else the pyspark package's own (it ships bin/ and jars/)."""
    if configured:
        return Path(configured).expanduser()
    # Found, not imported: the head-node daemon submits drivers but never loads PySpark itself.
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise PreflightError("PySpark is not installed: pip install pyspark==4.3.0 (or set spark.home)")
    return Path(spec.origin).parent


def check_tools(java: str = "java", configured_spark_home: str | None = None, pin_cpus: bool = False) -> Tools:
    """Every tool the environment starts its services with; `pin_cpus`: also `taskset`, which
    `cluster.worker_cpus` launches the workers under."""
    problems: list[str] = []
    java_path = shutil.which(java)
    major = 0
    if java_path is None:
        problems.append(f"Java {MIN_JAVA} is missing ({java!r} not found): apt-get install openjdk-17-jre-headless")
    else:
        major = java_major_version(java_path)
        if major < MIN_JAVA:
            problems.append(
                f"Java {MIN_JAVA}+ is required, {java_path} is Java {major or 'of unknown version'}: "
                "apt-get install openjdk-17-jre-headless"
            )
    redis_server = shutil.which("redis-server")
    if redis_server is None:
        problems.append("redis-server is missing: apt-get install redis-server")
    if not ZOOKEEPER_JAR.exists():
        problems.append(f"ZooKeeper is missing ({ZOOKEEPER_JAR} not found): apt-get install zookeeper")
    taskset = shutil.which("taskset") if pin_cpus else None
    if pin_cpus and taskset is None:
        problems.append("taskset is missing (cluster.worker_cpus pins each worker to its CPUs with it): "
                        "apt-get install util-linux, or set cluster.worker_cpus: []")
    home = spark_home(configured_spark_home)
    if not (home / "bin" / "spark-class").exists():
        problems.append(f"spark-class not found under {home}: pip install pyspark==4.3.0 (or fix spark.home)")
    if problems:
        raise PreflightError("\n".join(problems))
    assert java_path is not None and redis_server is not None
    return Tools(java=java_path, java_major=major, redis_server=redis_server, spark_home=home, taskset=taskset)


def java_major_version(java_path: str) -> int:
    try:
        out = subprocess.run([java_path, "-version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not match:
        return 0
    major = int(match.group(1))
    # Java 8 and older report "1.8.0_x".
    return int(match.group(2) or 0) if major == 1 else major


def check_addresses(hosts: Iterable[str]) -> None:
    """Each address can be bound here (`cluster.worker_hosts`): a worker on an address the machine
    lacks would die with a bind error deep in its log."""
    problems = []
    for host in sorted(set(hosts)):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, 0))
            except OSError as exc:
                problems.append(
                    f"cannot bind {host} ({exc.strerror}): this machine lacks that address; on Linux all of "
                    "127.0.0.0/8 is loopback, elsewhere add it (macOS: sudo ifconfig lo0 alias " + host + ")"
                )
    if problems:
        raise PreflightError("\n".join(problems))
