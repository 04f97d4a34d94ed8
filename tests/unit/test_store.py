"""The store seam (src/sparkscale/store/): one contract run against the in-memory store and against
the Redis/ZooKeeper implementations on fakeredis and a fake ZooKeeper, and bad records skipped and
logged once."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import fakeredis
import pytest
from structlog.testing import capture_logs

from sparkscale.config import ActionLogConfig
from sparkscale.model.action_result import ActionResult
from sparkscale.model.app_status import AppStatus, QueryView, Role
from sparkscale.model.executor_shape import ExecutorShape
from sparkscale.model.journal import Journal
from sparkscale.model.manual_request import ManualRequest, ManualResult, RequestType
from sparkscale.policies.outcomes import BlockedAction
from sparkscale.protocol.keys import actions_key, blocklist_key, downtime_samples_key, shape_key, status_key
from sparkscale.protocol.queries import queries_key
from sparkscale.store.action_records import BlocklistEntry, OutcomeRecord
from sparkscale.store.base import Store
from sparkscale.store.live import live_store
from sparkscale.store.memory import memory_store
from sparkscale.store.zk_journal import WriteFenced
from sparkscale.store.zk_watch import read_existing
from tests.unit.fake_redis import fake_redis
from tests.unit.fakezk import FakeZk
from tests.unit.test_explain import SCALE, T, app_snapshot, record

PREFIX = "sparkscale:"
ROOT = "/sparkscale"


@pytest.fixture(params=["memory", "live"])
def store(request: pytest.FixtureRequest) -> Iterator[Store]:
    if request.param == "memory":
        yield memory_store(ActionLogConfig(), clock=lambda: T)
    else:
        yield live_store(fake_redis(), PREFIX, FakeZk(), ROOT, ActionLogConfig())  # type: ignore[arg-type]


def journal(epoch: int = 3) -> Journal:
    return Journal(id="mig-1", app="clicks", query="q", strategy="ccr", from_partitions=4, to_partitions=8,
                   requested_at=100.0, by="t", epoch=epoch)


def blocked(app: str, until: float, at: float = T) -> BlocklistEntry:
    return BlocklistEntry(BlockedAction(app, "under_provisioned", "scale_executors", until, "ds2"), at, "d-1", "why")


# -- the contract -----------------------------------------------------------------------------------


def test_the_action_log_joins_decisions_with_their_results_and_outcomes(store: Store) -> None:
    first = store.actions.append_decision(record(), app_snapshot())
    store.actions.append_decision(record(mode="no_change", actions=()))
    store.actions.append_results(first, "clicks", [ActionResult(SCALE, "done", "ok")])
    store.actions.append_outcome(OutcomeRecord(first, "clicks", T + 60, True, "processed_rate", 1.0, 2.0, 2.5, "met"))
    logged = store.actions.read("clicks")
    assert logged[0].id == first and len(logged) == 2
    assert logged[0].results == (ActionResult(SCALE, "done", "ok"),) and logged[0].outcome is not None
    assert logged[0].outcome.met and logged[1].results is None and logged[1].outcome is None
    assert store.actions.read("other") == []
    found = store.actions.decision(first)
    assert found is not None and found.results == logged[0].results and store.actions.decision("1-0") is None
    kept = store.actions.snapshot("clicks", record().snapshot_id)
    assert kept is not None and json.loads(kept)["app"] == "clicks"
    assert store.actions.snapshot("clicks", "nope") is None


def test_the_blocklist_drops_expired_entries_and_filters_by_app(store: Store) -> None:
    store.blocklist.block(blocked("clicks", T + 100, at=T + 2))
    store.blocklist.block(blocked("other", T + 100, at=T + 1))
    store.blocklist.block(BlocklistEntry(BlockedAction("clicks", "x", "set_parallelism", T - 1), T, "d-2", ""))
    assert [e.blocked.app for e in store.blocklist.entries(T)] == ["other", "clicks"]
    assert [e.blocked.app for e in store.blocklist.entries(T, "clicks")] == ["clicks"]
    assert store.blocklist.blocklist(T + 200).entries == ()


def test_a_journal_is_written_by_compare_and_set_and_fenced_by_the_epoch(store: Store) -> None:
    mine, theirs = store.journals.journal("clicks"), store.journals.journal("clicks")
    assert mine.read() is None and theirs.read() is None and store.journals.watched("clicks") is None
    mine.write(journal())
    assert theirs.read() == journal() and store.journals.watched("clicks") == journal()
    stale = store.journals.journal("clicks")
    stale.read()
    mine.write(journal(epoch=4))
    with pytest.raises(WriteFenced):
        stale.write(journal(epoch=5))
    with pytest.raises(WriteFenced):  # nobody holds the lock at epoch 9
        store.journals.journal("other", epoch=9).write(journal())
    fresh = store.journals.journal("clicks").read()
    assert fresh is not None and fresh.epoch == 4 and store.journals.watched("clicks") == fresh


def test_a_stored_shape_is_the_one_every_later_submit_starts_with(store: Store) -> None:
    """A migration's executor shape outlives the config's: `with_shape` (what submit and the daemon
    read an app through) gives it; without one, the config's stands."""
    from sparkscale.apps.submit import with_shape
    from sparkscale.config import Config

    app = Config.model_validate({"apps": [{"name": "clicks", "executor_cores": 1, "executor_memory_mb": 512}]}).apps[0]
    assert with_shape(app, store.shapes) == app
    store.shapes.store_shape("clicks", ExecutorShape(2, 768), "mig-1")
    shaped = with_shape(app, store.shapes)
    assert (shaped.executor_cores, shaped.executor_memory_mb, shaped.name) == (2, 768, "clicks")


