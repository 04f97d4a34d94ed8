"""The standalone cluster as the master and its workers show it: which worker runs which executor.

The driver's REST API gives an executor's `hostPort`, but several workers can share a host (the
embedded environment puts both on loopback addresses, a real host may run two), and the master's
own `/json/` lists workers without their executors. So the view reads the master's `/json/`
(workers: `id`, `host`, `port`, `webuiaddress`, `state`, `cores`, `coresused`, `coresfree`,
`memory`, `memoryused`, `memoryfree`; `aliveworkers`) and then each ALIVE worker's `/json/` (its
running `executors`, each with `id` = the executor id, `appid`, `memory` in MB; there is no cores
or host field: the host is the worker asked). Field names are those of `JsonProtocol` in the Spark
4.3.0 jar (`writeWorkerInfo`, `writeWorkerState`, `writeExecutorRunner`; docs/internals.md).

One master request and one per ALIVE worker a read (`RecentView`: one read serves every app's
cycles, and is renewed off the cycle). A worker that does not answer is reported (`unreachable`),
not fatal; a master that does not answer is SparkUnreachable. Parsing is pure;
`fetch_cluster_view` is the only I/O.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from sparkscale.config import Config
from sparkscale.model.placement import FreeRoom, Placement, WorkerSlots, executor_order
from sparkscale.monitors.spark_master import SparkUnreachable, get_json

log = structlog.get_logger(__name__)

ALIVE = "ALIVE"
FIRST_READ_UNDER_WAY = "the cluster view's first read (begun as the daemon started) is under way"


@dataclass(frozen=True)
class ClusterWorker(FreeRoom):
    """One worker as the master lists it (memory in MB)."""

    id: str
    host: str
    port: int
    web_url: str
    state: str
    cores: int
    cores_used: int
    memory_mb: int
    memory_used_mb: int

    @property
    def alive(self) -> bool:
        return self.state == ALIVE



@dataclass(frozen=True)
class WorkerExecutor:
    """One executor a worker runs (`writeExecutorRunner`: no cores field)."""

    app_id: str
    executor_id: str
    memory_mb: int


@dataclass(frozen=True)
class ClusterView:
    workers: tuple[ClusterWorker, ...]
    alive_workers: int  # the master's own count
    executors: Mapping[str, tuple[WorkerExecutor, ...]] = field(default_factory=dict)  # ALIVE worker id -> them
    unreachable: Mapping[str, str] = field(default_factory=dict)  # ALIVE worker id -> why it gave no executors

    @property
    def alive(self) -> tuple[ClusterWorker, ...]:
        return tuple(w for w in self.workers if w.alive)

    @property
    def requests(self) -> int:
        """What the view cost: the master, then each ALIVE worker."""
        return 1 + len(self.alive)

    @property
    def applications(self) -> dict[str, dict[str, str]]:
        """Application id -> (executor id -> worker id), over the workers that answered."""
        out: dict[str, dict[str, str]] = {}
        for wid, runs in self.executors.items():
            for e in runs:
                out.setdefault(e.app_id, {})[e.executor_id] = wid
        return out

    def app_executors(self, app_id: str) -> dict[str, str]:
        """Executor id -> worker id, for one application."""
        return self.applications.get(app_id, {})

    def placement(self, app_id: str) -> Placement:
        """The app's share of the view, as the snapshot carries it (`sparkscale.model.placement`)."""
        slots = []
        memory = 0
        for worker in self.alive:
            if worker.id in self.unreachable:
                continue
            mine = [e for e in self.executors.get(worker.id, ()) if e.app_id == app_id]
            memory = max([memory, *(e.memory_mb for e in mine)])
            slots.append(WorkerSlots(worker.id, worker.host, worker.cores_free, worker.memory_free_mb,
                                     tuple(sorted((e.executor_id for e in mine), key=executor_order)),
                                     worker.cores, worker.memory_mb))
        return Placement(app_id, tuple(slots), tuple(sorted(self.unreachable)), memory)


def _int(data: Mapping[str, Any], key: str) -> int:
    value = data.get(key, 0)
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


