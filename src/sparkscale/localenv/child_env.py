"""The environment each service of the embedded environment starts with: an allow-list of the
caller's variables, never the whole of it (issue 32).

Why: `cluster up` runs in the operator's shell, whose environment may hold sparkscale's own secrets
($SPARKSCALE_REDIS_PASSWORD, $SPARKSCALE_ZOOKEEPER_AUTH: config/secrets.py) and anything else. Redis
and ZooKeeper need none of it; a Spark worker hands its environment on to every executor it launches
(and the executors run the applications' code), so what a worker does not get, no executor gets.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

# What any process here needs to find programs and libraries, and to run in the user's locale.
BASE_NAMES = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "JAVA_HOME",
    # A Python or JVM installed outside the system's prefixes finds its shared libraries here.
    "LD_LIBRARY_PATH",
})
BASE_PREFIXES = ("LC_",)
# Spark's master, workers and executors also read the operator's Spark settings (spark-env.sh's
# SPARK_* variables: SPARK_MASTER_OPTS for placement.worker_selection_policy, SPARK_WORKER_OPTS,
# SPARK_DAEMON_MEMORY, SPARK_DIST_CLASSPATH, ...), and the executors' Python workers import the
# pipelines' modules the way the daemon's Python does (PYTHONPATH). The prefix is SPARK_, with its
# underscore: sparkscale's own variables (SPARKSCALE_*) do not match it.
SPARK_NAMES = frozenset({"PYSPARK_PYTHON", "PYTHONPATH", "HADOOP_CONF_DIR"})
SPARK_PREFIXES = ("SPARK_",)


def allowed(name: str, spark: bool) -> bool:
    """Whether a service gets the caller's variable `name` (`spark`: a Spark master or worker)."""
    if name in BASE_NAMES or name.startswith(BASE_PREFIXES):
        return True
    return spark and (name in SPARK_NAMES or name.startswith(SPARK_PREFIXES))


def child_environment(own: Mapping[str, str], spark: bool, parent: Mapping[str, str] | None = None) -> dict[str, str]:
    """The allowed variables of `parent` (default: this process's environment), then the service's
    `own` settings over them."""
    source = os.environ if parent is None else parent
    return {**{name: value for name, value in source.items() if allowed(name, spark)}, **own}