def test_shapes_queries_and_downtime_samples_round_trip(store: Store) -> None:
    assert store.shapes.stored_shape("clicks") is None
    store.shapes.store_shape("clicks", ExecutorShape(2, 1024), "mig-1")
    assert store.shapes.stored_shape("clicks") == ExecutorShape(2, 1024)
    assert store.queries.read_queries("clicks") == {}
    store.downtime.add("restart", 12.0, 3e6, "clicks")
    store.downtime.add("restart", 8.0, 0.0, "clicks")
    assert store.downtime.load() == {"restart": [(12.0, 3e6), (8.0, 0.0)]}
    assert store.leaders.current_leader("clicks") is None and store.leaders.live_lock("clicks") is None


def test_requests_are_pending_oldest_first_until_answered_and_withdrawn_without_an_answer(store: Store) -> None:
    first = store.requests.submit("clicks", ManualRequest(3, "op", T, T + 60))
    second = store.requests.submit("clicks", ManualRequest(None, "op", T, T + 60, type=RequestType.ABORT_MIGRATION,
                                                           migration="mig-1"))
    assert [(r.name, r.to, r.type) for r in store.requests.pending("clicks")] == [
        (first, 3, RequestType.SCALE_EXECUTORS), (second, None, RequestType.ABORT_MIGRATION)]
    assert store.requests.pending("other") == []
    store.requests.answer("clicks", first, ManualResult(True, "done", "d-1", "daemon-a"))
    store.requests.answer("clicks", first, ManualResult(False, "twice"))  # a second answer is skipped
    assert store.requests.wait_result("clicks", first, 0.0) == ManualResult(True, "done", "d-1", "daemon-a")
    assert store.requests.wait_result("clicks", second, 0.0) is None
    assert store.requests.pending("clicks") == []  # withdrawn


def test_each_daemons_status_is_read_freshest_first(store: Store) -> None:
    view = QueryView("q", 2000.0, "position", None, "unknown", 4)
    store.status.publish("clicks", AppStatus("daemon-a", Role.STANDBY, None, T, "ok"))
    store.status.publish("clicks", AppStatus("daemon-b", Role.LEADER, 3, T + 5, "ok", 2, {"q": 4}, queries=(view,)))
    store.status.publish("clicks", AppStatus("daemon-a", Role.STANDBY, None, T + 1, "absent"))
    assert [(s.daemon, s.cycle_at) for s in store.status.read("clicks")] == [("daemon-b", T + 5), ("daemon-a", T + 1)]
    assert store.status.read("clicks")[0].queries == (view,) and store.status.read("other") == []


