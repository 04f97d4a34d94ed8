"""Prometheus metrics of the daemon, served over HTTP (GET /metrics).

Each DaemonMetrics owns its registry, never prometheus_client's global one: several daemons (or
tests) in one process would otherwise clash on "Duplicated timeseries" and see each other's counts.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING
from wsgiref.simple_server import WSGIServer

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, start_http_server

if TYPE_CHECKING:
    from sparkscale.policies.placement.model import PlacementPlan

log = structlog.get_logger(__name__)

# A cycle is one REST round to the master and driver at best (~50 ms) and waits for an action's
# acknowledgement at worst (tens of seconds).
CYCLE_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0)


class DaemonMetrics:
    """The daemon's counters and gauges, labelled by app; thread-safe (cycles run on scheduler threads)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        # Counter names without "_total": prometheus_client appends it (and a *_created series).
        self.cycles = Counter("sparkscale_cycles", "MAPE cycles, by result.", ["app", "result"], registry=r)
        self.decisions = Counter("sparkscale_decisions", "Policy decisions (guarded plans), by whether they change "
                                 "anything.", ["app", "policy", "changes"], registry=r)
        self.actions = Counter("sparkscale_actions", "Actions, by type and outcome.", ["app", "type", "outcome"],
                               registry=r)
        self.cycle_duration = Histogram("sparkscale_cycle_duration_seconds", "Duration of one MAPE cycle.", ["app"],
                                        buckets=CYCLE_BUCKETS, registry=r)
        # Not a cycle result: the write never ends its cycle, which is counted by its own result.
        self.decision_write_failures = Counter("sparkscale_decision_write_failures", "Decisions that start "
                                               "nothing (no_change, dry_run), written off the cycle, that the "
                                               "action log refused.", ["app"], registry=r)
        self.executors = Gauge("sparkscale_executors", "Active executors of the app.", ["app"], registry=r)
        self.parallelism = Gauge("sparkscale_parallelism", "Partitions (parallelism) per operator.",
                                 ["app", "operator"], registry=r)
        self.leader = Gauge("sparkscale_leader", "1 when this daemon leads the app, 0 on standby.", ["app"],
                            registry=r)
        self.blocked = Gauge("sparkscale_blocked_actions", "Unexpired blocklist entries of the app.", ["app"],
                             registry=r)
        self.attention = Gauge("sparkscale_migrations_needing_attention", "1 while the app's last migration "
                               "needs the operator (`sparkscale migrate --resume ID` or `--abort ID`), else 0.",
                               ["app"], registry=r)
        self.short = Gauge("sparkscale_cluster_short_executors", "Executors the app's last plan needed beyond "
                           "what the cluster could start (its scale-up was cut by that many), else 0.", ["app"],
                           registry=r)
        self.scalability = Gauge("sparkscale_observed_scalability", "The share of the expected capacity gain the "
                                 "app's last judged scale-up brought (1 = as expected; under "
                                 "guards.ineffective_scale_up_fraction, further scale-ups are held).", ["app"],
                                 registry=r)
        self.placement_moves = Counter("sparkscale_placement_moves", "Executor moves the placement policy planned.",
                                       ["policy"], registry=r)
        self.placement_short = Gauge("sparkscale_placement_short", "1 while the placement policy's last plan "
                                     "warned that the cluster cannot hold what the apps need, else 0.",
                                     ["policy"], registry=r)
        self.placement_objective = Gauge("sparkscale_placement_objective", "The placement policy's objective for "
                                         "its last plan (EDRP's F), NaN when it has none.", ["policy"], registry=r)
        self._by_app = (self.cycles, self.decisions, self.actions, self.cycle_duration, self.decision_write_failures,
                        self.executors, self.parallelism, self.leader, self.blocked, self.attention, self.short,
                        self.scalability)
        self._operators: dict[str, set[str]] = {}
        self._lock = threading.Lock()
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    # -- updates ----------------------------------------------------------------------------------

    def count_cycle(self, app: str, result: str) -> None:
        self.cycles.labels(app=app, result=result).inc()

    def observe_cycle(self, app: str, duration_s: float) -> None:
        self.cycle_duration.labels(app=app).observe(duration_s)

    def count_decision_write_failure(self, app: str) -> None:
        """From the action log's writer (daemon/decision_writer.py), when a decision's write fails."""
        self.decision_write_failures.labels(app=app).inc()

    def count_decision(self, app: str, policy: str, changes: bool) -> None:
        self.decisions.labels(app=app, policy=policy, changes="true" if changes else "false").inc()

    def count_action(self, app: str, type: str, outcome: str) -> None:
        self.actions.labels(app=app, type=type, outcome=outcome).inc()

    def set_executors(self, app: str, n: int) -> None:
        self.executors.labels(app=app).set(n)

    def set_parallelism(self, app: str, by_operator: Mapping[str, int]) -> None:
        """Replace the app's operator series: an operator no longer in the plan stops being reported."""
        with self._lock:
            for gone in self._operators.get(app, set()) - set(by_operator):
                self.parallelism.remove(app, gone)
            # Current operators are set in place, never removed and re-added: a scrape always sees them.
            for operator, n in by_operator.items():
                self.parallelism.labels(app=app, operator=operator).set(n)
            self._operators[app] = set(by_operator)

    def set_leader(self, app: str, leader: bool) -> None:
        self.leader.labels(app=app).set(1 if leader else 0)

    def set_blocked(self, app: str, n: int) -> None:
        self.blocked.labels(app=app).set(n)

    def set_placement(self, plan: PlacementPlan) -> None:
        """From each new cluster placement plan (`daemon/cluster_planner.py`)."""
        self.placement_moves.labels(policy=plan.policy).inc(len(plan.moves))
        self.placement_short.labels(policy=plan.policy).set(
            1 if any(w.kind in ("short_of_resources", "infeasible") for w in plan.warnings) else 0)
        self.placement_objective.labels(policy=plan.policy).set(
            float("nan") if plan.objective is None else plan.objective)

    def set_cluster_short(self, app: str, executors: int) -> None:
        self.short.labels(app=app).set(executors)

    def set_observed_scalability(self, app: str, ratio: float) -> None:
        """From a decision whose ineffective-scaling guard read a judged scale-up (policies/ineffective.py)."""
        self.scalability.labels(app=app).set(ratio)

    def set_migrations_needing_attention(self, app: str, n: int) -> None:
        """From the app's migration journal, each cycle (leader and standbys alike)."""
        self.attention.labels(app=app).set(n)

    def forget_app(self, app: str) -> None:
        """Drop every series of `app` (a reload removed it), so it does not linger with its last values."""
        with self._lock:
            for metric in self._by_app:
                metric.remove_by_labels({"app": app})
            self._operators.pop(app, None)

    # -- exposition -------------------------------------------------------------------------------

    def render(self) -> bytes:
        """The text exposition format, as GET /metrics returns it."""
        return generate_latest(self.registry)

    def serve(self, host: str, port: int) -> int:
        """Serve GET /metrics on host:port in a daemon thread; return the bound port (port 0 = a free one)."""
        if self._server is not None:
            raise RuntimeError("metrics server already running; close() it first")
        self._server, self._thread = start_http_server(port, addr=host, registry=self.registry)
        bound = int(self._server.server_address[1])
        log.debug("metrics.serving", host=host, port=bound)
        return bound

    def close(self) -> None:
        """Stop the HTTP server, if serving, and free its port. Safe to call twice."""
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is None:
            return
        server.shutdown()  # returns once serve_forever has exited
        server.server_close()
        if thread is not None:
            thread.join(timeout=5)
