"""A ZooKeeper (tests/unit/fakezk.py, ACLs enforced) laid out as `pipeline submit` leaves it with
identities on (protocol/acls.py), and a client per role: shared by the ACL, fencing and property tests."""

from __future__ import annotations

from dataclasses import dataclass

from kazoo.security import make_digest_acl_credential

from sparkscale.protocol.acls import (
    RoleIds,
    acl_for_path,
    acl_layout,
    agent_acl,
    control_acl,
    parse_readers,
    readers_data,
)
from sparkscale.protocol.znodes import app_path
from tests.unit.fakezk import FakeZk

ROOT, APP = "/ss", "wc"
DAEMON_USER, OPERATOR_USER, AGENT_USER = "sparkscale-daemon", "sparkscale-operator", f"sparkscale-agent-{APP}"
PASSWORDS = {DAEMON_USER: "d-pass", OPERATOR_USER: "o-pass", AGENT_USER: "a-pass", "sparkscale-agent-other": "x-pass"}
DAEMON_S, OPERATOR_S, AGENT_S, ANON_S, FORGER_S = 0x1001, 0x1002, 0x3003, 0x4004, 0x5005


def digest_id(user: str) -> str:
    return str(make_digest_acl_credential(user, PASSWORDS[user]))


IDS = RoleIds(digest_id(DAEMON_USER), digest_id(OPERATOR_USER), digest_id(AGENT_USER))


class PolicyFakeZk(FakeZk):
    """A daemon's or operator's client: creates by `acl_for_path` as zkconn.PolicyClient does."""

    def create(self, path: str, value: bytes = b"", acl=None, ephemeral: bool = False, sequence: bool = False,
               makepath: bool = False) -> str:
        return super().create(path, value, acl or acl_for_path(ROOT, path, IDS), ephemeral, sequence, makepath)


@dataclass
class World:
    zk: FakeZk  # the ensemble, as a superuser would see it (no ACL checks: no auth on an open root)
    daemon: FakeZk
    operator: FakeZk
    agent: FakeZk
    anon: FakeZk


def as_role(zk: FakeZk, session: int, user: str, policy: bool) -> FakeZk:
    other = zk.as_identity(session, user, PASSWORDS[user])
    if policy:
        other.__class__ = PolicyFakeZk
    return other


def world() -> World:
    """Root and app laid out by the operator (identity_setup.secure_cluster and provision_app)."""
    zk = FakeZk(session=OPERATOR_S)
    operator = as_role(zk, OPERATOR_S, OPERATOR_USER, policy=True)
    operator.create(ROOT, b"", acl=control_acl(IDS))
    for path, acl in acl_layout(ROOT, APP, IDS).items():
        if path in operator.nodes:
            operator.set_acls(path, acl)
        else:
            operator.create(path, b"", acl=acl)
    agent = as_role(zk, AGENT_S, AGENT_USER, policy=False)
    operator.set(app_path(ROOT, APP), readers_data(IDS))
    agent.default_acl = agent_acl(IDS.agent or "", parse_readers(agent.get(app_path(ROOT, APP))[0]) or [])
    return World(zk, as_role(zk, DAEMON_S, DAEMON_USER, policy=True), operator, agent, zk.as_session(ANON_S))
