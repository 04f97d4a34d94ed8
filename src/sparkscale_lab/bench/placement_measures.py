"""What a `sparkscale bench placement` run is judged by, from its samples: pure functions, no I/O.

- Worker load: each worker's busy share = CPU seconds of its whole process tree (the worker JVM, the
  executors it forked and their Python workers) over a sampling interval / (the interval x the
  CPUs it is pinned to). Measured from the processes, not from Spark's task time: the master is
  blind to load, and so is task time to CPU contention between executors on one CPU.
- Imbalance: max / mean of the workers' busy shares. The headline is the ratio of the window's
  mean shares (sustained imbalance; a micro-batch's one-second bursts average out); the time-mean
  of the per-sample ratio is kept beside it.
- Shuffle: `shuffleRemoteBytesRead` / `shuffleLocalBytesRead` of the apps' stages completed in the
  window (the driver's `/stages` StageData; remote = fetched from another host's executors).
- Stalls: stretches in which an app had records waiting and finished none (downtime).
- The objective: EDRP's F (eq. 12) on the measured R, C and T_D, with the terms kept apart.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from sparkscale.monitors.spark_rest import parse_time_s
from sparkscale.policies.placement.edrp_model import EdrpSettings, cost_bound, weighted_terms
from sparkscale_lab.bench.measures import Segment, SloLimits, measure
from sparkscale_lab.bench.timeline import Sample

ProcessKey = tuple[int, float]  # (pid, create_time): a recycled pid is another process


# -- worker load ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkerSample:
    """One look at the workers; keys are the workers' hosts (one worker per host here)."""

    t_s: float  # seconds since the run's start (the load's)
    busy_share: Mapping[str, float | None]  # over the interval ending at t_s; None: unknown
    executors: Mapping[str, int | None]  # executors running on it (the worker's /json/); None: unknown

    def to_dict(self) -> dict[str, Any]:
        return {"t_s": self.t_s, "busy_share": dict(self.busy_share), "executors": dict(self.executors)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WorkerSample:
        return cls(float(data["t_s"]), dict(data.get("busy_share") or {}), dict(data.get("executors") or {}))


def busy_share(before: Mapping[ProcessKey, float], after: Mapping[ProcessKey, float], wall_s: float,
               cpus: int) -> float | None:
    """The share of `cpus` a process tree kept busy between two readings of its processes' CPU
    seconds (user + system). A process only in `after` started in between and counts from 0; one
    only in `before` ended in between and its last part is lost (at most one interval of one
    process). None: no interval or no CPU."""
    if wall_s <= 0 or cpus <= 0:
        return None
    used = sum(max(cpu_s - before.get(key, 0.0), 0.0) for key, cpu_s in after.items())
    return used / (wall_s * cpus)


def imbalance(shares: Iterable[float]) -> float | None:
    """max / mean: 1 is balanced; with two workers, 2 is all the load on one. None: no load."""
    values = list(shares)
    if not values:
        return None
    mean = sum(values) / len(values)
    return max(values) / mean if mean > 0 else None


@dataclass(frozen=True)
class LoadBalance:
    mean_busy_share: dict[str, float]  # per worker, over the window
    imbalance: float | None  # of the mean shares: the headline
    imbalance_per_sample: float | None  # the time-mean of each sample's ratio


def load_balance(samples: Sequence[WorkerSample], start_s: float, end_s: float) -> LoadBalance:
    """The workers' load over [start_s, end_s] (samples whose every worker's share is known)."""
    inside = [s for s in samples if start_s < s.t_s <= end_s
              and s.busy_share and all(v is not None for v in s.busy_share.values())]
    workers = sorted({w for s in inside for w in s.busy_share})
    means = {w: sum(float(s.busy_share[w] or 0.0) for s in inside) / len(inside) for w in workers} if inside else {}
    ratios = [r for s in inside if (r := imbalance(float(v or 0.0) for v in s.busy_share.values())) is not None]
    return LoadBalance({w: round(v, 4) for w, v in means.items()}, _round(imbalance(means.values()), 4),
                       _round(sum(ratios) / len(ratios), 4) if ratios else None)


# -- shuffle ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StageBytes:
    """One completed stage attempt's shuffle read (the driver's `/applications/{id}/stages`)."""

    app: str
    stage_id: int
    attempt_id: int
    completed_at_s: float | None  # epoch seconds
    remote_bytes: int  # shuffleRemoteBytesRead: from executors on other hosts
    local_bytes: int  # shuffleLocalBytesRead: from this executor or another on its host

    @property
    def key(self) -> tuple[str, int, int]:
        return self.app, self.stage_id, self.attempt_id


def parse_stage_bytes(app: str, data: Any) -> list[StageBytes]:
    """The COMPLETE stage attempts of a `/stages` answer (a list of StageData)."""
    out = []
    for s in data if isinstance(data, list) else ():
        if not isinstance(s, Mapping) or s.get("status") != "COMPLETE" or "stageId" not in s:
            continue
        out.append(StageBytes(app, int(s["stageId"]), int(s.get("attemptId", 0)),
                              parse_time_s(s.get("completionTime")), int(s.get("shuffleRemoteBytesRead", 0)),
                              int(s.get("shuffleLocalBytesRead", 0))))
    return out


def shuffle_bytes(stages: Iterable[StageBytes], start_epoch_s: float, end_epoch_s: float) -> tuple[int, int]:
    """(remote, local) bytes read by the stage attempts completed in the window, each attempt once
    (the driver is asked several times and lists a stage each time until the UI drops it)."""
    seen: dict[tuple[str, int, int], StageBytes] = {}
    for s in stages:
        if s.completed_at_s is not None and start_epoch_s <= s.completed_at_s <= end_epoch_s:
            seen[s.key] = s
    return sum(s.remote_bytes for s in seen.values()), sum(s.local_bytes for s in seen.values())


# -- stalls -----------------------------------------------------------------------------------------


def stalls_s(samples: Sequence[Sample], start_s: float, end_s: float, min_stall_s: float) -> list[float]:
    """Each stall of one app in [start_s, end_s], in seconds: from the last sample at which its
    finished count had advanced (or the window's start) to the next at which it advanced again (or
    the window's end), while records were waiting (a sample with none waiting ends the stretch: idle
    is no stall). Only stretches of at least `min_stall_s` count: between two batches' ends a
    healthy app finishes nothing for a batch's duration."""
    inside = sorted((s for s in samples if start_s <= s.t_s <= end_s), key=lambda s: s.t_s)
    if not inside:
        return []
    out: list[float] = []
    since = inside[0].t_s
    for prev, cur in itertools.pairwise(inside):
        if cur.processed_records > prev.processed_records:
            if cur.t_s - since >= min_stall_s:
                out.append(round(cur.t_s - since, 3))
            since = cur.t_s
        elif cur.backlog_records == 0:
            since = cur.t_s
    last = inside[-1]
    if last.backlog_records > 0 and last.t_s - since >= min_stall_s:
        out.append(round(last.t_s - since, 3))  # still stalled when the window closed
    return out


# -- latency, cores ---------------------------------------------------------------------------------


def mean_latency_s(samples: Sequence[Sample], start_s: float, end_s: float) -> float | None:
    """The mean end-to-end latency of the samples in the window that carry one (None: none do)."""
    known = [s.latency_ms for s in samples if start_s <= s.t_s <= end_s and s.latency_ms is not None]
    return sum(known) / len(known) / 1000.0 if known else None


@dataclass(frozen=True)
class AppFigures:
    """One app over the measured window."""

    slo_backlog_s: float  # bench.measures: seconds with more than the SLO's seconds of input waiting
    stalls_s: tuple[float, ...]
    mean_cores: float  # executor cores held, time-weighted
    mean_latency_s: float | None

    @property
    def downtime_s(self) -> float:
        return round(sum(self.stalls_s), 3)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "downtime_s": self.downtime_s}