def parse_workers(master: Mapping[str, Any]) -> tuple[tuple[ClusterWorker, ...], int]:
    """The master's `/json/`: its workers (dead ones too) and its count of alive ones."""
    workers = []
    for w in master.get("workers") or ():
        if not isinstance(w, Mapping) or not w.get("id"):
            continue
        cores = _int(w, "cores")
        memory = _int(w, "memory")
        # coresfree/memoryfree are there since Spark 3.x; derive them from the used figures otherwise.
        used = cores - _int(w, "coresfree") if "coresfree" in w else _int(w, "coresused")
        memory_used = memory - _int(w, "memoryfree") if "memoryfree" in w else _int(w, "memoryused")
        workers.append(ClusterWorker(
            id=str(w["id"]), host=str(w.get("host", "")), port=_int(w, "port"),
            web_url=str(w.get("webuiaddress", "")).rstrip("/"), state=str(w.get("state", "")), cores=cores,
            cores_used=used, memory_mb=memory, memory_used_mb=memory_used))
    alive = master.get("aliveworkers")
    count = int(alive) if isinstance(alive, int) else sum(w.alive for w in workers)
    return tuple(workers), count


def parse_worker_executors(worker: Mapping[str, Any]) -> tuple[WorkerExecutor, ...]:
    """A worker's `/json/`: the executors it runs now (`finishedexecutors` are left out)."""
    out = []
    for e in worker.get("executors") or ():
        if isinstance(e, Mapping) and "id" in e and e.get("appid"):
            out.append(WorkerExecutor(str(e["appid"]), str(e["id"]), _int(e, "memory")))
    return tuple(out)


def build_view(master: Mapping[str, Any], answers: Mapping[str, Mapping[str, Any] | str]) -> ClusterView:
    """The view from the master's `/json/` and, per ALIVE worker id, its `/json/` or why it gave none.
    A worker whose answer names another id (a worker restarted on the same address, not yet
    registered again) counts as unreachable: its executors are not the listed worker's."""
    workers, alive_count = parse_workers(master)
    executors: dict[str, tuple[WorkerExecutor, ...]] = {}
    unreachable: dict[str, str] = {}
    for worker in workers:
        if not worker.alive:
            continue
        answer = answers.get(worker.id, "not asked")
        if isinstance(answer, str):
            unreachable[worker.id] = answer
        elif answer.get("id") not in (None, worker.id):
            unreachable[worker.id] = f"{worker.web_url} answers as worker {answer.get('id')}"
        else:
            executors[worker.id] = parse_worker_executors(answer)
    return ClusterView(workers, alive_count, executors, unreachable)


def fetch_cluster_view(master_web_url: str, timeout_s: float) -> ClusterView:
    """One request to the master, one to each ALIVE worker. SparkUnreachable when the master does
    not answer; a worker that does not is in `unreachable`."""
    master = get_json(f"{master_web_url.rstrip('/')}/json/", timeout_s)
    if not isinstance(master, Mapping):
        raise SparkUnreachable(f"{master_web_url}/json/ answered with no JSON object")
    answers: dict[str, Mapping[str, Any] | str] = {}
    for worker in parse_workers(master)[0]:
        if not worker.alive:
            continue
        if not worker.web_url:
            answers[worker.id] = "the master lists no web UI address for it"
            continue
        try:
            answer = get_json(f"{worker.web_url}/json/", timeout_s)
            answers[worker.id] = answer if isinstance(answer, Mapping) else "answered with no JSON object"
        except SparkUnreachable as exc:
            answers[worker.id] = str(exc)
    return build_view(master, answers)


def _in_background(work: Callable[[], None]) -> None:
    threading.Thread(target=work, name="sparkscale-cluster-view", daemon=True).start()


