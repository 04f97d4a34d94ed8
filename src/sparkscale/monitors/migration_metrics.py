"""The seed's migration metrics that need the query's progress (Shukla & Simmhan §4): restore (first
output), catch-up, recovery and rate stabilisation, each in seconds from the migration request.

They come from the agent's per-batch progress history (`P{app}:progress:{query}:history`, one entry
per batch: run id, input rows, each source's end and latest positions, when it was published; each
a `BatchPoint`, batch_points.py; the agent's idle samples there are no batches and are left out),
read from before the request on. The agent samples every batch
whatever the runner is doing, so the figures follow the real timeline (a catch-up reached while the
runner was still in `restored` is dated there) even when `measure_after` reads them once the
migration ended. The pure part is `follow_up` (batches + the journal's times and marks -> figures);
the phases' own figures (drain, capture, rebalance) are the journal's
(`sparkscale.actuators.migration.phase_metrics`).

Times mix clocks: the request and the phases are the daemon's, a batch's `published_at` the driver's,
history entry ids Redis's; on one host they agree, across hosts their skew enters every figure.
"""

from __future__ import annotations

import bisect
import itertools
import statistics
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import redis
import structlog
from pydantic import JsonValue

from sparkscale.config import AppConfig, Config
from sparkscale.monitors.batch_points import BatchPoint
from sparkscale.monitors.progress_reports import ProgressReport
from sparkscale.protocol.keys import progress_history_key
from sparkscale.redisconn import stream_entries

if TYPE_CHECKING:
    from sparkscale.model.journal import Journal

log = structlog.get_logger(__name__)

LOOKBACK_S = 120.0  # history read from this long before the request: the old run's batches and positions
CLOCK_MARGIN_S = 10.0  # history read this much before a daemon-clock time (the driver's and Redis's may differ)
RATE_WINDOW_S = 10.0  # shortest window for a rate: a micro-batch source advances in steps, one per batch
GRID_STEP_S = 1.0  # rates are compared once a second


@dataclass(frozen=True)
class MigrationTimeline:
    """What the metrics need of a migration's journal (`timeline_of`)."""

    requested_at_s: float
    new_run_id: str | None  # the restarted run, as the agent's start answer named it
    old_run_id: str | None  # the query's run at the request (the one stopped)
    new_run_since_s: float  # the old run had stopped by then: a later batch of another run is the new one
    released_at_s: float | None  # the migration stopped holding input back: the later of restart and resume
    input_at_request: int | None  # records arrived at the request (app input streams); None: not known app-wide
    input_at_release: int | None  # records arrived at the release

    def in_new_run(self, point: BatchPoint) -> bool:
        if self.new_run_id:
            return point.run_id == self.new_run_id
        if self.old_run_id and point.run_id == self.old_run_id:
            return False
        return point.committed_at_s >= self.new_run_since_s


def timeline_of(journal: Journal) -> MigrationTimeline:
    marks, phases = journal.marks, journal.phases
    released = [(phases[p], position) for p, position in (
        ("restarted", marks.get("input_at_restart")), ("resumed", marks.get("input_at_resume"))) if p in phases]
    at, position = max(released, key=lambda r: r[0]) if released else (None, None)
    return MigrationTimeline(
        requested_at_s=journal.requested_at, new_run_id=marks.get("run_id"), old_run_id=marks.get("run_id_at_request"),
        # After the repartition: a run of one batch that finished an interrupted batch before it
        # (agent.queries.finish_interrupted) is neither the old run nor the new one.
        new_run_since_s=phases.get("repartitioned", phases.get("stopped", journal.requested_at)), released_at_s=at,
        input_at_request=marks.get("input_at_request"), input_at_release=position)


def first_output(points: list[BatchPoint], timeline: MigrationTimeline) -> BatchPoint | None:
    """Restore's end (§4 (1), "the first message seen at a sink"): the new run's first batch with input."""
    return next((p for p in _by_commit(points) if p.rows > 0 and timeline.in_new_run(p)), None)


def first_covering(points: list[BatchPoint], position: int) -> float | None:
    """When the output first covered every record up to `position` (a batch's end offsets reached it)."""
    return next((p.committed_at_s for p in _by_commit(points)
                 if p.processed_position is not None and p.processed_position >= position), None)


