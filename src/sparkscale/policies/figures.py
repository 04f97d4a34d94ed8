"""One window's load figures of an application: what Dhalion's detectors and the outcome judging
read from a snapshot (rates, backlog, batch ratio, utilisation), and the work its stages measured
(DS2's explanation). Pure."""

from __future__ import annotations

from dataclasses import dataclass

from sparkscale.config import AppConfig
from sparkscale.model.snapshot import Snapshot

UTILIZATION = "utilization"  # an expectation's metric: LoadFigures.utilization (Dhalion's scale-down)


@dataclass(frozen=True)
class LoadFigures:
    """One window's load figures (rates in records/s; None where the snapshot does not tell)."""

    executors: int
    cores: int
    batch_ratio: float | None  # batch_duration_s / trigger_interval_s
    backlog: float  # records waiting at the sources
    arrival_rate: float  # records/s arriving at the sources
    processed_rate: float | None  # records/s the sources took in over the window
    load_utilization: float | None  # max(arrival, processed) x stages' core-s per source record / cores
    utilization: float | None  # max(load_utilization, batch_ratio)
    backlog_known: bool = True  # False: a source cannot tell its backlog (`backlog` then counts it as 0)


@dataclass(frozen=True)
class StageWork:
    """The work a window measured: its stages' useful time for the records its sources read."""

    useful_s: float  # core-seconds of useful time of the non-source operators
    source_records: float  # records the source operators read


def stage_work(snapshot: Snapshot) -> StageWork:
    """Only the stages' useful time counts: the source operator is virtual, and the builder gives
    each of its partitions the whole window as useful time (snapshot_builder `_source_operator`),
    which no core spent (4 partitions over 30 s would add 120 core-seconds)."""
    useful_s = sum(i.useful_time_s for op in snapshot.operators if not op.source for i in op.instances)
    source_records = sum(i.records_in for op in snapshot.operators if op.source for i in op.instances)
    return StageWork(useful_s, source_records)


def load_figures(snapshot: Snapshot, app: AppConfig) -> LoadFigures:
    """Batch ratio, backlog, rates and utilisation of one window (policies/dhalion.py's docstring)."""
    trigger = snapshot.trigger_interval_s or app.trigger_interval_s
    batch_ratio = snapshot.batch_duration_s / trigger if snapshot.batch_duration_s is not None else None
    sources = [op for op in snapshot.operators if op.source]
    arrival = sum(op.arrival_rate or 0.0 for op in sources)
    backlog = sum(op.backlog or 0.0 for op in sources)
    work = stage_work(snapshot)
    has_source_instances = any(op.instances for op in sources)
    processed = work.source_records / snapshot.window_s if has_source_instances else None
    load_u: float | None = None
    if work.source_records > 0 and work.useful_s > 0 and snapshot.cores > 0:
        # Capacity in source records/s = cores / core-seconds per source record (all stages share the cores).
        load_u = max(arrival, processed or 0.0) * (work.useful_s / work.source_records) / snapshot.cores
    known = [u for u in (load_u, batch_ratio) if u is not None]
    return LoadFigures(len(snapshot.executors), snapshot.cores, batch_ratio, backlog, arrival, processed,
                       load_u, max(known) if known else None,
                       backlog_known=all(op.backlog is not None for op in sources))


USUAL_BATCHES = 3  # batches' worth of arrivals a healthy micro-batch source may have waiting


def usual_backlog(snapshot: Snapshot, app: AppConfig, arrival_rps: float) -> float:
    """Records a healthy micro-batch source always has waiting: records arrive all the time and
    leave a batch (a trigger interval, or longer when the batch outlasts it) at a time, so a
    backlog reading anywhere within a few batches' worth of arrivals (plus one record) is the
    batch cycle's phase, not a query falling behind (outcomes.py `keeps_up`, draining.py)."""
    trigger_s = snapshot.trigger_interval_s or app.trigger_interval_s
    batch_s = max(trigger_s, snapshot.batch_duration_s or 0.0)
    return arrival_rps * batch_s * USUAL_BATCHES + 1
