"""The agent's executor target (agent/executor_target.py): kept within [min, max] (one more during a
replacement), published to Redis, held by trimming the newest executors, and lowered before a
decommission so the master launches no replacement. A fake stands in for Spark, fakeredis for Redis."""

from __future__ import annotations

import builtins
from typing import Any

import fakeredis
import pytest

from sparkscale.agent.args import CommandRefused
from sparkscale.agent.executor_target import ExecutorTarget
from sparkscale.agent.executors import ExecutorView
from sparkscale.config import AppConfig
from sparkscale.protocol.commands import Command
from sparkscale.protocol.keys import executor_target_key
from tests.unit.fake_redis import fake_redis

PREFIX = "t:"


class FakeExecutors:
    """The scheduler backend's executors: ids "1".."n", oldest first; remove() marks them inactive."""

    graceful = True

    def __init__(self, n: int) -> None:
        self.views = [ExecutorView(str(i), f"h:{i}", 1, i, True) for i in range(1, n + 1)]
        self.requested: list[int] = []
        self.removed: list[list[str]] = []

    def list(self) -> list[ExecutorView]:
        return list(self.views)

    def request_total(self, total: int) -> bool:
        self.requested.append(total)
        return True

    def remove(self, ids: builtins.list[str]) -> builtins.list[str]:
        self.removed.append(list(ids))
        self.views = [ExecutorView(v.id, v.host_port, v.cores, v.added_at_ms, v.active and v.id not in ids)
                      for v in self.views]
        return list(ids)


def target(n: int, **app: Any) -> tuple[ExecutorTarget, FakeExecutors, fakeredis.FakeRedis]:
    executors, client = FakeExecutors(n), fake_redis()
    cfg = AppConfig(name="a", **{"min_executors": 1, "max_executors": 4, **app})
    return ExecutorTarget(executors, cfg, client, PREFIX), executors, client  # type: ignore[arg-type]


def test_the_target_is_published_and_withdrawn() -> None:
    t, _executors, client = target(2)
    t.set(3)
    assert t.total == 3 and client.get(executor_target_key(PREFIX, "a")) == "3"
    t.set(None)
    assert t.total is None and not client.exists(executor_target_key(PREFIX, "a"))


def test_reconcile_trims_the_newest_executors_beyond_the_target_and_nothing_without_one() -> None:
    t, executors, _client = target(4)
    t.reconcile()
    assert executors.removed == []  # no target: the master's launches stand
    t.set(2)
    t.reconcile()
    assert executors.removed == [["3", "4"]]


def test_set_executors_stays_within_min_and_max_except_one_more_for_a_surge() -> None:
    t, executors, _client = target(4)
    with pytest.raises(CommandRefused, match=r"outside \[min_executors, max_executors\] = \[1, 4\]"):
        t.set_executors(Command("set_executors", {"total": 5}))
    assert t.total is None and executors.requested == []
    assert t.set_executors(Command("set_executors", {"total": 5, "surge": True}))["target"] == 5
    with pytest.raises(CommandRefused, match="a surge adds exactly one executor"):
        t.set_executors(Command("set_executors", {"total": 4, "surge": True}))
    detail = t.set_executors(Command("set_executors", {"total": 2}))
    assert detail == {"target": 2, "active_before": 4, "removed": ["4", "3"], "graceful": True}


def test_decommission_lowers_the_target_first_and_keeps_min_executors() -> None:
    t, executors, _client = target(3, min_executors=2, initial_executors=2)
    with pytest.raises(CommandRefused, match="would leave 1, below min_executors 2"):
        t.decommission(Command("decommission", {"count": 2}))
    assert t.decommission(Command("decommission", {"count": 1})) == {"removed": ["3"], "target": 2, "graceful": True}
    assert executors.requested == [2] and t.total == 2
    with pytest.raises(CommandRefused, match=r"no active executors with ids \['3'\]"):
        t.decommission(Command("decommission", {"executor_ids": ["3"]}))
