"""A small client for a Spark driver's REST API (`http://HOST:UI_PORT/api/v1`), with typed results.

Only what the monitor needs: the application id, the active executors, the jobs (whose
descriptions name the streaming query and micro-batch), and stage attempts with their tasks.
Parsing is separate from fetching (`parse_*`), so that recorded JSON can be turned into the same
dataclasses in unit tests. urllib only: the daemon should not need an HTTP library for this.
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import redis
import structlog
from pydantic import JsonValue

from sparkscale.config import AppConfig, Config
from sparkscale.model.fields import object_at
from sparkscale.protocol.keys import driver_key
from sparkscale.store.bad_records import PROBLEMS, BadRecords, escaped, load_json
from sparkscale.store.driver_urls import OPENER, driver_url_refusal

log = structlog.get_logger(__name__)

DEFAULT_RETRIES = 3
DEFAULT_BACKOFF_S = 0.2
REFUSED_URLS = BadRecords()  # driver URLs refused: each logged once (`store.bad_record`, with the app's key)


class SparkRestError(Exception):
    """A REST call failed: `url` is what was asked, `cause` what went wrong."""

    def __init__(self, url: str, cause: str, *, unreachable: bool = False, status: int | None = None):
        self.url = url
        self.cause = cause
        self.unreachable = unreachable  # nothing answered at all (connection refused, timeout)
        self.status = status
        super().__init__(f"Spark REST {url}: {cause}")


# ---------------------------------------------------------------------------------------------
# Typed results


@dataclass(frozen=True)
class RestApplication:
    id: str
    name: str


@dataclass(frozen=True)
class RestExecutorMemory:
    """An executor's memory as Spark reports it. Storage figures are current; the `peak_*` ones are
    the highest the executor's heartbeats reported since it started (Spark keeps no current value).
    Process-tree RSS is None unless `spark.executor.processTreeMetrics.enabled` (Spark reports 0)."""

    storage_used_bytes: int  # memoryUsed: blocks held in storage memory
    storage_total_bytes: int  # maxMemory: storage memory available (Spark's Executors page)
    peak_jvm_heap_bytes: int | None = None
    peak_jvm_offheap_bytes: int | None = None
    peak_jvm_rss_bytes: int | None = None  # ProcessTreeJVMRSSMemory
    peak_python_rss_bytes: int | None = None  # ProcessTreePythonRSSMemory: the Python workers
    peak_other_rss_bytes: int | None = None  # ProcessTreeOtherRSSMemory

    @property
    def peak_rss_bytes(self) -> int | None:
        """The executor's process tree (JVM, Python workers, others), each part at its own peak."""
        parts = (self.peak_jvm_rss_bytes, self.peak_python_rss_bytes, self.peak_other_rss_bytes)
        return None if self.peak_jvm_rss_bytes is None else sum(p or 0 for p in parts)


@dataclass(frozen=True)
class RestExecutor:
    """An executor the app holds (never the driver)."""

    id: str
    host: str
    cores: int
    active: bool
    active_tasks: int
    max_memory_bytes: int
    added_at_s: float | None
    host_port: str = ""
    total_task_time_ms: float = 0.0  # totalDuration: run time of all its tasks since it started
    total_gc_time_ms: float = 0.0  # totalGCTime
    memory: RestExecutorMemory | None = None


@dataclass(frozen=True)
class BatchRef:
    """What a micro-batch job's description says: `<query>\\nid = ...\\nrunId = ...\\nbatch = N`."""

    query: str
    query_id: str
    run_id: str
    batch_id: int


@dataclass(frozen=True)
class RestJob:
    job_id: int
    status: str  # RUNNING, SUCCEEDED, FAILED, UNKNOWN
    description: str | None
    batch: BatchRef | None  # None for jobs that belong to no micro-batch
    stage_ids: tuple[int, ...]
    submitted_at_s: float | None
    completed_at_s: float | None


