"""The control channel: command/ack formats, expiry, the sender's cleanup and retention (pure, or on
an in-memory fake of the kazoo client)."""

from __future__ import annotations

import json

import pytest

from sparkscale.protocol.commands import (
    DEFAULT_COMMAND_TTL_S,
    EXPIRY_GRACE_S,
    RETAIN_MAX_AGE_S,
    Ack,
    AckTimeout,
    Command,
    CommandFormatError,
    command_seq,
    prune_channel,
    prune_plan,
    send_command,
    wait_ack,
)
from sparkscale.protocol.znodes import commands_path
from tests.unit.fakezk import FakeZk


def test_command_round_trips_through_its_znode_form():
    sent = Command(type="set_executors", args={"total": 4}, epoch=7, issued_at=12.5)
    got = Command.from_znode("cmd-0000000042", sent.to_json())
    assert (got.type, got.args, got.epoch, got.issued_at, got.seq) == ("set_executors", {"total": 4}, 7, 12.5, 42)


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (b"not json", "^command: invalid JSON"),
        (b"[1, 2]", r"^command: expected an object \(got list\)"),
        (json.dumps({"args": {}, "epoch": 1}).encode(), "^command type: missing"),
        (json.dumps({"type": "report", "args": [1], "epoch": 1}).encode(), "^command args: expected an object"),
        (json.dumps({"type": "report", "epoch": True}).encode(), r"^command epoch: expected an integer .*\(got true\)"),
        (json.dumps({"type": "report"}).encode(), "^command epoch: missing"),
    ],
)
def test_malformed_commands_say_what_is_wrong(data, fragment):
    with pytest.raises(CommandFormatError, match=fragment):
        Command.from_znode("cmd-0000000001", data)


def test_command_names_carry_the_sequence():
    assert command_seq("cmd-0000000123") == 123
    with pytest.raises(CommandFormatError):
        command_seq("ack-0000000123")


def test_ack_round_trip_and_paths():
    ack = Ack(ok=False, detail="stale epoch 1 < 2", done_at=3.0)
    assert Ack.from_json(ack.to_json()) == ack
    assert commands_path("/sparkscale", "wc") == "/sparkscale/apps/wc/commands"


# -- expiry ---------------------------------------------------------------------------------------


def test_a_command_carries_its_expiry_through_its_znode_form():
    sent = Command(type="report", epoch=3, issued_at=100.0, expires_at=130.0)
    got = Command.from_znode("cmd-0000000007", sent.to_json())
    assert (got.issued_at, got.expires_at, got.deadline) == (100.0, 130.0, 130.0)
    assert json.loads(sent.to_json())["expires_at"] == 130.0


def test_an_older_senders_command_without_expires_at_stays_valid():
    body = {"type": "report", "args": {}, "epoch": 3, "issued_at": 100.0}
    old = Command.from_znode("cmd-0000000001", json.dumps(body).encode())
    assert old.expires_at is None and old.deadline == 100.0 + DEFAULT_COMMAND_TTL_S
    assert "expires_at" not in json.loads(old.to_json())  # written back as it came
    timeless = Command.from_znode("cmd-0000000002", json.dumps({"type": "report", "epoch": 3}).encode())
    assert timeless.deadline is None and timeless.overdue_s(1e12) is None  # neither time: never stale
    with pytest.raises(CommandFormatError, match=r"^command expires_at: expected a number"):
        Command.from_znode("cmd-0000000003", json.dumps({**body, "expires_at": "soon"}).encode())


def test_expiry_is_decided_with_a_grace_for_clock_differences():
    command = Command(type="report", issued_at=100.0, expires_at=130.0)
    assert command.overdue_s(129.0) is None
    assert command.overdue_s(130.0 + EXPIRY_GRACE_S) is None  # within the clocks' tolerance
    assert command.overdue_s(200.0) == pytest.approx(70.0)
    assert command.overdue_s(131.0, grace_s=0.0) == pytest.approx(1.0)


# -- the sender's side: ephemeral commands, cleanup -----------------------------------------------


def test_send_command_writes_an_ephemeral_command_that_expires_after_its_ttl():
    zk = FakeZk(session=0x42)
    name = send_command(zk, "/ss", "wc", "set_executors", {"total": 2}, epoch=5, ttl_s=30.0)
    data, stat = zk.get(f"/ss/apps/wc/commands/{name}")
    command = Command.from_znode(name, data)
    assert stat.ephemeralOwner == 0x42  # the agent checks this session holds the leader lock
    assert command.expires_at == pytest.approx(command.issued_at + 30.0)
    assert (command.type, command.args, command.epoch) == ("set_executors", {"total": 2}, 5)
    assert zk.exists("/ss/apps/wc/acks") is not None


