"""Finished stage attempts, kept between cycles: a stage that has ended never changes, so each is
fetched from the driver's REST API once, not once per cycle for as long as it is in the window (a
query on a 1 s trigger with 3 stages has ~90 stages in a 30 s window: most of a cycle's cost).

Process-wide (the daemon is one process, its apps' cycles run on several threads), keyed by the
Spark application id, bounded by entry count (least recently used go first). The environment
variable SPARKSCALE_STAGE_CACHE=off turns it off (benchmarks/daemon_cycle.py's "before").
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable

from sparkscale.monitors.spark_rest import RestStage

FINISHED = frozenset({"COMPLETE", "SKIPPED", "FAILED"})
MAX_ENTRIES = 20_000


def switched_on(variable: str) -> bool:
    """An on/off environment switch for a benchmark's comparison (on unless off, 0 or false)."""
    return os.environ.get(variable, "on").lower() not in ("off", "0", "false")


class StageCache:
    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[str, int], list[RestStage]] = OrderedDict()
        self.max_entries = max_entries
        self.enabled = switched_on("SPARKSCALE_STAGE_CACHE")

    def get(self, app_id: str, stage_id: int, fetch: Callable[[], list[RestStage]]) -> tuple[list[RestStage], bool]:
        """The stage's attempts, and whether they were fetched (not kept from an earlier call)."""
        if not self.enabled:
            return fetch(), True
        key = (app_id, stage_id)
        with self._lock:
            kept = self._entries.get(key)
            if kept is not None:
                self._entries.move_to_end(key)
                return kept, False
        attempts = fetch()
        if attempts and all(a.status in FINISHED for a in attempts):
            with self._lock:
                self._entries[key] = attempts
                while len(self._entries) > self.max_entries:
                    self._entries.popitem(last=False)
        return attempts, True

    def __len__(self) -> int:
        return len(self._entries)


STAGES = StageCache()