class RecentView:
    """The last view read, shared by every app's cycle (the daemon is one process; its apps' cycles
    run on several threads): with N apps, the master and the workers are asked once per
    `max_age_s`, not N times, and the apps of one round see the same cluster (one placement plan
    is made from their snapshots together).

    A view older than `max_age_s` is read again in the background (`spawn`) while the cycles go
    on with the kept one, its age stated (issue 33: the cycle that happened to refresh it, and
    every other app's waiting on it, made the 10-app p99). A cycle reads the view itself only
    when none is kept: the first, after a failed read (a failed read is not kept, and drops the
    view it was to replace), for another master, or with `max_age_s` 0."""

    def __init__(self, spawn: Callable[[Callable[[], None]], None] = _in_background,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._kept: tuple[str, float, ClusterView] | None = None
        self._refreshing = False  # a background read is under way
        self._spawn = spawn
        self._monotonic = monotonic

    def prime(self, master_web_url: str, timeout_s: float) -> None:
        """Start the first read in the background (the daemon, as it starts): the apps' first cycles
        then go on without a view while it is under way, instead of all waiting on it (issue 33: up
        to 9 s with 10 apps starting together on a loaded machine)."""
        with self._lock:
            if (self._kept is not None and self._kept[0] == master_web_url) or self._refreshing:
                return
            self._refreshing = True
        self._spawn(functools.partial(self._refresh, master_web_url, timeout_s))

    def get(self, master_web_url: str, timeout_s: float, max_age_s: float) -> tuple[ClusterView | None, bool, float]:
        """The view, whether this call read it (False: kept), and its age in seconds; no view (None)
        while the first read, begun by `prime`, is under way."""
        with self._lock:
            kept = self._kept
            if max_age_s > 0 and self._refreshing and (kept is None or kept[0] != master_web_url):
                return None, False, 0.0
            if kept is None or kept[0] != master_web_url or max_age_s <= 0:
                view = fetch_cluster_view(master_web_url, timeout_s)
                self._kept = (master_web_url, self._monotonic(), view)
                return view, True, 0.0
            age_s = self._monotonic() - kept[1]
            renew = age_s >= max_age_s and not self._refreshing
            self._refreshing = self._refreshing or renew
        if renew:  # outside the lock: the read takes it when it ends
            self._spawn(functools.partial(self._refresh, master_web_url, timeout_s))
        return kept[2], False, age_s

    def _refresh(self, master_web_url: str, timeout_s: float) -> None:
        """The background read: the new view replaces the kept one; a failure drops it."""
        view: ClusterView | None = None
        try:
            view = fetch_cluster_view(master_web_url, timeout_s)
        except SparkUnreachable as exc:
            log.warning("monitor.cluster_unreachable", master=master_web_url, error=str(exc), read="background")
        except Exception as exc:  # a bug: logged; the next cycle reads the view itself
            log.error("monitor.cluster_view_failed", master=master_web_url, error=repr(exc), exc_info=exc)
        finally:
            with self._lock:
                self._refreshing = False
                if view is not None:
                    self._kept = (master_web_url, self._monotonic(), view)
                elif self._kept is not None and self._kept[0] == master_web_url:
                    self._kept = None
        if view is not None and view.unreachable:
            log.warning("monitor.worker_unreachable", workers=dict(view.unreachable), read="background")


RECENT = RecentView()


def cluster_extension(cfg: Config, app_id: str) -> dict[str, Any] | None:
    """A snapshot's `extensions["cluster"]` for the app (`sparkscale.model.placement`), with what it cost
    this cycle (`requests`: 0 when the view is a kept one, `RecentView`) and its age (`age_s`); None
    when `loop.cluster_view` is off. A master that does not answer gives an `error`, not a failed
    cycle: the view serves the spread rule, placement and the capacity guard, which then hold."""
    if not cfg.loop.cluster_view:
        return None
    try:
        view, fetched, age_s = RECENT.get(cfg.spark.master_web_url, cfg.spark.rest_timeout_s,
                                          cfg.loop.cluster_view_max_age_s)
    except SparkUnreachable as exc:
        log.warning("monitor.cluster_unreachable", app_id=app_id, error=str(exc))
        return {**Placement(app_id, error=str(exc)).to_extension(), "requests": 1, "age_s": 0.0}
    if view is None:
        return {**Placement(app_id, error=FIRST_READ_UNDER_WAY).to_extension(), "requests": 0, "age_s": 0.0}
    if view.unreachable and fetched:
        log.warning("monitor.worker_unreachable", app_id=app_id, workers=dict(view.unreachable))
    return {**view.placement(app_id).to_extension(), "requests": view.requests if fetched else 0,
            "age_s": round(age_s, 3)}


def prime_cluster_view(cfg: Config) -> None:
    """Begin the view's first read off the cycles (`RecentView.prime`), where a view is kept at all."""
    if cfg.loop.cluster_view and cfg.loop.cluster_view_max_age_s > 0:
        RECENT.prime(cfg.spark.master_web_url, cfg.spark.rest_timeout_s)
