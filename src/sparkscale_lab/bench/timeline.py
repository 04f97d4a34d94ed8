"""A run's time series: one `Sample` every `sample_s` seconds, taken by a `Recorder` thread from the
same sources the daemon reads (Redis source bookkeeping and progress, the driver's REST API).

Counts are cumulative (records arrived in the input, records the query finished); rates are derived
afterwards over several seconds (`rates`), because a micro-batch source advances in steps, one per
batch. What a sample reads depends on the app (`bench.probes`): the shipped pipelines' Redis
streams, or a script's file source.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Protocol

import redis
import structlog

from sparkscale.config import AppConfig, Config
from sparkscale.config.identities import OPERATOR
from sparkscale.monitors.spark_rest import SparkRestClient, SparkRestError, driver_rest
from sparkscale.protocol.keys import input_stream_key, progress_key
from sparkscale.protocol.streams import StreamOffsets, read_source_status, stream_heads
from sparkscale.redisconn import connect_as
from sparkscale_lab.pipelines.workloads import workload

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Sample:
    """What one look at a running app saw; `t_s` is seconds since the run's start."""

    t_s: float
    arrived_records: int  # entries ever added to the app's input streams
    processed_records: int  # entries the query has finished (its last finished batch's end offsets)
    batch_duration_ms: float | None  # the last finished batch's
    executors: int | None  # active executors (None: the REST API did not answer)
    cores: int | None
    partitions: int | None  # state partitions the query reports
    # The backlog the app's progress reports state (what the daemon sizes from: for a file source the
    # agent's file-listing estimate); the worst query's; None: unknown or not read.
    stated_backlog_records: int | None = None
    # End-to-end latency of the batches finished since the previous sample (the worst), else the
    # previous sample's: batch end minus the arrival of the oldest record it read. None: unknown.
    latency_ms: float | None = None

    @property
    def backlog_records(self) -> int:
        return max(self.arrived_records - self.processed_records, 0)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Sample:
        """Also older results, written before the stated backlog and the latency were sampled."""
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass(frozen=True)
class RatePoint:
    t_s: float
    input_rate: float  # records/s arrived over the rate window ending at t_s
    output_rate: float  # records/s finished over the same window


def trailing(samples: Sequence[Sample], window_s: float) -> Iterator[tuple[Sample, Sample]]:
    """Each sample with the latest one at least `window_s` before it (the first sample while none is)."""
    j = 0
    for s in samples:
        while j + 1 < len(samples) and s.t_s - samples[j + 1].t_s >= window_s:
            j += 1
        yield s, samples[j]


def rates(samples: list[Sample], window_s: float = 10.0) -> list[RatePoint]:
    """Input and output rate at each sample, over the last `window_s` seconds (from the first sample
    at least that far back; samples earlier than one window after the start get none)."""
    out: list[RatePoint] = []
    for s, base in trailing(samples, window_s):
        dt = s.t_s - base.t_s
        if dt < window_s:
            continue
        out.append(RatePoint(s.t_s, (s.arrived_records - base.arrived_records) / dt,
                             (s.processed_records - base.processed_records) / dt))
    return out


def executors_of(rest: SparkRestClient, app_name: str) -> tuple[int | None, int | None]:
    """(active executors, their cores) from the driver's REST API; (None, None) when it does not
    answer (between driver restarts, or before the UI is up): recorded as unknown."""
    try:
        found = rest.executors(rest.application(app_name).id)
    except SparkRestError:
        return None, None
    return len(found), sum(e.cores for e in found)


def look(cfg: Config, app: AppConfig, client: redis.Redis, rest: SparkRestClient, t0: float) -> Sample:
    """One sample of the app now."""
    prefix = cfg.redis.key_prefix
    query = workload(app.pipeline).query
    heads = stream_heads(client, [input_stream_key(prefix, app.name, i) for i in range(app.source_partitions)])
    status = read_source_status(client, prefix, app.name, query)
    processed = StreamOffsets.from_json(status.processed or status.committed or {}, app.source_partitions).total
    progress = client.hgetall(progress_key(prefix, app.name, query))
    executors, cores = executors_of(rest, app.name)

    def num(name: str) -> float | None:
        value = progress.get(name)
        return None if value in (None, "") else float(value)

    partitions = num("state_partitions")
    return Sample(
        t_s=round(time.time() - t0, 3), arrived_records=sum(h.entries_added for h in heads),
        processed_records=processed, batch_duration_ms=num("batch_duration_ms"), executors=executors,
        cores=cores, partitions=None if partitions is None else int(partitions),
    )


class Probe(Protocol):
    """One look at a running app (bench.probes: a shipped pipeline, a script on a file source)."""

    def look(self, client: redis.Redis, rest: SparkRestClient, t0: float) -> Sample: ...


class StreamProbe:
    """A shipped pipeline on the Redis streams source: `look` (no latency; bench.probes adds it)."""

    def __init__(self, cfg: Config, app: AppConfig):
        self.cfg, self.app = cfg, app

    def look(self, client: redis.Redis, rest: SparkRestClient, t0: float) -> Sample:
        return look(self.cfg, self.app, client, rest, t0)


class Recorder:
    """Samples an app every `sample_s` seconds in a background thread until `stop()`, through `probe`
    (default: the shipped pipeline's Redis streams)."""

    def __init__(self, cfg: Config, app_name: str, sample_s: float = 2.0, t0: float | None = None,
                 probe: Probe | None = None):
        self.cfg = cfg
        self.app = cfg.app(app_name)
        self.sample_s = sample_s
        self.t0 = time.time() if t0 is None else t0
        self.probe: Probe = probe or StreamProbe(cfg, self.app)
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"recorder-{app_name}", daemon=True)

    def start(self) -> Recorder:
        self._thread.start()
        return self

    def stop(self) -> list[Sample]:
        self._stop.set()
        self._thread.join()
        return list(self.samples)

    def _run(self) -> None:
        client = connect_as(self.cfg, OPERATOR)
        rest = driver_rest(self.cfg, self.app, timeout_s=2, retries=0)
        next_at = time.monotonic()
        while not self._stop.is_set():
            try:
                self.samples.append(self.probe.look(client, rest, self.t0))
            except (redis.RedisError, OSError) as exc:  # OSError: a file probe's listing or checkpoint read
                log.warning("bench.sample_failed", app=self.app.name, error=str(exc))
            next_at += self.sample_s
            self._stop.wait(max(next_at - time.monotonic(), 0))  # a sampling period, not a condition
        client.close()