@dataclass(frozen=True)
class RestTask:
    task_id: int
    index: int  # the partition the task computed
    executor_id: str
    status: str  # SUCCESS, FAILED, KILLED, RUNNING
    run_time_ms: float  # executorRunTime
    input_records: int
    shuffle_read_records: int
    fetch_wait_ms: float
    shuffle_write_records: int
    output_records: int
    # CPU time of the task's thread in the executor JVM (executorCpuTime + executorDeserializeCpuTime);
    # Python workers' CPU is not in it.
    cpu_time_ns: float = 0.0
    launched_at_s: float | None = None
    duration_ms: float | None = None  # launch to finish (still growing while it runs)
    # shuffle bytes (`shuffleReadMetrics.remoteBytesRead` / `localBytesRead`, fetched from another
    # host's / this host's executors; `shuffleWriteMetrics.bytesWritten`): the placement's traffic
    remote_bytes_read: int = 0
    local_bytes_read: int = 0
    shuffle_write_bytes: int = 0
    jvm_gc_time_ms: float = 0.0  # jvmGcTime: the JVM's GC pauses while the task ran


@dataclass(frozen=True)
class RestStage:
    """One attempt of a stage, with its tasks (empty when the stage was skipped)."""

    stage_id: int
    attempt_id: int
    status: str  # COMPLETE, SKIPPED, ACTIVE, PENDING, FAILED
    name: str
    num_tasks: int
    submitted_at_s: float | None
    completed_at_s: float | None
    tasks: tuple[RestTask, ...]


# ---------------------------------------------------------------------------------------------
# Parsing (pure)

_DESCRIPTION = re.compile(
    r"^(?P<query>.*)\nid = (?P<id>\S+)\nrunId = (?P<run>\S+)\nbatch = (?P<batch>\d+)\s*$", re.DOTALL
)


def parse_batch_description(description: str | None) -> BatchRef | None:
    """The query and batch of a micro-batch job; None for any other description."""
    if not description:
        return None
    match = _DESCRIPTION.match(description)
    if match is None:
        return None
    return BatchRef(match["query"], match["id"], match["run"], int(match["batch"]))


