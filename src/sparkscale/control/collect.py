"""Where the loop's snapshots come from (Flink's `ScalingMetricCollector`): one snapshot per live
query of the app over the last window (monitors/collector.py's `collect_snapshots`).

It raises `AppNotRunningError` when the app's driver does not answer and `NoQueriesYet` when its
agent lists no live query: the cycle then reports the app and decides nothing. Spark REST, Redis
and OS errors mean a service is unreachable: the cycle backs off.
"""

from __future__ import annotations

from typing import Protocol

from sparkscale.config import Config
from sparkscale.model.snapshot import Snapshot


class SnapshotCollector(Protocol):
    def __call__(self, cfg: Config, app_name: str, /) -> list[Snapshot]:
        ...