def app_figures(samples: Sequence[Sample], start_s: float, end_s: float, rate: float, limits: SloLimits,
                min_stall_s: float) -> AppFigures:
    """The app's figures over [start_s, end_s] under a constant `rate` (records/s): the backlog SLO
    and the cores as `bench.measures.measure` counts them on the window's samples, the stalls."""
    shifted = [replace(s, t_s=s.t_s - start_s) for s in samples if start_s <= s.t_s <= end_s]
    duration = end_s - start_s
    m = measure(shifted, [], [Segment(0.0, duration, rate)], limits)
    return AppFigures(m.slo_backlog_s, tuple(stalls_s(samples, start_s, end_s, min_stall_s)),
                      round(m.executor_core_s / duration, 4) if duration > 0 else 0.0,
                      _round(mean_latency_s(samples, start_s, end_s), 3))


# -- the objective ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class MeasuredObjective:
    """EDRP's F (eq. 12) on measured figures, with its three weighted terms."""

    objective: float | None  # None: R unknown (no latency sampled)
    response_s: float | None  # R: the worst app's mean end-to-end latency
    cost_per_h: float  # C: mean executor cores held x price_per_core_hour
    downtime_s: float  # T_D: the longest single stall
    c_max: float
    response_term: float | None  # w_r R / R_max
    cost_term: float  # w_c C / C_max
    downtime_term: float  # w_d T_D / T_D,max

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def measured_objective(settings: EdrpSettings, response_s: float | None, mean_cores: float,
                       longest_stall_s: float, cluster_cores: int) -> MeasuredObjective:
    """F = w_r R/R_max + w_c C/C_max + w_d T_D/T_D,max (EDRP eq. 12) with the weights and bounds of
    `settings` (placement.edrp), C_max as EDRP takes it: the configured one, else every core of the
    cluster at price_per_core_hour. R is the measured end-to-end latency, in the seconds of EDRP's
    micro-batch response model (R_max 10 s by default). The terms are kept apart in the results."""
    s = settings
    cost = mean_cores * s.price_per_core_hour
    c_max = cost_bound(s, cluster_cores)
    weighted_r, c_term, d_term = weighted_terms(s, response_s or 0.0, cost, c_max, longest_stall_s)
    r_term = None if response_s is None else weighted_r
    return MeasuredObjective(None if r_term is None else round(r_term + c_term + d_term, 4), response_s,
                             round(cost, 4), longest_stall_s, c_max, _round(r_term, 4), round(c_term, 4),
                             round(d_term, 4))


# -- the daemon's actions ---------------------------------------------------------------------------


@dataclass(frozen=True)
class DoneAction:
    """One action the daemon carried out (from the action log)."""

    app: str
    t_s: float  # decided, seconds since the run's start
    type: str  # replace_executor (a move), scale_executors, set_parallelism, ...
    summary: str


def moves_and_actions(actions: Sequence[DoneAction], start_s: float, end_s: float) -> tuple[int, int]:
    """(moves, every action) carried out in [start_s, end_s]; a move is a `replace_executor`."""
    inside = [a for a in actions if start_s <= a.t_s <= end_s]
    return sum(1 for a in inside if a.type == "replace_executor"), len(inside)


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)
