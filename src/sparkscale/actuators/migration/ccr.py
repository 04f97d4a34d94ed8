"""CCR, capture-checkpoint-resume: pause and stop at the next batch boundary in one step, without
waiting to drain; capture what arrived but was not processed into the Redis DataStore: its positions
(source offsets and stream positions), not the records, which stay in the replayable input streams
(`capture_positions_s`, `captured_records`); repartition; restart; resume at once: the captured
records come first in the ordered input streams, so they are replayed before any newer one."""

from __future__ import annotations

from sparkscale.actuators.migration.base import MigrationStrategy, register_strategy


@register_strategy
class CaptureCheckpointResume(MigrationStrategy):
    name = "ccr"
    # Shukla & Simmhan §3.2 (Capture, Checkpoint and Resume): capture in-flight input, resume at once.
    phases = ("requested", "paused", "stopped", "captured", "repartitioned", "restarted", "resumed", "restored",
              "done")
