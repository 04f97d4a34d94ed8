"""ZooKeeper paths shared by the daemon and the in-driver agent (docs/internals.md, "ZooKeeper").

`root` is `zookeeper.root` from the config; every app has its own subtree `root/apps/{app}`.
"""

from __future__ import annotations


def app_path(root: str, app: str) -> str:
    return f"{root.rstrip('/')}/apps/{app}"


def commands_path(root: str, app: str) -> str:
    return f"{app_path(root, app)}/commands"


def acks_path(root: str, app: str) -> str:
    return f"{app_path(root, app)}/acks"


def agent_path(root: str, app: str) -> str:
    """The agent's ephemeral znode: present while the agent of `app` is alive."""
    return f"{app_path(root, app)}/agent"


def agent_epoch_path(root: str, app: str) -> str:
    """The highest leader epoch the agent accepted; kept across agent restarts."""
    return f"{app_path(root, app)}/agent_epoch"


def leader_path(root: str, app: str) -> str:
    """The app's leader lock (kazoo Lock): the lowest sequence holds it; its sequence is the epoch."""
    return f"{app_path(root, app)}/leader"


def journal_path(root: str, app: str) -> str:
    """The journal of the app's last migration (JSON)."""
    return f"{app_path(root, app)}/migration"


def requests_path(root: str, app: str) -> str:
    """Manual requests from the operator's CLI to the leader (sequential znodes `req-`)."""
    return f"{app_path(root, app)}/requests"


def results_path(root: str, app: str) -> str:
    """The leader's answers to manual requests, under the request's name."""
    return f"{app_path(root, app)}/request_results"
