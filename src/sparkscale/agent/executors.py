"""The executors of the driver's application, as the driver's scheduler backend sees them (py4j).

Standalone mode gives an application no executor control from outside: listing, the executor
target and graceful decommissioning are calls on the SparkContext's scheduler backend. They are
all here, so that the rest of the agent deals in `ExecutorView`s and executor ids only.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession


@dataclass(frozen=True)
class ExecutorView:
    """One executor as the driver sees it. `active` is false once it is being decommissioned."""

    id: str
    host_port: str
    cores: int
    added_at_ms: int | None
    active: bool


class SparkExecutors:
    """Executor control through py4j, on the driver's scheduler backend."""

    def __init__(self, spark: SparkSession):
        self._sc = spark.sparkContext
        # py4j boundary: the JVM view and the Scala SparkContext are untyped Java proxies.
        self._jvm: Any = spark._jvm
        self._jsc: Any = self._sc._jsc.sc()
        self.graceful = self._sc.getConf().get("spark.decommission.enabled", "false").lower() == "true"

    def _as_list(self, scala_seq: Any) -> builtins.list[Any]:
        # A Scala Seq is not iterable from py4j; a java.util.List view is (py4j wraps it as JavaList).
        return list(self._jvm.scala.jdk.javaapi.CollectionConverters.asJava(scala_seq))

    def list(self) -> list[ExecutorView]:
        """Registered executors, oldest first by add time (unknown add times count as newest)."""
        backend = self._jsc.schedulerBackend()
        ids = [str(i) for i in self._as_list(backend.getExecutorIds())]
        # The status store (what the REST API serves) knows when each executor was added; it is fed
        # by the listener bus, so a just-registered executor may be missing from it for a moment.
        summaries = {str(s.id()): s for s in self._as_list(self._jsc.statusStore().executorList(True))}
        views = []
        for executor_id in ids:
            summary = summaries.get(executor_id)
            views.append(
                ExecutorView(
                    id=executor_id,
                    host_port=str(summary.hostPort()) if summary is not None else "",
                    cores=int(summary.totalCores()) if summary is not None else 0,
                    added_at_ms=int(summary.addTime().getTime()) if summary is not None else None,
                    active=bool(backend.isExecutorActive(executor_id)),
                )
            )
        return sorted(views, key=_add_order)

    def stop_allocation_manager(self) -> bool:
        """Stop Spark's dynamic allocation manager if the driver runs one; whether it did. A managed
        app's submit turns it on only so that the master launches no more than the initial
        executors (apps/submit.py); from here the agent alone sets the target."""
        manager = self._jsc.executorAllocationManager()  # private[spark]: public to py4j
        if not manager.isDefined():
            return False
        manager.get().stop()
        return True

    def request_total(self, total: int) -> bool:
        """Set the application's executor target (the standalone master's executor limit)."""
        empty_map = self._jvm.org.apache.spark.api.python.PythonUtils.toScalaMap(self._jvm.java.util.HashMap())
        return bool(self._jsc.requestTotalExecutors(int(total), 0, empty_map))

    def remove(self, executor_ids: builtins.list[str]) -> builtins.list[str]:
        """Decommission (graceful) or kill the executors; return those Spark accepted.

        The target is left alone (adjustTargetNumExecutors=false): the agent sets it explicitly,
        so there is one place where the count is decided.
        """
        backend = self._jsc.schedulerBackend()
        if not self.graceful:
            seq = self._jvm.org.apache.spark.api.python.PythonUtils.toSeq(list(executor_ids))
            # (ids, adjustTargetNumExecutors, countFailures, force)
            return [str(i) for i in self._as_list(backend.killExecutors(seq, False, False, True))]
        # SparkContext.killExecutors SIGTERMs the executor even with spark.decommission.enabled
        # (its running tasks fail and are retried); decommissionExecutor is the graceful path: the
        # executor takes no new task, finishes its running ones, then exits by itself.
        none = getattr(getattr(self._jvm.scala, "None$"), "MODULE$")
        info = self._jvm.org.apache.spark.scheduler.ExecutorDecommissionInfo("sparkscale: scale in", none)
        return [i for i in executor_ids if backend.decommissionExecutor(i, info, False, False)]


def _add_order(view: ExecutorView) -> tuple[float, int]:
    numeric_id = int(view.id) if view.id.isdigit() else -1
    return (float("inf") if view.added_at_ms is None else float(view.added_at_ms), numeric_id)
