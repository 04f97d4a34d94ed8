"""The scaling benchmark's memory row (issue 33): a workload whose state outgrows executor memory
once a scale-down gathers it on few executors, and how a run's out-of-memory is seen.

The app (pipelines/workloads/memory_state.py) keeps one padded key per record in the state store,
on Spark's HDFSBackedStateStoreProvider, which holds the state on the executors' JVM heap (RocksDB,
the product's default, keeps it off the heap, where no executor memory setting bounds it). It
starts on the maximum executors, so that its state partitions spread over all of them, and the
profile's high step (which needs them all) builds the state; at the low step DS2 wants one
executor. ds2-baseline then halves its executors twice, each executor left reloads the state
partitions of those removed from the checkpoint, and one dies of an OutOfMemoryError; ds2's
guards.max_state_memory_fraction holds the scale-down (bench.scaling_controllers).

An executor that died of an OutOfMemoryError exits with Spark's exit code 52 (SparkExitCode.OOM);
the standalone master reports "Command exited with code 52", which the driver's `/allexecutors`
lists as the executor's `removeReason` (bench.chaos_breakdown reads it). An OomWatch reads it while
the run goes on, with the recorder's samples: a query whose tasks failed on every retry ends the
driver (the shipped job awaits its queries), and with it the list.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import redis

from sparkscale.model.memory_figures import MIB
from sparkscale.monitors.spark_rest import SparkRestClient, SparkRestError
from sparkscale_lab.bench.chaos_breakdown import ExecutorSpan, parse_executor_spans
from sparkscale_lab.bench.timeline import Probe, Sample
from sparkscale_lab.pipelines.profiles import parse_profile
from sparkscale_lab.pipelines.workloads.memory_state import COST_MS_CONF, STATE_BYTES_CONF

HDFS_PROVIDER = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
OOM_EXIT_CODE = 52  # Spark's SparkExitCode.OOM
_OOM = re.compile(rf"OutOfMemory|\bcode {OOM_EXIT_CODE}\b", re.IGNORECASE)


@dataclass(frozen=True)
class MemoryStateSizing:
    """The memory row's figures. 112 KiB of state a record: with the run's 20 s warm-up at the first
    rate, the 7200 records read by the end of the high step hold about 788 MiB, 197 MiB an executor
    on 4 (fits the heap a 512 MB executor leaves, with room for an earlier version), 394 MiB on 2
    and 788 MiB on 1 (do not); the low step adds 131 MiB. At 48 KiB a record (338 MiB) two
    executors held the state, and the baseline stopped there: the HDFS store's upkeep kept 1.5-1.7
    cores busy at the low rate (docs/results/bench_scaling_33/memory_220s). 50 ms a record: the high
    step (60/s) keeps 3 cores busy, 4 executors at DS2's 0.8 target utilisation; the low step (10/s)
    needs half a core. A 10 s trigger: at the 1 s default each task of the stateful stage read 2-3
    records at the low rate, the state store's fixed cost a task (loading and committing its
    version) kept 3-4 cores busy, and the baseline never scaled down (the 112 KiB run of
    2026-11-28); 10 s batches spread that cost over ten times the records. The baseline's
    scale-down starts about 30 s into the low step (the benchmark's guards.scale_down_delay_s)."""

    profile: str = "steps:60@100s,10@120s"  # 220 s: the state built, then a long enough low step
    state_bytes_per_record: int = 114688
    cost_ms_per_record: float = 50.0
    executor_memory_mb: int = 512
    trigger_s: float = 10.0

    def spark_conf(self) -> dict[str, str]:
        return {"spark.sql.streaming.stateStore.providerClass": HDFS_PROVIDER,
                STATE_BYTES_CONF: str(self.state_bytes_per_record), COST_MS_CONF: f"{self.cost_ms_per_record:g}"}

    def state_mib_at(self, t_s: float, warmup_s: float = 0.0) -> float:
        """The state (padding only, a lower bound) once the records of a warm-up of `warmup_s` at the
        profile's first rate and the profile's up to `t_s` are read."""
        profile = parse_profile(self.profile)
        records = profile.rate_at(0) * warmup_s + profile.records_by(t_s)
        return records * self.state_bytes_per_record / MIB

    def cores_needed(self, rate: float) -> float:
        return rate * self.cost_ms_per_record / 1000.0


def is_oom(reason: str | None) -> bool:
    """An executor's removeReason says it died of an out-of-memory."""
    return bool(reason) and _OOM.search(reason or "") is not None


def oom_losses(spans: Sequence[ExecutorSpan] | None) -> int | None:
    """Executors the driver lists as removed for an out-of-memory; None when it did not answer."""
    if spans is None:
        return None
    return sum(1 for s in spans if s.removed_at_s is not None and is_oom(s.remove_reason))


class OomWatch:
    """A probe that samples as `inner` does and, every `every` looks, reads the driver's
    `/allexecutors`, keeping each executor (by app and id) as last listed: the executors lost to an
    out-of-memory survive the driver that listed them."""

    def __init__(self, inner: Probe, app: str, every: int = 5):
        self.inner, self.app, self.every = inner, app, every
        self.spans: dict[tuple[str, str], ExecutorSpan] = {}
        self.answered = False
        self._looks = 0

    def look(self, client: redis.Redis, rest: SparkRestClient, t0: float) -> Sample:
        sample = self.inner.look(client, rest, t0)
        self._looks += 1
        if self._looks % self.every == 0:
            self.read(rest)
        return sample

    def read(self, rest: SparkRestClient) -> None:
        """One read of the driver's executors, dead ones too; nothing when it does not answer."""
        try:
            app_id = rest.application(self.app).id
            spans = parse_executor_spans(rest.get_json(f"applications/{app_id}/allexecutors"))
        except (SparkRestError, ValueError, KeyError, TypeError):
            return
        self.add(app_id, spans)

    def add(self, app_id: str, spans: Sequence[ExecutorSpan]) -> None:
        self.answered = True
        self.spans.update({(app_id, s.id): s for s in spans})

    def oom_losses(self) -> int | None:
        """Executors lost to an out-of-memory over the run; None when the driver never answered."""
        return oom_losses(list(self.spans.values())) if self.answered else None
