"""What a cycle's collect cost, from the figures the collector puts in its snapshot
(monitors/collector.py: `extensions["spark"]`), for the `cycle` line (issue 33)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sparkscale.model.snapshot import Snapshot


def collect_parts_s(leadership_s: float, snapshot: Snapshot) -> dict[str, float]:
    """Where the cycle's collect_s went, in seconds: the leadership step, then the parts the
    collector measured (`collect_parts_s`: driver, redis, stages, cluster), when it says. The app's
    executor shape has no part of its own: it is read in the collect's Redis round trip."""
    parts = {"leadership": round(leadership_s, 4)}
    measured = _spark(snapshot).get("collect_parts_s")
    if isinstance(measured, Mapping):
        parts.update({str(k): float(v) for k, v in measured.items() if isinstance(v, (int, float))})
    return parts


def decide_parts_s(collected_at: float, marks: Sequence[tuple[str, float]]) -> dict[str, float]:
    """Where the cycle's time after the collect went, in seconds, from the monotonic times its
    steps ended: `requests` (the operator's requests, due judgements), `history` (the history
    from what the stores read in the collect, and the journal), `plan` (the cluster view, policy,
    guards and mapping), `write` (a decision with actions logged and its actions handed over; a
    decision that starts nothing is handed to the log's writer, off the cycle)."""
    parts, since = {}, collected_at
    for name, at in marks:
        parts[name] = round(max(at - since, 0.0), 4)
        since = at
    return parts


def helper_cpu_s(snapshot: Snapshot) -> float:
    """CPU the collector's helper threads used for the cycle (`rest_cpu_s`: its REST reads, parsed
    on a pool): the daemon's own CPU too, though not the cycle thread's."""
    cpu_s = _spark(snapshot).get("rest_cpu_s")
    return float(cpu_s) if isinstance(cpu_s, (int, float)) else 0.0


def _spark(snapshot: Snapshot) -> Mapping[str, object]:
    spark = snapshot.extensions.get("spark")
    return spark if isinstance(spark, Mapping) else {}
