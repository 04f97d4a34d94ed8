"""A migration's journal in ZooKeeper (`R/apps/{app}/migration`, JSON) and the metrics it gives.

The journal's `next` phase is written before its step runs and its `phases` record when each step
completed; which phases there are, and in which order, is its strategy's phase table."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from sparkscale.actuators.migration.base import get_strategy
from sparkscale.pipeline.submit import ExecutorShape
from sparkscale.protocol.znodes import journal_path


@dataclass
class Journal:
    """One migration's record: what, which strategy, where it is, and the figures for its metrics."""

    id: str
    app: str
    query: str
    strategy: str
    from_partitions: int
    to_partitions: int
    requested_at: float
    by: str
    epoch: int
    status: str = "running"  # running | done | rolled_back | failed
    next: str = "requested"  # the phase whose step runs (or ran) now
    phases: dict[str, float] = field(default_factory=dict)  # phase -> completed at (seconds since the epoch)
    marks: dict[str, Any] = field(default_factory=dict)  # positions, run ids, figures for the metrics
    detail: str = ""
    shape: dict[str, int] | None = None  # a new executor shape (ExecutorShape fields): a whole-app restart

    @property
    def new_shape(self) -> ExecutorShape | None:
        return ExecutorShape(**self.shape) if self.shape else None

    def to_json(self) -> bytes:
        return json.dumps(asdict(self)).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Journal:
        return cls(**json.loads(data.decode()))

    @property
    def phase_plan(self) -> tuple[str, ...]:
        """All the phases of the migration, in order: its strategy's phase table."""
        return get_strategy(self.strategy).phases

    @property
    def remaining(self) -> tuple[str, ...]:
        return tuple(p for p in self.phase_plan if p not in self.phases)

    def phase_durations(self) -> dict[str, float]:
        """Seconds each completed phase took (from the previous phase's completion)."""
        out: dict[str, float] = {}
        previous = self.requested_at
        for phase in self.phase_plan:
            if phase in self.phases:
                out[phase] = round(self.phases[phase] - previous, 3)
                previous = self.phases[phase]
        return out


class JournalStore:
    def __init__(self, zk: KazooClient, root: str, app: str):
        self.zk = zk
        self.path = journal_path(root, app)

    def read(self) -> Journal | None:
        try:
            data, _stat = self.zk.get(self.path)
        except NoNodeError:
            return None
        return Journal.from_json(data) if data else None

    def write(self, journal: Journal) -> None:
        try:
            self.zk.set(self.path, journal.to_json())
        except NoNodeError:
            try:
                self.zk.create(self.path, journal.to_json(), makepath=True)
            except NodeExistsError:
                self.zk.set(self.path, journal.to_json())


PhaseCallback = Callable[[Journal, str, float], None]


def phase_metrics(journal: Journal) -> dict[str, float | int | None]:
    """The metrics known when the migration ends (the seed's; catch-up and later ones need the
    query's progress afterwards: `sparkscale.monitors.migration_metrics.measure_after`)."""
    p = journal.phases
    d = journal.phase_durations()
    first_output = journal.marks.get("first_output_at") or p.get("restored")
    rebalance = [d.get(x) for x in ("stopped", "repartitioned", "restarted")]
    return {
        "restore_s": round(first_output - journal.requested_at, 3) if first_output else None,
        "drain_s": d.get("drained"),
        "capture_s": d.get("captured"),
        "rebalance_s": round(sum(x for x in rebalance if x is not None), 3),
        "total_s": round(p["done"] - journal.requested_at, 3) if "done" in p else None,
        "captured_records": journal.marks.get("captured_records"),
    }