def test_wait_ack_deletes_the_command_and_then_its_ack():
    zk = FakeZk()
    name = send_command(zk, "/ss", "wc", "report", {}, epoch=1)
    zk.create(f"/ss/apps/wc/acks/{name}", Ack(True, {"queries": []}, 1.0).to_json())
    ack = wait_ack(zk, "/ss", "wc", name, timeout_s=1.0)
    assert ack.ok and ack.detail == {"queries": []}
    assert zk.get_children("/ss/apps/wc/commands") == [] and zk.get_children("/ss/apps/wc/acks") == []


def test_an_unanswered_command_is_withdrawn_so_no_later_agent_runs_it():
    zk = FakeZk()
    name = send_command(zk, "/ss", "wc", "repartition", {"query": "q", "partitions": 8}, epoch=1, ttl_s=0.05)
    with pytest.raises(AckTimeout):
        wait_ack(zk, "/ss", "wc", name, timeout_s=0.05)
    assert zk.get_children("/ss/apps/wc/commands") == []


def test_an_ack_written_just_before_the_withdrawal_still_counts():
    zk = FakeZk()
    name = send_command(zk, "/ss", "wc", "report", {}, epoch=1)
    ack_path = f"/ss/apps/wc/acks/{name}"
    real_delete = zk.delete

    def agent_answers_first(path, version=-1, recursive=False):
        if path.endswith(f"/commands/{name}") and not zk.exists(ack_path):
            zk.create(ack_path, Ack(True, "late", 2.0).to_json())  # the agent was just done
        return real_delete(path)

    zk.delete = agent_answers_first
    zk.exists = lambda path, watch=None, _exists=zk.exists: None if path == ack_path else _exists(path)
    assert wait_ack(zk, "/ss", "wc", name, timeout_s=0.05).detail == "late"


# -- retention ------------------------------------------------------------------------------------


def names(*seqs: int) -> list[str]:
    return [f"cmd-{s:010d}" for s in seqs]


def test_prune_plan_drops_old_acks_each_after_its_command():
    now = 10_000.0
    acks = {"cmd-0000000001": now - 4000, "cmd-0000000002": now - 5}
    commands = {"cmd-0000000001": now - 4001, "cmd-0000000003": now - 4000}  # 3: pending, never acked
    plan = prune_plan(acks, commands, handled_seq=2, now=now)
    assert plan == [("commands", "cmd-0000000001"), ("acks", "cmd-0000000001")]


def test_prune_plan_keeps_the_newest_acks_and_never_a_fresh_one():
    now = 10_000.0
    acks = dict.fromkeys(names(*range(1, 8)), now - 100)
    plan = prune_plan(acks, {}, handled_seq=7, now=now, keep=3)
    assert plan == [("acks", n) for n in names(1, 2, 3, 4)]  # the 4 oldest: 3 stay
    young = dict.fromkeys(names(*range(1, 8)), now - 1)
    assert prune_plan(young, {}, handled_seq=7, now=now, keep=3) == []  # their senders may be reading them


def test_prune_plan_drops_handled_commands_whose_ack_is_gone_but_never_a_pending_one():
    now = 10_000.0
    commands = dict.fromkeys(names(4, 5, 6), now - 60)
    commands["not-a-command"] = now - 9999
    plan = prune_plan({}, commands, handled_seq=5, now=now)
    assert plan == [("commands", "cmd-0000000004"), ("commands", "cmd-0000000005")]
    assert prune_plan({"foreign": 0.0}, {}, handled_seq=99, now=now) == []


def test_prune_channel_deletes_what_the_plan_names():
    zk = FakeZk(now_ms=1_000_000)
    for _ in range(3):
        name = send_command(zk, "/ss", "wc", "report", {}, epoch=1)
        zk.create(f"/ss/apps/wc/acks/{name}", Ack(True, None, 1.0).to_json())
    # An hour and more later, from the agent's clock: every answered command and its ack goes.
    assert prune_channel(zk, "/ss", "wc", handled_seq=2, now=1_000.0 + RETAIN_MAX_AGE_S + 1) == 6
    assert zk.get_children("/ss/apps/wc/commands") == zk.get_children("/ss/apps/wc/acks") == []
    assert prune_channel(FakeZk(), "/ss", "nothing-yet", handled_seq=-1) == 0
