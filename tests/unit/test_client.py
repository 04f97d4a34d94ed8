"""The client API the CLI is a thin layer over: its errors say what to do (BadRequest: fix the
request, exit 2; Unavailable: the cluster, exit 1), before anything is changed."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from kazoo.handlers.threading import KazooTimeoutError

import sparkscale.zkconn
from sparkscale.client import BadRequest, Client, Unavailable
from sparkscale.client.migrations import MigrationRequest
from sparkscale.config import load_config
from tests.unit.fakezk import FakeZk


class StartedZk(FakeZk):
    def start(self, timeout: float = 0) -> None:
        pass

    def stop(self) -> None:
        pass


class DownZk(StartedZk):
    def start(self, timeout: float = 0) -> None:
        raise KazooTimeoutError("down")


@pytest.fixture
def client() -> Client:
    return Client(load_config(None, ["apps=[{name: a, pipeline: wordcount}]"]), by="test")


def test_an_unknown_app_is_a_bad_request_naming_the_configured_ones(client):
    with pytest.raises(BadRequest, match=r"no managed app named 'nope' \(configured: a\).*pipeline name"):
        client.migrate(MigrationRequest("nope", partitions=4), timeout_s=1)
    assert BadRequest.exit_code == 2 and Unavailable.exit_code == 1


def test_an_unknown_migration_is_a_bad_request_and_nothing_is_written(client, monkeypatch):
    zk = StartedZk()
    monkeypatch.setattr(sparkscale.zkconn, "client", lambda _cfg: zk)
    with pytest.raises(BadRequest, match=r"no journaled migration mig-1 to resume .*a: none"):
        client.operate_migration(None, "mig-1", abort=False, timeout_s=1)
    assert zk.writes == []


def test_an_unreachable_zookeeper_is_unavailable_naming_where_it_was_looked_for(client, monkeypatch):
    monkeypatch.setattr(sparkscale.zkconn, "client", lambda _cfg: DownZk())
    with pytest.raises(Unavailable, match=r"ZooKeeper at .* is unreachable"):
        client.operate_migration("a", "mig-1", abort=True, timeout_s=1)


def test_the_cli_says_a_client_error_and_exits_with_its_code(monkeypatch):
    from sparkscale.cli import main

    monkeypatch.setattr(sparkscale.zkconn, "client", lambda _cfg: DownZk())
    out = CliRunner(env={"SPARKSCALE_CONFIG": None}).invoke(main, ["migrate", "--resume", "mig-1"])
    assert out.exit_code == 1 and "is unreachable" in out.output
    out = CliRunner(env={"SPARKSCALE_CONFIG": None}).invoke(main, ["scale-executors", "--app", "zz", "--to", "2"])
    assert out.exit_code == 2 and "no managed app named 'zz'" in out.output
