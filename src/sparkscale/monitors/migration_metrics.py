"""Following a query after a migration: the seed's metrics that need its progress afterwards
(Shukla & Simmhan §4: catch-up, recovery, rate stabilisation). The ones known when the migration
ends are the journal's (`sparkscale.actuators.migration.phase_metrics`)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import redis

from sparkscale.config import AppConfig, Config
from sparkscale.protocol.keys import input_stream_key
from sparkscale.protocol.streams import StreamOffsets, read_source_status, stream_heads

if TYPE_CHECKING:
    from sparkscale.actuators.migration.journal import Journal


@dataclass(frozen=True)
class _Sample:
    at: float
    processed: int
    arrived: int


def measure_after(cfg: Config, app: AppConfig, redis_client: redis.Redis, journal: Journal,
                  sample_s: float = 1.0) -> dict[str, float | int | None]:
    """Follow the query after a migration for the seed's remaining metrics (seconds from the request):

    - catch_up_s: the last record that arrived before the request is processed;
    - recovery_s: the last record that arrived before the sources resumed (what the migration held
      back and the restarted query replays first) is processed;
    - stabilization_s: from then on the processed rate stays within `stable_tolerance` of the input
      rate for `stable_window_s` (the start of that run).
    Gives up after `measure_timeout_s`, leaving what was not reached as None.
    """
    mcfg = cfg.migration
    prefix = cfg.redis.key_prefix
    if journal.marks.get("input_at_request") is None and app.runs_script:
        # Records-ever-arrived is known per source of the query, not app-wide: not measured here.
        return {"catch_up_s": None, "recovery_s": None, "stabilization_s": None,
                "replayed_records": journal.marks.get("replayed_records"),
                "not_measured": "catch-up, recovery and stabilisation need app-wide input positions"}
    keys = [input_stream_key(prefix, app.name, i) for i in range(app.source_partitions)]
    at_request = int(journal.marks.get("input_at_request", 0))
    held_back = int(journal.marks.get("input_at_resume", journal.marks.get("input_at_pause", at_request)))
    catch_up = recovery = stable_from = None
    samples: list[_Sample] = []
    deadline = time.monotonic() + mcfg.measure_timeout_s
    while time.monotonic() < deadline:
        now = time.time()
        status = read_source_status(redis_client, prefix, app.name, journal.query)
        processed = StreamOffsets.from_json(status.processed or status.committed or {}, app.source_partitions).total
        arrived = sum(h.entries_added for h in stream_heads(redis_client, keys))
        samples.append(_Sample(now, processed, arrived))
        if catch_up is None and processed >= at_request:
            catch_up = now - journal.requested_at
        if recovery is None and processed >= held_back:
            recovery = now - journal.requested_at
        if recovery is not None:
            stable_from = _stable_since(samples, mcfg.stable_tolerance, mcfg.stable_window_s)
            if stable_from is not None:
                break
        time.sleep(sample_s)  # a sampling period: rates need samples spread in time
    return {
        "catch_up_s": _round(catch_up),
        "recovery_s": _round(recovery),
        "stabilization_s": _round(stable_from - journal.requested_at if stable_from is not None else None),
        "replayed_records": journal.marks.get("replayed_records"),
    }


def _stable_since(samples: list[_Sample], tolerance: float, window_s: float,
                  rate_window_s: float = 10.0) -> float | None:
    """The start of a run of `window_s` (ending at the last sample) during which the processed rate
    over `rate_window_s` stayed within `tolerance` of the input rate; None if there is none yet.
    Rates are taken over several seconds because a micro-batch source advances in steps, one per
    batch: over a window shorter than a few batches the output rate swings even when it keeps up."""
    if not samples or samples[-1].at - samples[0].at < window_s:
        return None
    start = None
    for i, s in enumerate(samples):
        j = next((k for k in range(i, -1, -1) if s.at - samples[k].at >= rate_window_s), None)
        if j is None:
            continue
        dt = s.at - samples[j].at
        rate_in = (s.arrived - samples[j].arrived) / dt
        rate_out = (s.processed - samples[j].processed) / dt
        ok = abs(rate_out - rate_in) <= tolerance * max(rate_in, 1e-9) or (rate_in == 0 and rate_out == 0)
        if ok and start is None:
            start = samples[j].at
        elif not ok:
            start = None
    if start is not None and samples[-1].at - start >= window_s:
        return start
    return None


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 3)
