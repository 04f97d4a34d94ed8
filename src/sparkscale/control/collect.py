"""Where the loop's snapshots come from (Flink's `ScalingMetricCollector`): one snapshot per live
query of the app over the last window (monitors/collector.py's `collect_snapshots`).

The stores' reads of the app ride in the collect's last Redis round trip (control/stores.py
`AppRecords.ride`), so the cycle gets them with the snapshots and waits on no round trip of their
own (monitors/collect_reads.py).

It raises `AppNotRunningError` when the app's driver does not answer and `NoQueriesYet` when its
agent lists no live query: the cycle then reports the app and decides nothing. Spark REST, Redis
and OS errors mean a service is unreachable: the cycle backs off.
"""

from __future__ import annotations

from typing import Protocol

from sparkscale.config import Config
from sparkscale.control.stores import AppReads
from sparkscale.model.snapshot import Snapshot
from sparkscale.monitors.collect_reads import Ride


class SnapshotCollector(Protocol):
    def __call__(self, cfg: Config, app_name: str, ride: Ride[AppReads], /) -> tuple[list[Snapshot], AppReads]:
        """The app's snapshots, one per live query, and what `ride` read for them."""
        ...
