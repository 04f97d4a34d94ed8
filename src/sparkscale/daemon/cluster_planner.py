"""The cluster-wide step of the loop: the placement policy over every app this daemon leads.

It also keeps what the capacity guard and the quotas need across apps: the cores each app asked for
and has not got yet (`claimed_elsewhere`), and the cores and executor memory each holds or asked for
(`held_elsewhere`, policies/quotas.py).

Each app's cycle hands in its snapshots (`observe`) and asks for the current cluster plan (`plan`),
of which the planner adds that app's part to its own decision (`policies/placement/apply.py`). The
plan is recomputed at most once per `placement.every_cycles` x `loop.interval_s`, from the latest
snapshots of the apps, so apps cycling in turn share one decision rather than each making its own
(OTD's one move per cycle is one move for the cluster). Snapshots older than two windows are left
out: an app that stopped answering is not planned from stale figures. `spark-default` plans nothing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

import redis
import structlog

from sparkscale.config import AppConfig, Config
from sparkscale.daemon.downtime_tracker import DowntimeTracker
from sparkscale.model.plan import Action
from sparkscale.model.snapshot import Snapshot
from sparkscale.policies.ds2 import capacity_task_overhead
from sparkscale.policies.placement.base import get_placement
from sparkscale.policies.placement.build import cluster_model
from sparkscale.policies.placement.downtime import DowntimeModel
from sparkscale.policies.placement.model import PlacementPlan
from sparkscale.policies.placement.spark_default import SPARK_DEFAULT
from sparkscale.store.redis_queries import RedisDowntime

log = structlog.get_logger(__name__)


class ClusterPlanner:
    def __init__(self, cfg: Config, on_plan: Callable[[PlacementPlan], None] | None = None,
                 redis_client: redis.Redis | None = None) -> None:
        self.cfg = cfg
        self._snapshots: dict[str, list[Snapshot]] = {}
        self._starting_cores: dict[str, int] = {}
        self._held: dict[str, tuple[int, int]] = {}  # app -> (cores, executor memory MB)
        self._plan: PlacementPlan | None = None
        self._planned_at: float | None = None
        self._lock = threading.Lock()
        self.on_plan = on_plan  # called with each new plan (metrics); None: nothing
        # the stalls of the executor changes carried out, for EDRP's downtime model
        # (kept in Redis where there is one: the samples are the cluster's, not this daemon's)
        store = None if redis_client is None else RedisDowntime(redis_client, cfg.redis.key_prefix)
        self.downtime = DowntimeTracker(horizon_s=2 * cfg.loop.window_s, store=store)

    def configure(self, cfg: Config) -> None:
        """A reloaded config: the next `plan` call plans afresh with it."""
        with self._lock:
            self.cfg, self._plan, self._planned_at = cfg, None, None

    def observe(self, app: AppConfig, merged: Snapshot, led: Sequence[Snapshot] | None) -> None:
        """One app's cycle: its executors still starting (from the merged snapshot), and, when this
        daemon leads it (`led`: its query snapshots), its place in the next plan."""
        requested = (merged.extensions.get("app") or {}).get("requested_executors")
        starting = max(requested - len(merged.executors), 0) if isinstance(requested, int) else 0
        self.downtime.observe(app.name, merged)
        executors = max(len(merged.executors), requested if isinstance(requested, int) else 0)
        with self._lock:
            self._starting_cores[app.name] = starting * app.executor_cores
            self._held[app.name] = (executors * app.executor_cores, executors * app.executor_memory_mb)
            if led is None:
                self._snapshots.pop(app.name, None)
            else:
                self._snapshots[app.name] = list(led)

    def claimed_elsewhere(self, app: str) -> int:
        """Cores other managed apps asked for that have not started yet (the capacity guard's input)."""
        with self._lock:
            return sum(cores for name, cores in self._starting_cores.items() if name != app)

    def held_elsewhere(self, app: str) -> tuple[int, int]:
        """(cores, executor memory MB) the other managed apps hold or asked for (the quotas' input)."""
        with self._lock:
            others = [held for name, held in self._held.items() if name != app]
        return sum(c for c, _m in others), sum(m for _c, m in others)

    def change_costs(self, app: str, strategy: str) -> dict[str, tuple[float, ...]]:
        """`app`'s measured stalls per kind of change as the decision history names them
        (policies/change_costs.py): a repartition is a migration with `strategy`."""
        return {f"migration_{strategy}" if kind == "restart" else kind: values
                for kind, values in self.downtime.app_stalls(app).items()}

    def action_done(self, app: str, action: Action, started_at: float, ended_at: float) -> None:
        """An executor change of `app` ran from `started_at` to `ended_at` (epoch s): a sample of
        the stall EDRP's downtime model takes (daemon/downtime_tracker.py)."""
        self.downtime.action_done(app, action, started_at, ended_at)

    def forget(self, app: str) -> None:
        """The app is no longer managed: out of the next plan and of the claims."""
        with self._lock:
            self._snapshots.pop(app, None)
            self._starting_cores.pop(app, None)
            self._held.pop(app, None)

    def plan(self, now: float) -> PlacementPlan | None:
        """The cluster plan in force at `now` (epoch seconds), recomputed when due."""
        placement = self.cfg.placement
        if placement.name == SPARK_DEFAULT:
            return None
        with self._lock:
            every_s = placement.every_cycles * self.cfg.loop.interval_s
            if self._planned_at is not None and now - self._planned_at < every_s * 0.999:
                return self._plan
            fresh = [s for snaps in self._snapshots.values() for s in snaps
                     if now - s.taken_at <= 2 * self.cfg.loop.window_s]
            started = time.monotonic()
            model = cluster_model(fresh, {a.name: a for a in self.cfg.apps}, placement.worker_selection_policy,
                                  placement.host_cpus, capacity_task_overhead(self.cfg.policy))
            settings = placement.section(placement.name) if placement.section_model(placement.name) else None
            # EDRP: what this cluster measured
            if settings is not None and isinstance(getattr(settings, "downtime", None), DowntimeModel):
                settings = settings.model_copy(update={"downtime": self.downtime.model(settings.downtime)})
            try:
                plan = get_placement(placement.name).place(model, settings) if model.workers else None
            except (ValueError, ArithmeticError) as exc:  # a policy's arithmetic on extreme figures
                log.error("placement.failed", policy=placement.name, error=str(exc))
                plan = None
            self._plan, self._planned_at = plan, now
        if plan is not None:
            log.info("placement.plan", policy=plan.policy, reason=plan.reason, apps=len(model.apps),
                     workers=len(model.workers), moves=[f"{m.key} {m.source}->{m.target}" for m in plan.moves],
                     counts={c.app: c.executors_target for c in plan.counts}, objective=plan.objective,
                     figures=dict(plan.figures), duration_s=round(time.monotonic() - started, 4))
            for warning in plan.warnings:
                log.warning("placement.warning", policy=plan.policy, kind=warning.kind, message=warning.message,
                            figures=dict(warning.figures))
            if self.on_plan is not None:
                self.on_plan(plan)
        return plan