def parse_time_s(text: str | None) -> float | None:
    """Spark's REST dates (`2026-11-22T05:04:11.123GMT`) as epoch seconds."""
    if not text:
        return None
    try:
        return datetime.strptime(text.replace("GMT", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()
    except ValueError:
        return None


def parse_applications(data: object) -> list[RestApplication]:
    return [RestApplication(str(a["id"]), str(a.get("name", ""))) for a in _items(data)]


def parse_executors(data: object) -> list[RestExecutor]:
    """Active executors only, the driver left out (it runs no tasks here: client mode)."""
    out: list[RestExecutor] = []
    for e in _items(data):
        if e.get("id") == "driver" or not e.get("isActive", True):
            continue
        host_port = str(e.get("hostPort", ""))
        out.append(RestExecutor(
            id=str(e["id"]), host=host_of(host_port), cores=int(e.get("totalCores", 0)), active=True,
            active_tasks=int(e.get("activeTasks", 0)), max_memory_bytes=int(e.get("maxMemory", 0)),
            added_at_s=parse_time_s(e.get("addTime")), host_port=host_port,
            total_task_time_ms=float(e.get("totalDuration", 0)), total_gc_time_ms=float(e.get("totalGCTime", 0)),
            memory=_parse_memory(e),
        ))
    return out


def host_of(host_port: str) -> str:
    """The host of Spark's `hostPort` (`127.0.0.2:41235`, `[::1]:41235`); "unknown" if empty."""
    host = host_port.rsplit(":", 1)[0] if ":" in host_port else host_port
    return host.removeprefix("[").removesuffix("]") or "unknown"


def _parse_memory(e: Mapping[str, Any]) -> RestExecutorMemory:
    peak = e.get("peakMemoryMetrics") or {}  # absent until the executor's first heartbeat

    def metric(name: str) -> int | None:
        value = peak.get(name)
        return int(value) if isinstance(value, (int, float)) else None

    tree = {name: metric(f"ProcessTree{name}RSSMemory") for name in ("JVM", "Python", "Other")}
    if not tree["JVM"]:  # 0: process-tree metrics are off (or not on procfs); the JVM has some RSS
        tree = dict.fromkeys(tree)
    return RestExecutorMemory(
        storage_used_bytes=int(e.get("memoryUsed", 0)), storage_total_bytes=int(e.get("maxMemory", 0)),
        peak_jvm_heap_bytes=metric("JVMHeapMemory"), peak_jvm_offheap_bytes=metric("JVMOffHeapMemory"),
        peak_jvm_rss_bytes=tree["JVM"], peak_python_rss_bytes=tree["Python"], peak_other_rss_bytes=tree["Other"],
    )


def parse_jobs(data: object) -> list[RestJob]:
    out: list[RestJob] = []
    for j in _items(data):
        description = j.get("description")
        out.append(RestJob(
            job_id=int(j["jobId"]), status=str(j.get("status", "UNKNOWN")), description=description,
            batch=parse_batch_description(description), stage_ids=tuple(int(s) for s in j.get("stageIds", ())),
            submitted_at_s=parse_time_s(j.get("submissionTime")), completed_at_s=parse_time_s(j.get("completionTime")),
        ))
    return out


def parse_stage_attempts(data: object) -> list[RestStage]:
    """`stages/{id}?details=true` answers a list of attempts; a single object is accepted too."""
    return [_parse_stage(s) for s in ([data] if isinstance(data, Mapping) else _items(data))]


def _parse_stage(s: Mapping[str, Any]) -> RestStage:
    tasks = s.get("tasks") or {}
    items = tasks.values() if isinstance(tasks, Mapping) else tasks
    return RestStage(
        stage_id=int(s["stageId"]), attempt_id=int(s.get("attemptId", 0)), status=str(s.get("status", "")),
        name=str(s.get("name", "")), num_tasks=int(s.get("numTasks", 0)),
        submitted_at_s=parse_time_s(s.get("submissionTime")), completed_at_s=parse_time_s(s.get("completionTime")),
        tasks=tuple(sorted((_parse_task(t) for t in items), key=lambda t: (t.index, t.task_id))),
    )


def _parse_task(t: Mapping[str, Any]) -> RestTask:
    m = t.get("taskMetrics") or {}
    shuffle_read = m.get("shuffleReadMetrics") or {}
    return RestTask(
        task_id=int(t.get("taskId", 0)), index=int(t.get("index", 0)), executor_id=str(t.get("executorId", "")),
        status=str(t.get("status", "")), run_time_ms=float(m.get("executorRunTime", 0)),
        input_records=int((m.get("inputMetrics") or {}).get("recordsRead", 0)),
        shuffle_read_records=int(shuffle_read.get("recordsRead", 0)),
        fetch_wait_ms=float(shuffle_read.get("fetchWaitTime", 0)),
        shuffle_write_records=int((m.get("shuffleWriteMetrics") or {}).get("recordsWritten", 0)),
        output_records=int((m.get("outputMetrics") or {}).get("recordsWritten", 0)),
        cpu_time_ns=float(m.get("executorCpuTime", 0)) + float(m.get("executorDeserializeCpuTime", 0)),
        launched_at_s=parse_time_s(t.get("launchTime")),
        duration_ms=float(t["duration"]) if isinstance(t.get("duration"), (int, float)) else None,
        remote_bytes_read=int(shuffle_read.get("remoteBytesRead", 0)),
        local_bytes_read=int(shuffle_read.get("localBytesRead", 0)),
        shuffle_write_bytes=int((m.get("shuffleWriteMetrics") or {}).get("bytesWritten", 0)),
        jvm_gc_time_ms=float(m.get("jvmGcTime", 0)),
    )


def _items(data: object) -> Sequence[Mapping[str, Any]]:
    if not isinstance(data, list):
        raise ValueError(f"expected a JSON list, got {type(data).__name__}")
    return data


# ---------------------------------------------------------------------------------------------
# The client


class SparkRestClient:
    """GETs against one driver's REST API, retried with exponential back-off on transient errors.

    An HTTP 4xx is not retried (the resource does not exist); connection errors, timeouts and 5xx
    are, `retries` times, waiting `backoff_s`, then twice that, and so on.
    """

    def __init__(self, base_url: str, timeout_s: float = 5.0, retries: int = DEFAULT_RETRIES,
                 backoff_s: float = DEFAULT_BACKOFF_S):
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s

    def get_json(self, path: str, params: Mapping[str, str] | None = None) -> JsonValue:
        url = f"{self.base_url}/{path.lstrip('/')}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        attempt = 0
        while True:
            try:
                with OPENER.open(url, timeout=self.timeout_s) as resp:
                    answer: JsonValue = json.load(resp)
                    return answer
            except urllib.error.HTTPError as exc:
                error = SparkRestError(url, f"HTTP {exc.code} {exc.reason}", status=exc.code)
                if exc.code < 500:
                    raise error from None
            except (urllib.error.URLError, OSError) as exc:
                reason = getattr(exc, "reason", exc)
                error = SparkRestError(url, f"no answer ({reason})", unreachable=True)
            except ValueError as exc:  # a half-started UI can answer HTML
                error = SparkRestError(url, f"invalid JSON ({exc})")
            if attempt >= self.retries:
                raise error
            delay = self.backoff_s * 2**attempt
            log.debug("spark_rest.retry", url=url, cause=error.cause, attempt=attempt + 1, delay_s=delay)
            time.sleep(delay)
            attempt += 1

    def application(self, name: str | None = None) -> RestApplication:
        """The app this driver runs (a driver's UI lists only its own; `name` picks if several)."""
        apps = parse_applications(self.get_json("applications"))
        if name is not None:
            apps = [a for a in apps if a.name == name] or apps
        if not apps:
            raise SparkRestError(f"{self.base_url}/applications", "no application listed")
        return apps[-1]

    def executors(self, app_id: str) -> list[RestExecutor]:
        return parse_executors(self.get_json(f"applications/{app_id}/executors"))

    def jobs(self, app_id: str) -> list[RestJob]:
        return parse_jobs(self.get_json(f"applications/{app_id}/jobs"))

    def stage_attempts(self, app_id: str, stage_id: int) -> list[RestStage]:
        """All attempts of one stage with their tasks; [] if the UI no longer retains it."""
        try:
            data = self.get_json(f"applications/{app_id}/stages/{stage_id}", {"details": "true"})
        except SparkRestError as exc:
            if exc.status == 404:
                return []
            raise
        return parse_stage_attempts(data)


def driver_rest(cfg: Config, app: AppConfig, client: redis.Redis | None = None, timeout_s: float | None = None,
                retries: int = DEFAULT_RETRIES, backoff_s: float = DEFAULT_BACKOFF_S) -> SparkRestClient:
    """The REST API of `app`'s driver, at the URL its agent published on registration
    (`protocol.keys.driver_key`), with the config's timeout unless given. The one place that says
    where a driver's UI is. No registration yet: an unreachable-driver error, as for a dead one.
    `client`: the Redis client to read it with (kept open); None: one opened for this call."""
    from sparkscale.redisconn import connect_as

    # None: a client of this process's identity (the daemon's, the CLI's or the lab's), for this call.
    reader = connect_as(cfg) if client is None else client
    try:
        raw: object = reader.get(driver_key(cfg.redis.key_prefix, app.name))
    except redis.RedisError as exc:
        raw = exc
    finally:
        if client is None:
            reader.close()
    return driver_rest_at(cfg, app, raw, timeout_s, retries, backoff_s)


def driver_rest_at(cfg: Config, app: AppConfig, raw: object, timeout_s: float | None = None,
                   retries: int = DEFAULT_RETRIES, backoff_s: float = DEFAULT_BACKOFF_S) -> SparkRestClient:
    """`driver_rest` from the reply to GET of `driver_key` (read in a caller's pipeline; an error
    reply: the registration is unreadable, as for a dead driver)."""
    if isinstance(raw, Exception):
        raise SparkRestError(f"(driver of {app.name})", f"its registration in Redis is unreadable: {raw}",
                             unreachable=True)
    url = None
    if isinstance(raw, (str, bytes)) and raw:
        try:
            url = object_at(load_json(raw), "").get("ui_url")
        except PROBLEMS:
            url = None
    if not url:
        raise SparkRestError(f"(driver of {app.name})", "its agent has not registered a REST URL", unreachable=True)
    refusal = driver_url_refusal(cfg, app.name, url)
    if refusal is not None:
        REFUSED_URLS.skip(driver_key(cfg.redis.key_prefix, app.name), escaped(str(url)),
                          f"driver REST URL refused: {refusal}")
        raise SparkRestError(f"(driver of {app.name})", f"its registered REST URL is refused: {refusal}",
                             unreachable=True)
    assert isinstance(url, str)  # url_refusal passes strings only
    return SparkRestClient(f"{url.rstrip('/')}/api/v1", cfg.spark.rest_timeout_s if timeout_s is None else timeout_s,
                           retries, backoff_s)
