"""The command/ack message formats of the control channel (pure parsing, no ZooKeeper)."""

from __future__ import annotations

import json

import pytest

from sparkscale.protocol.commands import Ack, Command, CommandFormatError, command_seq
from sparkscale.protocol.znodes import commands_path


def test_command_round_trips_through_its_znode_form():
    sent = Command(type="set_executors", args={"total": 4}, epoch=7, issued_at=12.5)
    got = Command.from_znode("cmd-0000000042", sent.to_json())
    assert (got.type, got.args, got.epoch, got.issued_at, got.seq) == ("set_executors", {"total": 4}, 7, 12.5, 42)


@pytest.mark.parametrize(
    "data, fragment",
    [
        (b"not json", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (json.dumps({"args": {}, "epoch": 1}).encode(), "no 'type'"),
        (json.dumps({"type": "report", "args": [1], "epoch": 1}).encode(), "'args' is not a JSON object"),
        (json.dumps({"type": "report", "epoch": True}).encode(), "'epoch' must be an integer"),
        (json.dumps({"type": "report"}).encode(), "'epoch' must be an integer"),
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
