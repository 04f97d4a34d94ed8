"""Fencing by identity (issue 32, "Fencing"): with role identities the live lock holder is the lowest
lock node the daemon or the operator owns by its ACL, and an ack counts only if the app's agent made
it. Forgeries are put straight into the fake ensemble (as if its ACLs had been got round), to show
the rule holds even then."""

from __future__ import annotations

from kazoo.security import make_digest_acl

from sparkscale.agent.admission import CommandGate
from sparkscale.protocol.acls import role_identities_on
from sparkscale.protocol.commands import Ack, AckTimeout, Command, send_command, trusted_ack, wait_ack
from sparkscale.protocol.fencing import holder_node, read_live_lock
from sparkscale.protocol.znodes import acks_path, leader_path
from tests.unit.fakezk import FakeZk, Node
from tests.unit.identity_world import APP, FORGER_S, ROOT, world


def forge(zk: FakeZk, path: str, data: bytes = b"", acl=None, owner: int = FORGER_S) -> str:
    zk.nodes[path] = Node(data, 0, owner, zk.now_ms, acl)
    return path


def take_lock(client: FakeZk) -> tuple[str, int]:
    client._seq.setdefault(leader_path(ROOT, APP), 7)  # above the forgeries' 0 and -1
    path = client.create(f"{leader_path(ROOT, APP)}/0123abcd__lock__", b"daemon", ephemeral=True, sequence=True)
    return path, int(path[-10:])


def test_only_role_identity_clients_check_by_acl():
    w = world()
    assert role_identities_on(w.daemon) and role_identities_on(w.agent)
    assert not role_identities_on(w.anon) and not role_identities_on(FakeZk())


def test_a_forged_lowest_lock_node_neither_commands_nor_hides_the_leader():
    w = world()
    real, epoch = take_lock(w.daemon)
    forged = forge(w.zk, f"{leader_path(ROOT, APP)}/x__lock__0000000000",
                   acl=[make_digest_acl("sparkscale-forger", "pw", all=True)])
    forge(w.zk, f"{leader_path(ROOT, APP)}/y__lock__0000000000".replace("0000000000", "-000000001"))  # open ACL
    live = read_live_lock(w.agent, ROOT, APP)
    assert live is not None and live.path == real and live.epoch == epoch and live.owner == w.daemon.session
    gate = CommandGate(w.agent, ROOT, APP)
    gate.load()
    refused = gate.fenced(Command("report", epoch=0), FORGER_S)
    assert refused == f"not the current leader: epoch 0, live lock epoch {epoch}"
    assert gate.fenced(Command("report", epoch=epoch), FORGER_S).startswith("not the current leader: written by")
    assert gate.fenced(Command("report", epoch=epoch), w.daemon.session) is None  # the real leader still acts
    # The old rule (the lowest name) would have picked a forgery.
    assert holder_node(w.zk._children(leader_path(ROOT, APP))) != real.rsplit("/", 1)[1]
    w.zk.expire(w.daemon.session)
    assert read_live_lock(w.agent, ROOT, APP) is None  # only forgeries left: nobody leads
    del w.zk.nodes[forged]


def test_the_operator_holding_the_lock_leads_too():
    w = world()
    _path, epoch = take_lock(w.operator)
    assert read_live_lock(w.agent, ROOT, APP).owner == w.operator.session
    assert CommandGate(w.agent, ROOT, APP).fenced(Command("report", epoch=epoch), w.operator.session) is None


def test_an_ack_counts_only_if_the_apps_agent_made_it():
    w = world()
    cmd = send_command(w.daemon, ROOT, APP, "report", {}, epoch=1)
    path = f"{acks_path(ROOT, APP)}/{cmd}"
    forge(w.zk, path, Ack(True, "forged").to_json(), acl=[make_digest_acl("sparkscale-agent-other", "x", all=True)],
          owner=0)
    assert not trusted_ack(w.daemon, APP, path) and not trusted_ack(w.agent, APP, path)
    try:
        wait_ack(w.daemon, ROOT, APP, cmd, timeout_s=0.05)
        raise AssertionError("a forged ack was believed")
    except AckTimeout:
        pass
    assert path not in w.zk.nodes  # the forgery is gone: the agent's own ack can be written
    cmd = send_command(w.daemon, ROOT, APP, "report", {}, epoch=1)
    w.agent.create(f"{acks_path(ROOT, APP)}/{cmd}", Ack(True, "mine").to_json())
    assert wait_ack(w.daemon, ROOT, APP, cmd, timeout_s=1.0).detail == "mine"
    assert trusted_ack(FakeZk(), APP, "/nowhere")  # without identities: as before, every ack counts