def arrived_at(points: list[BatchPoint], at_s: float) -> int | None:
    """Records arrived at `at_s`, interpolated between the sources' reported latest offsets (None
    outside the reports, or when the sources do not count records)."""
    knots = [(p.started_at_s, float(p.arrived_position)) for p in points if p.arrived_position is not None]
    value = _interp(sorted(knots), at_s)
    return None if value is None else int(value)


@dataclass(frozen=True)
class Stabilisation:
    """Rate stabilisation (§4 (6)): the start of the first `window_s` during which the output rate
    stayed within the tolerance of the expected rate; `basis` says what the expected rate is."""

    at_s: float | None
    basis: str | None  # "arrivals" | "backlog" | "pre_migration_output"
    reason: str | None = None  # why it cannot be measured at all


def stabilisation(points: list[BatchPoint], timeline: MigrationTimeline, start_s: float, tolerance: float,
                  window_s: float) -> Stabilisation:
    """Output rate: the new run's processed positions per second where its sources count records, else
    its input rows per second (Spark counts a source read twice in one query twice in `numInputRows`,
    docs/internals.md). Expected rate, best first: the arrival rate (sources' latest offsets), the
    output rate plus the backlog's change, else the output rate over the `LOOKBACK_S` before the
    request. Rates over max(`RATE_WINDOW_S`, 3 batch intervals), once a second from `start_s` (the
    first output)."""
    new = [p for p in _by_commit(points) if timeline.in_new_run(p)]
    positions = bool(new) and all(p.processed_position is not None for p in new)
    out_knots, rows = [], 0
    for p in new:
        rows += p.rows
        position = p.processed_position if positions else rows  # `positions`: none is None
        out_knots.append((p.committed_at_s, float(rows if position is None else position)))
    # The first output is a burst (what waited through the migration) at its commit: the window that
    # starts there counts it, as §4 (6) and Fig. 9 place stabilisation after restore and recovery.
    before = _position_before(points, timeline, new[0]) if positions and new else 0.0

    def out_rate(t: float) -> float | None:
        if before is not None and t - rate_window_s <= start_s:
            end = _interp(out_knots, t)
            return None if end is None else (end - before) / rate_window_s
        return _rate(out_knots, t, rate_window_s)

    expected_knots: list[tuple[float, float]] | None = None
    constant: float | None = None
    if new and all(p.arrived_position is not None for p in new):
        basis = "arrivals"
        expected_knots = sorted((p.started_at_s, float(p.arrived_position or 0)) for p in points
                                if p.arrived_position is not None)
    elif new and all(p.backlog_records is not None for p in new):
        basis = "backlog"
        expected_knots = [(t, r + (p.backlog_records or 0)) for (t, r), p in zip(out_knots, new, strict=False)]
    else:
        basis = "pre_migration_output"
        constant = _rate_before(points, timeline)
        if constant is None:
            return Stabilisation(None, None, "the sources report neither positions nor backlog, and no output "
                                 f"rate was seen in the {LOOKBACK_S:g} s before the request")
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(out_knots)]
    rate_window_s = max(RATE_WINDOW_S, 3 * statistics.median(gaps)) if gaps else RATE_WINDOW_S
    end_s = min(out_knots[-1][0], expected_knots[-1][0] if expected_knots else float("inf")) if out_knots else start_s
    run_from: float | None = None
    t = start_s + rate_window_s
    while t <= end_s:
        out = out_rate(t)
        expected = constant if expected_knots is None else _rate(expected_knots, t, rate_window_s)
        ok = (out is not None and expected is not None
              and (abs(out - expected) <= tolerance * expected if expected > 0 else out == 0))
        if not ok:
            run_from = None
        elif run_from is None:
            run_from = t - rate_window_s  # the window whose rate first agreed
        if run_from is not None and t - run_from >= window_s:
            return Stabilisation(run_from, basis)
        t += GRID_STEP_S
    return Stabilisation(None, basis)


