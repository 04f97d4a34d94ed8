"""EDRP's downtime per kind of action, measured on this cluster (Cardellini et al., Appendix A.1:
t_D per migration, scale-out and scale-in; `policies/placement/downtime.py` holds the model).

Why: the model's defaults (an addition stalls nothing, a decommission 6 s, a restart 20 s) are
guesses for a cluster the daemon has not watched. Here each executor change the daemon carried
out is followed: the stall an operator sees is the longest micro-batch that ended from the
action's start until `horizon_s` after it ended, less the median batch before it (a batch that
ran while executors came and went, and state reloaded, is where the query stood still). The
model's own terms are taken off when it is read (t_syn, and a removal's state reload, which the
model adds by itself), so that `from_measured` puts the rest in place of the default. A batch
that ended before the action started is not its stall (the previous action's, still in the window).
The samples are the cluster's, not one daemon's: the store keeps them (store/redis_queries.py: RedisDowntime), so that a
restarted daemon or a new leader plans with what was measured, not the defaults.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass

import redis
import structlog

from sparkscale.model.plan import Action
from sparkscale.model.snapshot import Snapshot
from sparkscale.model.snapshot_merge import query_extensions
from sparkscale.policies.placement.downtime import DowntimeModel, from_measured
from sparkscale.store.base import DowntimeStore
from sparkscale.store.redis_queries import KEEP

log = structlog.get_logger(__name__)



def measured_kind(action: Action) -> str | None:
    """The model's kind of an action the daemon carried out (None: not an executor change it models;
    a move adds and removes at once, which no single kind holds)."""
    if action.type == "scale_executors" and action.from_ is not None and action.to is not None:
        return "executor_add" if action.to > action.from_ else "executor_remove" if action.to < action.from_ else None
    if action.type == "set_parallelism":
        return "restart"
    return None


@dataclass
class _Watch:
    app: str
    kind: str
    started_at: float  # epoch s
    ended_at: float
    baseline_s: float  # median batch before the action
    state_share_bytes: float  # state the removed executors held (removals), for the reload term
    longest_s: float = 0.0


class DowntimeTracker:
    """Follows each executor change into the snapshots after it; `model` is the measured model."""

    def __init__(self, horizon_s: float, store: DowntimeStore | None = None) -> None:
        self.horizon_s = horizon_s
        self.store = store  # None: in memory only
        self._loaded = store is None
        self._watches: list[_Watch] = []
        self._samples: dict[str, deque[tuple[float, float]]] = {}  # kind -> (stall s, reloaded bytes)
        self._baseline: dict[str, tuple[float, float]] = {}  # app -> (median batch s, state bytes)
        self._per_app: dict[str, dict[str, deque[float]]] = {}  # app -> kind -> stall s (this daemon's)
        self._lock = threading.Lock()

    def _load(self) -> None:
        """The stored samples ahead of those measured since the start (once; retried while Redis fails)."""
        if self._loaded or self.store is None:
            return
        try:
            stored = self.store.load()
        except redis.RedisError as exc:
            log.warning("downtime.load_failed", error=str(exc))
            return
        for kind, values in stored.items():
            mine = list(self._samples.get(kind, ()))
            self._samples[kind] = deque(values + mine, maxlen=KEEP)
        self._loaded = True

    def action_done(self, app: str, action: Action, started_at: float, ended_at: float) -> None:
        """`action` of `app` ran from `started_at` to `ended_at` (epoch s)."""
        kind = measured_kind(action)
        with self._lock:
            baseline = self._baseline.get(app)
            if kind is None or baseline is None:
                return  # no batch seen before it: nothing to measure against
            removed = max((action.from_ or 0) - (action.to or 0), 0) if kind == "executor_remove" else 0
            share = baseline[1] * removed / action.from_ if removed and action.from_ else 0.0
            self._watches.append(_Watch(app, kind, started_at, ended_at, baseline[0], share))

    def observe(self, app: str, snapshot: Snapshot) -> None:
        """One cycle's merged snapshot of `app`: its batches feed the open watches and, outside them,
        the baseline."""
        longest, ended_at, state = _progress_figures(snapshot)
        with self._lock:
            mine = [w for w in self._watches if w.app == app]
            for w in mine:
                after = ended_at > w.started_at if ended_at is not None else snapshot.taken_at >= w.started_at
                if longest is not None and after:
                    w.longest_s = max(w.longest_s, longest)
            if not mine and snapshot.batch_duration_s is not None:
                self._baseline[app] = (snapshot.batch_duration_s, state)
            for w in [w for w in mine if snapshot.taken_at > w.ended_at + self.horizon_s]:
                self._watches.remove(w)
                self._close(w)

    def _close(self, w: _Watch) -> None:
        self._load()  # the stored samples first, so that this one is not read back twice
        stall_s = max(w.longest_s - w.baseline_s, 0.0)
        self._samples.setdefault(w.kind, deque(maxlen=KEEP)).append((stall_s, w.state_share_bytes))
        self._per_app.setdefault(w.app, {}).setdefault(w.kind, deque(maxlen=KEEP)).append(stall_s)
        if self.store is not None and self._loaded:
            try:
                self.store.add(w.kind, stall_s, w.state_share_bytes, w.app)
            except redis.RedisError as exc:  # kept in memory; the next daemon plans without it
                log.warning("downtime.store_failed", kind=w.kind, error=str(exc))
        log.info("downtime.measured", app=w.app, kind=w.kind, stall_s=round(stall_s, 3),
                 longest_batch_s=round(w.longest_s, 3), median_batch_before_s=round(w.baseline_s, 3),
                 samples=len(self._samples[w.kind]))

    def app_stalls(self, app: str) -> dict[str, tuple[float, ...]]:
        """The stalls measured for `app`'s own changes, per kind (oldest first; since this daemon started)."""
        with self._lock:
            return {kind: tuple(values) for kind, values in self._per_app.get(app, {}).items()}

    def samples(self, base: DowntimeModel) -> dict[str, list[float]]:
        """Each kind's measured stalls less what `base` adds by itself (t_syn; a removal's reload)."""
        with self._lock:
            self._load()
            return {kind: [max(stall - base.sync_s - state / base.reload_bytes_per_s, 0.0) for stall, state in values]
                    for kind, values in self._samples.items()}

    def model(self, base: DowntimeModel) -> DowntimeModel:
        """`base` with the median of each measured kind in place of its value."""
        return from_measured(self.samples(base), base)


def _progress_figures(snapshot: Snapshot) -> tuple[float | None, float | None, float]:
    """The longest batch in the window (over the app's queries), when it ended (None: not reported),
    and the state bytes the queries hold."""
    parts = [ext.get("progress") or {} for ext in query_extensions(snapshot).values()]
    longest = [(float(v), p.get("longest_batch_ended_at_s")) for p in parts
               if isinstance(v := p.get("longest_batch_s"), (int, float))]
    state = sum(float(v) for p in parts if isinstance(v := p.get("state_memory_bytes"), (int, float)))
    if not longest:
        return None, None, state
    duration, ended = max(longest, key=lambda x: x[0])
    return duration, (float(ended) if isinstance(ended, (int, float)) else None), state
