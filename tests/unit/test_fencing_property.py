"""The fencing rule as a property (issue 32, "Done when"): whatever the interleaving of leaders taking
and losing the lock, forgers planting lock nodes (even below the leader's, even with ACLs of their
own) and commands from anyone with any epoch (stale ones included), the agent accepts a command only
from the session of the live holder (the lowest lock node a daemon or operator identity made) with
that holder's epoch. Forgeries go straight into the fake ensemble, as if its ACLs had been got round."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from kazoo.security import ACL, make_digest_acl

from sparkscale.agent.admission import CommandGate
from sparkscale.protocol.commands import Command
from sparkscale.protocol.znodes import leader_path
from tests.unit.fakezk import FakeZk, Node
from tests.unit.identity_world import (
    AGENT_USER,
    APP,
    DAEMON_USER,
    FORGER_S,
    OPERATOR_USER,
    PASSWORDS,
    ROOT,
    as_role,
    world,
)

LEADERS = [(0x1001, DAEMON_USER), (0x1002, OPERATOR_USER), (0x1011, DAEMON_USER)]  # two daemons, the CLI
FORGED_ACLS: list[list[ACL] | None] = [
    None,  # open to all
    [make_digest_acl("sparkscale-forger", "pw", all=True)],
    [make_digest_acl(AGENT_USER, PASSWORDS[AGENT_USER], all=True)],  # the driver's own identity
    [make_digest_acl(DAEMON_USER, PASSWORDS[DAEMON_USER], read=True)],  # names the daemon, but not ALL
]

leader = st.integers(0, len(LEADERS) - 1)
steps = st.lists(st.one_of(
    st.tuples(st.just("take"), leader),
    st.tuples(st.just("lose"), leader),
    st.tuples(st.just("forge"), st.integers(-3, 40), st.integers(0, len(FORGED_ACLS) - 1)),
    st.tuples(st.just("command"), st.integers(-1, len(LEADERS) - 1), st.one_of(
        st.just("live"), st.just("own"), st.just("lowest"), st.integers(-1, 45))),
), max_size=40)


@settings(max_examples=300, deadline=None)
@given(steps)
def test_no_command_from_anyone_but_the_live_holder_is_ever_accepted(plan):
    w = world()
    clients: list[FakeZk] = [as_role(w.zk, session, user, policy=True) for session, user in LEADERS]
    legit: dict[str, tuple[int, int]] = {}  # lock node -> (sequence, session), as the leaders made them
    gate = CommandGate(w.agent, ROOT, APP)
    gate.load()
    parent = leader_path(ROOT, APP)

    def holder() -> tuple[int, int] | None:
        live = [legit[path] for path in legit if path in w.zk.nodes]
        return min(live) if live else None

    for step in plan:
        if step[0] == "take":
            client = clients[step[1]]
            if not any(s == client.session for p, (_q, s) in legit.items() if p in w.zk.nodes):
                path = client.create(f"{parent}/0123abcd__lock__", b"", ephemeral=True, sequence=True)
                legit[path] = (int(path[-10:]), client.session)
        elif step[0] == "lose":
            w.zk.expire(clients[step[1]].session)
        elif step[0] == "forge":
            seq, acl = step[1], FORGED_ACLS[step[2]]
            name = f"f{len(w.zk.nodes)}__lock__{seq:010d}" if seq >= 0 else f"f__lock__-{-seq:09d}"
            w.zk.nodes[f"{parent}/{name}"] = Node(b"", 0, FORGER_S, w.zk.now_ms, acl)
        else:
            _kind, who, claim = step
            sender = FORGER_S if who < 0 else clients[who].session
            live = holder()
            if claim == "live":
                epoch = live[0] if live else 0
            elif claim == "lowest":  # what the lowest name claims, forgeries included (the old rule's holder)
                seqs = [int(name.rsplit("__lock__", 1)[1]) for name in w.zk._children(parent)]
                epoch = min(seqs) if seqs else 0
            elif claim == "own":
                own = [q for p, (q, s) in legit.items() if s == sender and p in w.zk.nodes]
                epoch = own[0] if own else 0
            else:
                epoch = claim
            highest = gate.highest_epoch
            reason = gate.fenced(Command("report", epoch=max(epoch, 0)), sender)
            if reason is None:
                assert live is not None, "accepted with no leader"
                assert (max(epoch, 0), sender) == live, f"accepted {epoch} from {sender:#x}, live holder {live}"
                assert max(epoch, 0) >= highest, "accepted a stale epoch"
