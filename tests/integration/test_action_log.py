"""The action log and the blocklist on a real Redis: joins, trimming, expiry, and the CLI tables."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from click.testing import CliRunner

from sparkscale.cli import main
from sparkscale.config import ActionLogConfig, load_config
from sparkscale.daemon.action_log import (
    ActionLog,
    BlocklistEntry,
    BlocklistStore,
    DecisionRecord,
    OutcomeRecord,
)
from sparkscale.daemon.downtime_tracker import KEEP, DowntimeTracker
from sparkscale.model.action_result import ActionResult
from sparkscale.model.plan import Action, Plan
from sparkscale.policies.outcomes import BlockedAction, Expectation
from sparkscale.policies.placement.downtime import DowntimeModel
from sparkscale.protocol.keys import downtime_samples_key
from sparkscale.store.redis_queries import RedisDowntime
from tests.unit.test_downtime_tracker import snap

pytestmark = pytest.mark.integration


@pytest.fixture
def prefix() -> str:
    return f"t{uuid.uuid4().hex[:8]}:"


def decision(app: str, at: float, *actions: Action, mode: str = "acted") -> DecisionRecord:
    plan = Plan("ds2", app, actions=actions, explanation=("why",))
    expected = Expectation("under_provisioning", "scale_executors", "processed_rate", 100.0, 200.0, 0.0)
    return DecisionRecord(app, at, f"{app}/q@{int(at * 1000)}", "d1", 7, "ds2", "under_provisioning", plan, mode,
                          expected if actions else None)


def test_decisions_join_their_results_and_outcomes(redis_server, prefix):
    log = ActionLog(redis_server.client(), prefix)
    now = time.time()
    up = Action.scale_executors(1, 2, "backlog grows")
    first = log.append_decision(decision("a", now, up))
    log.append_decision(decision("b", now))  # another app, no action
    log.append_results(first, "a", [ActionResult(up, "done", "2 active executors", "cmd-1", 0.2, 5.1, 2)])
    log.append_outcome(OutcomeRecord(first, "a", now + 60, True, "processed_rate", 100.0, 200.0, 190.0, "ok"))
    second = log.append_decision(decision("a", now + 70, Action.scale_executors(2, 4, "more")))

    logged = log.read("a")
    assert [d.id for d in logged] == [first, second]
    assert logged[0].results[0].status == "done" and logged[0].results[0].confirm_s == 5.1
    assert logged[0].outcome.met and logged[0].outcome.observed == 190.0
    assert logged[0].decision.plan.actions == (up,) and logged[0].decision.epoch == 7
    assert logged[1].results is None and logged[1].outcome is None  # written before acting: "in progress"
    assert [d.decision.app for d in log.read()] == ["a", "b", "a"]
    # `since` is when entries were logged (the stream ids, Redis's clock).
    assert log.read("a", since=now - 5) == logged
    assert log.read("a", since=time.time() + 5) == []


def test_the_log_is_trimmed_by_length(redis_server, prefix):
    client = redis_server.client()
    log = ActionLog(client, prefix, ActionLogConfig(max_entries=100))
    for i in range(400):
        log.append_decision(decision("a", time.time() + i))
    # Approximate trimming drops whole stream nodes (100 entries each by default): far below 400.
    assert client.xlen(log.key) < 250


def test_the_snapshot_behind_a_decision_is_kept(redis_server, prefix):
    from tests.unit.test_outcomes import snap

    log = ActionLog(redis_server.client(), prefix, ActionLogConfig(snapshots_kept=2))
    s = snap()
    rec = decision("app", s.taken_at, Action.scale_executors(2, 3, "r"))
    log.append_decision(rec, s)
    assert json.loads(log.snapshot("app", rec.snapshot_id))["taken_at"] == s.taken_at
    assert log.snapshot("app", "nope") is None


def test_blocklist_entries_expire(redis_server, prefix):
    store = BlocklistStore(redis_server.client(), prefix)
    now = time.time()
    store.block(BlocklistEntry(BlockedAction("a", "under_provisioning", "scale_executors", now + 600), now, "1-0",
                               "rate did not rise"))
    store.block(BlocklistEntry(BlockedAction("a", "slow_instance", "replace_executor", now + 1), now, "2-0", "x"))
    assert len(store.entries(now)) == 2
    assert store.blocklist(now, "a").find("a", "under_provisioning", "scale_executors", now) is not None
    assert store.blocklist(now, "other").entries == ()
    assert [e.blocked.diagnosis for e in store.entries(now + 10)] == ["under_provisioning"]
    assert len(redis_server.client().hgetall(store.key)) == 1  # the expired entry was deleted


def test_cli_actions_and_blocklist_tables(redis_server, prefix, tmp_path):
    client = redis_server.client()
    log = ActionLog(client, prefix)
    now = time.time()
    up = Action.scale_executors(1, 2, "backlog grows")
    first = log.append_decision(decision("a", now - 30, up))
    log.append_results(first, "a", [ActionResult(up, "done", "ok", "cmd-1", 0.2, 5.0, 2)])
    log.append_outcome(OutcomeRecord(first, "a", now, False, "processed_rate", 100.0, 200.0, 110.0, "short",
                                     now + 600))
    log.append_decision(decision("a", now - 20, mode="no_change"))
    BlocklistStore(client, prefix).block(BlocklistEntry(
        BlockedAction("a", "under_provisioning", "scale_executors", now + 600), now, first, "short"))
    sets = ["--set", f"redis.port={redis_server.port}", "--set", f"redis.key_prefix={prefix}",
            "--set", "logging.stderr=false"]
    load_config(None, [s for s in sets if s != "--set"])  # the overrides are valid

    out = CliRunner().invoke(main, ["actions", *sets])
    assert out.exit_code == 0, out.output
    assert "scale_executors 1 -> 2" in out.output and "NOT met, blocked" in out.output
    assert "done in 5 s" in out.output
    assert "no_change" not in out.output  # only with --all
    assert "no_change" in CliRunner().invoke(main, ["actions", "--all", *sets]).output

    lines = CliRunner().invoke(main, ["actions", "--json", *sets]).output.strip().splitlines()
    assert [json.loads(line)["outcome"]["met"] for line in lines] == [False]

    out = CliRunner().invoke(main, ["blocklist", *sets])
    assert out.exit_code == 0 and "under_provisioning" in out.output and first in out.output
    assert json.loads(CliRunner().invoke(main, ["blocklist", "--json", *sets]).output)[0]["action_type"] == \
        "scale_executors"
    bad = CliRunner().invoke(main, ["actions", "--since", "yesterday", *sets])
    assert bad.exit_code == 2


def test_measured_downtime_is_the_clusters_and_outlives_the_daemon_that_measured_it(redis_server, prefix):
    """EDRP's downtime samples (daemon/downtime_tracker.py) are kept in Redis: a restarted daemon, or
    a new leader, plans with what was measured rather than the defaults."""
    client = redis_server.client()
    first = DowntimeTracker(horizon_s=10.0, store=RedisDowntime(client, prefix))
    first.observe("a", snap(90.0, 1.0, 1.0, ended_at=89.0))
    first.action_done("a", Action.scale_executors(1, 2, "up"), 100.0, 101.0)
    first.observe("a", snap(105.0, 1.0, 9.0, ended_at=104.0))
    first.observe("a", snap(112.0, 1.0, 1.0, ended_at=111.0))  # closes the watch: an 8 s stall
    base = DowntimeModel()
    assert first.model(base).executor_add_s == 7.0  # less t_syn's 1 s

    restarted = DowntimeTracker(horizon_s=10.0, store=RedisDowntime(client, prefix))
    assert restarted.model(base).executor_add_s == 7.0
    assert restarted.model(base).executor_remove_s == base.executor_remove_s  # never measured: the default
    # A bad entry is skipped, and each kind keeps its last KEEP samples.
    client.lpush(downtime_samples_key(prefix, "executor_add"), "not json")
    store = RedisDowntime(client, prefix)
    for n in range(KEEP + 5):
        store.add("executor_remove", 2.0 + n, 0.0, "b")
    loaded = store.load()
    assert loaded["executor_add"] == [(8.0, 0.0)]
    assert [s for s, _ in loaded["executor_remove"]] == [2.0 + n for n in range(5, KEEP + 5)]  # oldest first