@dataclass(frozen=True)
class FollowUp:
    """The figures of `follow_up`; `complete` once nothing more can be learnt by waiting."""

    restore_s: float | None
    catch_up_s: float | None
    recovery_s: float | None
    stabilization_s: float | None
    stabilization_basis: str | None
    not_measured: dict[str, str] = field(default_factory=dict)  # figure -> why it cannot be measured
    complete: bool = False

    def figures(self) -> dict[str, JsonValue]:
        out: dict[str, Any] = {"catch_up_s": self.catch_up_s, "recovery_s": self.recovery_s,
                               "stabilization_s": self.stabilization_s,
                               "stabilization_basis": self.stabilization_basis}
        if self.restore_s is not None:
            out["restore_s"] = self.restore_s
        if self.not_measured:
            out["not_measured"] = "; ".join(f"{k}: {v}" for k, v in self.not_measured.items())
        return out


def follow_up(timeline: MigrationTimeline, points: list[BatchPoint], tolerance: float,
              window_s: float) -> FollowUp:
    """Restore, catch-up, recovery and stabilisation from the batches seen so far, each from the request."""
    req = timeline.requested_at_s
    notes: dict[str, str] = {}
    first = first_output(points, timeline)
    counted = any(p.processed_position is not None for p in points)
    no_positions = ("the query's sources report no record positions (kinds: "
                    f"{', '.join(sorted({k for p in points for k in p.source_kinds})) or 'none'})")

    def covered_s(figure: str, position: int | None, at_s: float | None) -> float | None:
        if points and not counted:
            notes[figure] = no_positions
            return None
        if position is None and points and not any(p.arrived_position is not None for p in points):
            notes[figure] = "the query's sources report no latest offsets: the input position is unknown"
            return None
        if position is None and at_s is not None:
            position = arrived_at(points, at_s)  # a script app's: interpolated between its reports
        covered = None if position is None else first_covering(points, position)
        return None if covered is None else _round(max(covered - req, 0.0))

    # §4 (4): every record that arrived before the request is out of the sink.
    catch_up = covered_s("catch_up_s", timeline.input_at_request, req)
    # §4 (5), adapted: every record the migration held back (arrived until the restart or the resume,
    # whichever came later; DSM's abandoned, recomputed batch among them) is out of the sink.
    recovery = covered_s("recovery_s", timeline.input_at_release, timeline.released_at_s)
    stable = (Stabilisation(None, None) if first is None
              else stabilisation(points, timeline, first.committed_at_s, tolerance, window_s))
    if stable.reason:
        notes["stabilization_s"] = stable.reason
    complete = (first is not None and (catch_up is not None or "catch_up_s" in notes)
                and (recovery is not None or "recovery_s" in notes)
                and (stable.at_s is not None or stable.reason is not None))
    return FollowUp(restore_s=None if first is None else _round(first.committed_at_s - req), catch_up_s=catch_up,
                    recovery_s=recovery,
                    stabilization_s=None if stable.at_s is None else _round(max(stable.at_s - req, 0.0)),
                    stabilization_basis=stable.basis, not_measured=notes, complete=complete)


# -- reading the history ------------------------------------------------------------------------------


class HistoryReader:
    """Reads a query's progress history from `since_s` on, a little more on each `read`."""

    def __init__(self, client: redis.Redis, key: str, since_s: float):
        self.client, self.key = client, key
        self.last_id = f"{max(int(since_s * 1000), 0)}-0"
        self.points: list[BatchPoint] = []

    def read(self) -> list[BatchPoint]:
        for entry_id, fields in stream_entries(self.client.xrange(self.key, min=self.last_id, max="+")):
            if entry_id == self.last_id:
                continue  # XRANGE's start is inclusive
            self.last_id = entry_id
            try:
                report = ProgressReport.from_fields(fields)
                if not report.idle:  # an idle sample is no batch: no commit, no output, no rate knot
                    self.points.append(BatchPoint.from_report(report))
            except (KeyError, ValueError, TypeError) as exc:
                log.warning("migration.bad_progress_entry", key=self.key, entry=entry_id, error=str(exc))
        return self.points


def read_batches(client: redis.Redis, prefix: str, app: str, query: str, since_s: float) -> list[BatchPoint]:
    """The query's batches published since `since_s` (Redis time)."""
    return HistoryReader(client, progress_history_key(prefix, app, query), since_s).read()


