"""A finished stage is fetched from the driver once; a running one every time."""

from __future__ import annotations

from sparkscale.monitors.spark_rest import RestStage
from sparkscale.monitors.stage_cache import StageCache


def stage(status: str, stage_id: int = 1) -> RestStage:
    return RestStage(stage_id, 0, status, "s", 1, 0.0, 1.0 if status != "ACTIVE" else None, ())


def test_finished_stages_are_kept_and_running_ones_fetched_again():
    cache = StageCache(max_entries=2)
    calls: list[int] = []

    def fetch(status: str, stage_id: int):
        return lambda: calls.append(stage_id) or [stage(status, stage_id)]

    assert cache.get("app-1", 1, fetch("ACTIVE", 1))[1] is True
    assert cache.get("app-1", 1, fetch("COMPLETE", 1))[1] is True  # was running: fetched again
    attempts, fetched = cache.get("app-1", 1, fetch("COMPLETE", 1))
    assert fetched is False and attempts[0].status == "COMPLETE" and calls == [1, 1]
    assert cache.get("app-2", 1, fetch("COMPLETE", 1))[1] is True  # another application's stage 1
    cache.get("app-1", 2, fetch("SKIPPED", 2))
    assert len(cache) == 2  # bounded: the least recently used, app-1's stage 1, went
    assert cache.get("app-2", 1, fetch("COMPLETE", 1))[1] is False
    assert cache.get("app-1", 1, fetch("COMPLETE", 1))[1] is True