# -- bad records ------------------------------------------------------------------------------------


def _live() -> tuple[Store, fakeredis.FakeRedis, FakeZk]:
    redis, zk = fake_redis(), FakeZk()
    return live_store(redis, PREFIX, zk, ROOT, ActionLogConfig()), redis, zk  # type: ignore[arg-type]


def _bad_lines(logs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in logs if e["event"] == "store.bad_record"]


@pytest.mark.parametrize("body", [
    "{not json", json.dumps({**record().to_dict(), "decided_at": float("nan")}),
    json.dumps({**record().to_dict(), "mode": "sideways"}), json.dumps({**record().to_dict(), "plan": 3}),
])
def test_a_bad_action_log_entry_is_skipped_and_logged_once(body: str) -> None:
    store, redis, _zk = _live()
    good = store.actions.append_decision(record())
    redis.xadd(actions_key(PREFIX), {"kind": "decision", "app": "clicks", "json": body})
    redis.xadd(actions_key(PREFIX), {"kind": "result", "app": "clicks", "json": json.dumps({"decision_id": good})})
    with capture_logs() as logs:
        assert [d.id for d in store.actions.read("clicks")] == [good]
        assert [d.id for d in store.actions.read("clicks")] == [good]
    bad = _bad_lines(logs)
    assert len(bad) == 2 and {e["key"] for e in bad} == {actions_key(PREFIX)}  # the decision, the result
    assert all(e["problem"] for e in bad)


def test_a_bad_blocklist_entry_is_skipped_and_logged_once() -> None:
    store, redis, _zk = _live()
    store.blocklist.block(blocked("clicks", T + 100))
    redis.hset(blocklist_key(PREFIX), "other|x|y", json.dumps({**blocked("other", T + 100).to_dict(), "until": "soon"}))
    with capture_logs() as logs:
        assert [e.blocked.app for e in store.blocklist.entries(T)] == ["clicks"]
        assert [e.blocked.app for e in store.blocklist.entries(T)] == ["clicks"]
    assert [(e["key"], e["record"]) for e in _bad_lines(logs)] == [(blocklist_key(PREFIX), "other|x|y")]


def test_a_bad_journal_reads_as_none_logged_once_and_a_write_replaces_it() -> None:
    store, _redis, zk = _live()
    zk.create(f"{ROOT}/apps/clicks/migration", b'{"id": "mig-1", "status": "sideways"}', makepath=True)
    with capture_logs() as logs:
        handle = store.journals.journal("clicks")
        assert handle.read() is None and store.journals.journal("clicks").read() is None
    assert len(_bad_lines(logs)) == 1 and _bad_lines(logs)[0]["key"] == f"{ROOT}/apps/clicks/migration"
    handle.write(journal())
    assert store.journals.journal("clicks").read() == journal()


def test_bad_shapes_queries_and_downtime_samples_are_skipped_and_logged_once() -> None:
    store, redis, _zk = _live()
    redis.hset(shape_key(PREFIX, "clicks"), mapping={"executor_cores": "two", "executor_memory_mb": "512",
                                                     "migration": "mig-1"})
    redis.hset(queries_key(PREFIX, "clicks"), "q", "{broken")
    store.downtime.add("restart", 5.0, 0.0, "clicks")
    redis.lpush(downtime_samples_key(PREFIX, "restart"), json.dumps({"stall_s": float("inf")}))
    with capture_logs() as logs:
        for _ in range(2):
            assert store.shapes.stored_shape("clicks") is None
            assert store.queries.read_queries("clicks") == {}
            assert store.downtime.load() == {"restart": [(5.0, 0.0)]}
    assert sorted(e["key"] for e in _bad_lines(logs)) == sorted(
        [shape_key(PREFIX, "clicks"), queries_key(PREFIX, "clicks"), downtime_samples_key(PREFIX, "restart")])