def measure_after(cfg: Config, app: AppConfig, redis_client: redis.Redis, journal: Journal,
                  sample_s: float = 1.0) -> dict[str, JsonValue]:
    """Follow the query once the migration ended until restore, catch-up, recovery and stabilisation
    are known (`follow_up` over the batches since `LOOKBACK_S` before the request), at most
    `migration.measure_timeout_s`; what was not reached by then is None, and said so. Blocks: the
    benchmarks' (the actuator looks once and leaves the rest to `migration_followup`)."""
    mcfg = cfg.migration
    timeline = timeline_of(journal)
    reader = history_reader(cfg, app.name, redis_client, journal)
    deadline = time.monotonic() + mcfg.measure_timeout_s
    while True:
        result = follow_up(timeline, reader.read(), mcfg.stable_tolerance, mcfg.stable_window_s)
        if result.complete or time.monotonic() >= deadline:
            break
        time.sleep(sample_s)  # the agent publishes once per batch: no need to read faster
    return followup_figures(result, journal, mcfg.measure_timeout_s)


def history_reader(cfg: Config, app_name: str, redis_client: redis.Redis, journal: Journal) -> HistoryReader:
    """The migrated query's history from `LOOKBACK_S` before the request (the old run's batches too)."""
    return HistoryReader(redis_client, progress_history_key(cfg.redis.key_prefix, app_name, journal.query),
                         journal.requested_at - LOOKBACK_S)


def followup_figures(result: FollowUp, journal: Journal, timeout_s: float | None) -> dict[str, JsonValue]:
    """`result`'s figures and the journal's replayed records. With `timeout_s` the follow-up has
    ended: a figure not reached is None and said so; without, it may still come."""
    notes = dict(result.not_measured)
    for name in ("catch_up_s", "recovery_s", "stabilization_s"):
        if timeout_s is not None and getattr(result, name) is None and name not in notes:
            notes[name] = f"not reached within measure_timeout_s ({timeout_s:g} s) after the migration"
    figures = FollowUp(result.restore_s, result.catch_up_s, result.recovery_s, result.stabilization_s,
                       result.stabilization_basis, notes, result.complete).figures()
    figures["replayed_records"] = journal.marks.get("replayed_records")
    return figures


# -- helpers ------------------------------------------------------------------------------------------


def _by_commit(points: list[BatchPoint]) -> list[BatchPoint]:
    return sorted(points, key=lambda p: p.committed_at_s)


def _interp(knots: list[tuple[float, float]], at_s: float) -> float | None:
    """Piecewise-linear value at `at_s` of sorted (time, value) knots; None outside them."""
    if not knots or at_s < knots[0][0] or at_s > knots[-1][0]:
        return None
    i = bisect.bisect_left(knots, (at_s, float("-inf")))
    if knots[i][0] == at_s or i == 0:
        return knots[i][1]
    (t0, v0), (t1, v1) = knots[i - 1], knots[i]
    return v0 + (v1 - v0) * (at_s - t0) / (t1 - t0)


def _rate(knots: list[tuple[float, float]], at_s: float, window_s: float) -> float | None:
    """Per second over (at_s - window_s, at_s] of a cumulative count given by its knots."""
    end, start = _interp(knots, at_s), _interp(knots, at_s - window_s)
    return None if end is None or start is None else (end - start) / window_s


def _position_before(points: list[BatchPoint], timeline: MigrationTimeline, first_new: BatchPoint) -> float | None:
    """Where the new run started: the old run's last committed position before its first batch
    (None: the history does not reach back to it)."""
    old = [p for p in _by_commit(points) if not timeline.in_new_run(p) and p.processed_position is not None
           and p.committed_at_s <= first_new.committed_at_s]
    return float(old[-1].processed_position or 0) if old else None


def _rate_before(points: list[BatchPoint], timeline: MigrationTimeline) -> float | None:
    """The old run's output rate over the `LOOKBACK_S` before the request (rows per second)."""
    old = [p for p in _by_commit(points) if p.committed_at_s <= timeline.requested_at_s
           and not timeline.in_new_run(p)]
    if len(old) < 2 or old[-1].committed_at_s - old[0].committed_at_s < RATE_WINDOW_S:
        return None
    return sum(p.rows for p in old[1:]) / (old[-1].committed_at_s - old[0].committed_at_s)


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 3)
