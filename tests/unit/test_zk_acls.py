"""Who may do what under the ZooKeeper root with identities on (protocol/acls.py): the layout as a
table, then each role's probes against it on the fake ensemble, which checks ACLs as ZooKeeper does."""

from __future__ import annotations

import pytest
from kazoo.exceptions import NoAuthError
from kazoo.security import Permissions

from sparkscale.protocol.acls import (
    RoleIds,
    acl_for_path,
    acl_layout,
    acl_names,
    agent_acl,
    app_of,
    control_acl,
    parse_readers,
    readers_data,
)
from sparkscale.protocol.commands import Ack, send_command
from sparkscale.protocol.znodes import acks_path, agent_epoch_path, agent_path, commands_path, journal_path
from tests.unit.identity_world import APP, IDS, ROOT, world

R, W, C, D, A, ALL = (Permissions.READ, Permissions.WRITE, Permissions.CREATE, Permissions.DELETE,
                      Permissions.ADMIN, Permissions.ALL)


def perms(acl) -> dict[str, int]:
    who = {IDS.daemon: "daemon", IDS.operator: "operator", IDS.agent: "agent"}
    return {who[entry.id.id]: entry.perms for entry in acl}


def test_the_layout_gives_each_role_what_it_needs_and_no_more():
    layout = {path: perms(acl) for path, acl in acl_layout(ROOT, APP, IDS).items()}
    everything = {"daemon": ALL, "operator": ALL}
    app = "/ss/apps/wc"
    assert layout == {
        "/ss": everything,
        "/ss/apps": everything,
        app: {**everything, "agent": R | C},  # the app's directory: its ACL read, its own znodes made
        f"{app}/commands": {**everything, "agent": R | D},  # read; delete those handled (pruning)
        f"{app}/leader": {**everything, "agent": R},
        f"{app}/acks": {**everything, "agent": R | C | D},
        f"{app}/migration": everything, f"{app}/requests": everything, f"{app}/request_results": everything,
    }
    assert list(layout)[:3] == ["/ss", "/ss/apps", app]  # parents first


def test_what_the_daemon_creates_is_readable_by_the_agent_where_it_must_be():
    assert perms(acl_for_path(ROOT, "/ss/apps/wc/commands/cmd-", IDS))["agent"] == R
    assert perms(acl_for_path(ROOT, "/ss/apps/wc/leader/x__lock__", IDS))["agent"] == R
    assert "agent" not in perms(acl_for_path(ROOT, "/ss/apps/wc/requests/req-", IDS))
    assert perms(acl_for_path(ROOT, "/ss/cluster_view", IDS)) == {"daemon": ALL, "operator": ALL}
    assert app_of(ROOT, "/ss/apps/wc/acks/x") == "wc" and app_of(ROOT, "/ss/apps") is None
    no_agent = RoleIds(IDS.daemon, IDS.operator)  # an app submitted before identities: no agent entry
    assert "agent" not in perms(acl_for_path(ROOT, "/ss/apps/wc/commands", no_agent))
    assert perms(control_acl(IDS)) == {"daemon": ALL, "operator": ALL}


def test_the_agent_creates_with_its_own_acl_the_others_may_read():
    readers = parse_readers(readers_data(IDS))
    assert readers == [IDS.daemon, IDS.operator]
    assert perms(agent_acl(IDS.agent, readers)) == {"agent": ALL, "daemon": R, "operator": R}
    assert acl_names(agent_acl(IDS.agent, readers), {"sparkscale-agent-wc"})
    assert not acl_names(agent_acl(IDS.agent, readers), {"sparkscale-daemon"})  # READ is not ALL


@pytest.mark.parametrize("data", [
    b"", b"\xff", b"[]", b'{"readers": []}', b'{"readers": "sparkscale-daemon:x"}',
    # What ZooKeeper's getACL shows a client without ADMIN: the hash as `x`; it must not be taken.
    b'{"readers": ["sparkscale-daemon:x"]}',
    b'{"readers": ["someone-else:' + b"A" * 27 + b'="]}',
    b'{"readers": [' + b",".join([b'"sparkscale-daemon:' + b"A" * 27 + b'="'] * 9) + b"]}",
])
def test_an_app_directory_whose_data_names_no_valid_readers_is_refused(data):
    assert parse_readers(data) is None


def test_the_agent_can_do_its_job_and_nothing_else():
    w = world()
    cmd = send_command(w.daemon, ROOT, APP, "report", {}, epoch=1)
    agent = w.agent
    assert agent.get_children(commands_path(ROOT, APP)) == [cmd]
    agent.get(f"{commands_path(ROOT, APP)}/{cmd}")
    agent.create(f"{acks_path(ROOT, APP)}/{cmd}", Ack(True, "ok").to_json())
    agent.create(agent_path(ROOT, APP), b"{}", ephemeral=True)
    agent.create(agent_epoch_path(ROOT, APP), b"1")
    agent.set(agent_epoch_path(ROOT, APP), b"2")
    w.daemon.get(f"{acks_path(ROOT, APP)}/{cmd}")  # the sender reads the ack and deletes both
    agent.delete(f"{acks_path(ROOT, APP)}/{cmd}")  # pruning
    agent.delete(f"{commands_path(ROOT, APP)}/{cmd}")
    for forbidden in (
        lambda: agent.create(f"{commands_path(ROOT, APP)}/cmd-", b"{}", sequence=True),  # a command
        lambda: agent.create(f"{ROOT}/apps/{APP}/leader/x__lock__0000000000", b"", ephemeral=True),  # a lock node
        lambda: agent.create(journal_path(ROOT, APP) + "/x", b""),
        lambda: agent.set(journal_path(ROOT, APP), b"{}"),  # the journal
        lambda: agent.get_children(f"{ROOT}/apps/{APP}/requests"),
        lambda: agent.create(f"{ROOT}/apps/other", b""),  # another app
        lambda: agent.set_acls(f"{ROOT}/apps/{APP}", []),  # its own permissions
        lambda: w.daemon.set(agent_epoch_path(ROOT, APP), b"0"),  # only the agent raises its epoch
    ):
        with pytest.raises(NoAuthError):
            forbidden()


def test_an_unauthenticated_client_cannot_create_under_the_root():
    w = world()
    for path in (f"{ROOT}/x", f"{ROOT}/apps/x", f"{ROOT}/apps/{APP}/leader/x__lock__0000000000",
                 f"{ROOT}/apps/{APP}/acks/cmd-0000000000"):
        with pytest.raises(NoAuthError):
            w.anon.create(path, b"")
    with pytest.raises(NoAuthError):
        w.anon.get_children(ROOT)