def test_a_connection_error_is_not_a_bad_record() -> None:
    store, redis, _zk = _live()

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise ConnectionError("redis is down")

    redis.xrange = refuse  # type: ignore[method-assign,assignment]
    with pytest.raises(ConnectionError):
        store.actions.read("clicks")


REQUEST = {"to": 3, "by": "op", "requested_at": T, "expires_at": T + 60}


@pytest.mark.parametrize("body", [
    b"{not json", b"[1, 2]", json.dumps({**REQUEST, "to": float("inf")}).encode(),
    json.dumps({**REQUEST, "expires_at": float("nan")}).encode(), json.dumps({**REQUEST, "type": "sideways"}).encode(),
])
def test_a_malformed_request_is_answered_as_invalid_logged_once_and_the_others_served(body: bytes) -> None:
    store, _redis, zk = _live()
    good = store.requests.submit("clicks", ManualRequest(3, "op", T, T + 60))
    bad = str(zk.create(f"{ROOT}/apps/clicks/requests/req-", body, sequence=True)).rsplit("/", 1)[1]
    with capture_logs() as logs:
        assert [r.name for r in store.requests.pending("clicks")] == [good]
        assert [r.name for r in store.requests.pending("clicks")] == [good]
    assert [(e["key"], e["record"]) for e in _bad_lines(logs)] == [(f"{ROOT}/apps/clicks/requests", bad)]
    assert store.requests.wait_result("clicks", bad, 0.0) == ManualResult(False, "not a valid request")


def test_an_answer_that_does_not_parse_is_a_refusal_saying_so() -> None:
    store, _redis, zk = _live()
    name = store.requests.submit("clicks", ManualRequest(3, "op", T, T + 60))
    zk.create(f"{ROOT}/apps/clicks/request_results/{name}", b'{"ok": true}', makepath=True)
    with capture_logs() as logs:
        answer = store.requests.wait_result("clicks", name, 0.0)
    assert answer == ManualResult(False, "the leader's answer does not parse: detail: missing")
    assert len(_bad_lines(logs)) == 1


def test_a_bad_status_view_is_skipped_and_logged_once() -> None:
    store, redis, _zk = _live()
    store.status.publish("clicks", AppStatus("daemon-a", Role.LEADER, 3, T, "ok"))
    redis.hset(status_key(PREFIX, "clicks"), "daemon-b", json.dumps({"daemon": "daemon-b", "role": "boss"}))
    redis.hset(status_key(PREFIX, "clicks"), "daemon-c", '{"cycle_at": NaN}')
    with capture_logs() as logs:
        for _ in range(2):
            assert [s.daemon for s in store.status.read("clicks")] == ["daemon-a"]
    assert sorted(e["record"] for e in _bad_lines(logs)) == ["daemon-b", "daemon-c"]


def test_the_memory_store_calls_a_watcher_on_each_request() -> None:
    store = memory_store(ActionLogConfig(), clock=lambda: T)
    seen: list[str] = []
    store.requests.watch("clicks", lambda: seen.append("woken"))
    store.requests.submit("clicks", ManualRequest(3, "op", T, T + 60))
    store.requests.submit("other", ManualRequest(3, "op", T, T + 60))
    assert seen == ["woken"]


def test_a_missing_znode_is_watched_for_its_creation_and_one_created_meanwhile_is_read_again() -> None:
    """ZooKeeper sets no read's watch on a missing znode (store/zk_watch.py `read_existing`)."""
    zk = FakeZk()
    fired: list[object] = []
    assert read_existing(zk, zk.get_children, f"{ROOT}/a", fired.append) is None
    zk.create(f"{ROOT}/a", makepath=True)
    assert len(fired) == 1  # the watch was set on its creation
    exists = zk.exists

    def created_meanwhile(path: str, watch: Any = None) -> Any:
        zk.create(path, b"x")
        return exists(path, watch)

    zk.exists = created_meanwhile  # type: ignore[method-assign]
    assert read_existing(zk, zk.get, f"{ROOT}/c", None) is None and f"{ROOT}/c" not in zk.nodes  # no watch asked
    got = read_existing(zk, zk.get, f"{ROOT}/b", fired.append)
    assert got is not None and got[0] == b"x"
