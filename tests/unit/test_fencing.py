"""Fencing: the live leader lock holder read from the lock's znode names, the epoch check, and the
agent's admission of commands (on an in-memory fake of the kazoo client)."""

from __future__ import annotations

import pytest

from sparkscale.agent.admission import CommandGate
from sparkscale.daemon.leader import lock_epoch
from sparkscale.protocol.commands import Command
from sparkscale.protocol.fencing import (
    LiveLock,
    holder_epoch,
    holder_node,
    lock_sequence,
    read_live_lock,
    refusal,
)
from sparkscale.protocol.znodes import agent_epoch_path
from tests.unit.fakezk import FakeZk, hold_lock

ROOT, APP = "/ss", "wc"
LEADER, FORGER = 0x1001, 0x2002  # ZooKeeper sessions


def test_the_holder_is_the_lowest_sequence_among_lock_contenders():
    names = ["b1__lock__0000000012", "a9__lock__0000000007", "c3__lock__0000000031", "stray", "x__lock__12"]
    assert lock_sequence("a9__lock__0000000007") == 7 and lock_sequence("stray") is None
    assert lock_sequence("x__lock__12") is None  # not kazoo's 10 digits
    assert holder_node(names) == "a9__lock__0000000007" and holder_epoch(names) == 7
    assert holder_epoch([]) is None and holder_epoch(["stray"]) is None
    assert lock_epoch("0123abcd__lock__0000000042") == 42  # the daemon names its epoch the same way
    with pytest.raises(ValueError, match="'not-a-lock' is not a kazoo lock znode name"):
        lock_epoch("not-a-lock")


def test_refusal_accepts_only_the_live_holders_epoch_from_its_session():
    live = LiveLock("/ss/apps/wc/leader/x__lock__0000000009", 9, LEADER, 0)
    assert refusal(9, 5, live, LEADER) is None
    assert refusal(2**31, 9, live, LEADER) == f"not the current leader: epoch {2**31}, live lock epoch 9"
    assert refusal(3, 9, live, LEADER) == "stale epoch 3 < 9"  # checked first: a deposed leader
    assert refusal(9, 9, None, LEADER) == "no leader holds the lock"
    assert "written by session 0x2002" in refusal(9, 9, live, FORGER)  # the right epoch, forged


def test_read_live_lock_reads_the_holder_from_zookeeper():
    zk = FakeZk(session=LEADER)
    assert read_live_lock(zk, ROOT, APP) is None  # no daemon ever bid
    first = hold_lock(zk, ROOT, APP, 4)
    hold_lock(zk, ROOT, APP, 6, session=FORGER)  # a contender waiting behind it
    assert read_live_lock(zk, ROOT, APP) == LiveLock(first, 4, LEADER, 0)
    zk.expire(LEADER)  # the leader's session ends: the waiting contender holds the lock
    assert read_live_lock(zk, ROOT, APP).epoch == 6


def gate_with_leader(epoch: int = 9) -> tuple[FakeZk, CommandGate]:
    zk = FakeZk(session=LEADER)
    hold_lock(zk, ROOT, APP, epoch)
    gate = CommandGate(zk.as_session(0x3003), ROOT, APP)  # the agent has a session of its own
    gate.load()
    return zk, gate


def stored_epoch(zk: FakeZk) -> int | None:
    node = zk.nodes.get(agent_epoch_path(ROOT, APP))
    return None if node is None else int(node.data)


def test_a_forged_command_with_a_high_epoch_is_refused_and_the_stored_epoch_stays():
    zk, gate = gate_with_leader(9)
    assert gate.fenced(Command("set_executors", {"total": 2}, epoch=9), LEADER) is None
    assert gate.highest_epoch == 9 and stored_epoch(zk) == 9
    forged = Command("repartition", {"query": "q", "partitions": 1}, epoch=2**31)
    assert gate.fenced(forged, FORGER) == f"not the current leader: epoch {2**31}, live lock epoch 9"
    assert gate.highest_epoch == 9 and stored_epoch(zk) == 9  # the real leader is not fenced out
    assert gate.fenced(Command("report", epoch=9), LEADER) is None  # and still acts


def test_the_first_verified_epoch_is_stored_even_when_it_is_zero_and_older_ones_stay_refused():
    zk, gate = gate_with_leader(0)
    assert stored_epoch(zk) is None
    assert gate.fenced(Command("report", epoch=0), LEADER) is None and stored_epoch(zk) == 0
    zk.expire(LEADER)
    hold_lock(zk, ROOT, APP, 5, session=LEADER)  # the next leader
    assert gate.fenced(Command("report", epoch=0), LEADER) == "not the current leader: epoch 0, live lock epoch 5"
    assert gate.fenced(Command("report", epoch=5), LEADER) is None and stored_epoch(zk) == 5
    assert gate.fenced(Command("report", epoch=0), LEADER) == "stale epoch 0 < 5"
    restarted = CommandGate(zk, ROOT, APP)
    assert restarted.load() == 5  # kept across agent restarts


def test_with_nobody_holding_the_lock_every_command_is_refused():
    zk = FakeZk(session=LEADER)
    gate = CommandGate(zk, ROOT, APP)
    assert gate.fenced(Command("abort_query", {"query": "q"}, epoch=1), LEADER) == "no leader holds the lock"
    assert stored_epoch(zk) is None


def test_a_stale_command_is_skipped_with_how_long_ago_it_expired():
    command = Command("set_executors", {"total": 4}, epoch=9, issued_at=1000.0, expires_at=1030.0)
    assert CommandGate.expired(command, 1010.0) is None
    assert CommandGate.expired(command, 1100.0) == "expired 70.0 s ago: not run"


def test_the_agent_checks_expiry_then_the_leader_then_the_type_before_running_anything():
    import time
    from types import SimpleNamespace

    from sparkscale.agent.loop import ControlAgent

    zk, gate = gate_with_leader(9)
    ran: list[str] = []
    agent = ControlAgent.__new__(ControlAgent)  # no Spark: only the admission path
    agent.app, agent.gate = SimpleNamespace(name=APP), gate
    agent._handlers = {"report": lambda command: ran.append(command.name) or {"ok": 1}}
    now = time.time()

    def run(sender: int, **fields) -> object:
        command = Command(**{"type": "report", "epoch": 9, "issued_at": now, "expires_at": now + 30, **fields})
        return agent._execute("cmd-0000000001", command.to_json(), sender)

    assert run(LEADER, issued_at=now - 600, expires_at=now - 570).detail.startswith("expired 570")
    assert run(FORGER, epoch=2**31).detail.startswith("not the current leader") and stored_epoch(zk) is None
    assert "unknown command type 'nope'" in run(LEADER, type="nope").detail
    assert ran == []
    ack = run(LEADER)
    assert ack.ok and ack.detail == {"ok": 1} and ran == ["cmd-0000000001"] and stored_epoch(zk) == 9
