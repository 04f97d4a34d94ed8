"""The daemon's life around the loop, with real ZooKeeper and Redis: an app that is not running is
reported and not scaled, SIGHUP reloads the config (and refuses a broken one), metrics are served,
and an unreachable Redis or ZooKeeper means back-off and no action, never a crash."""

from __future__ import annotations

import signal
import urllib.request

import pytest
from kazoo.client import KazooClient

from sparkscale.localenv.ports import free_port
from sparkscale.protocol.znodes import commands_path
from tests.conftest import wait_until
from tests.integration.test_daemon import DaemonProcess

pytestmark = pytest.mark.integration

BASE = """
apps:
  - name: ghost
    pipeline: wordcount
loop: {interval_s: 1.0}
metrics: {port: 0}
"""
RELOADED = """
apps:
  - {name: ghost, pipeline: wordcount}
  - {name: ghost2, pipeline: wordcount}
loop: {interval_s: 1.0, dry_run: true}
metrics: {port: 0}
"""


@pytest.fixture
def setup(embedded_env, tmp_path):
    path = tmp_path / "sparkscale.yaml"
    path.write_text(BASE)
    from sparkscale.config import load_config

    overrides = [*embedded_env.overrides, "logging.stderr_format=json", f"redis.key_prefix=lc{tmp_path.name[-6:]}:",
                 f"zookeeper.root=/lc{tmp_path.name[-6:]}"]
    return load_config(path, overrides), str(path), overrides, tmp_path


def test_absent_app_is_reported_sighup_reloads_and_metrics_are_served(setup):
    _cfg, _path, _overrides, work = setup
    daemon = DaemonProcess(setup, "life")
    try:
        wait_until(lambda: len(daemon.events("cycle.app_absent", app="ghost")) >= 2, 60, "ghost reported absent")
        assert daemon.events("cycle.app_absent")[0]["action"] == "none"
        assert not daemon.events("cycle")  # no decision without a snapshot
        url = daemon.events("daemon.start")[0]["metrics"]
        body = urllib.request.urlopen(url, timeout=10).read().decode()
        assert 'sparkscale_cycles_total{app="ghost",result="absent"}' in body
        assert 'sparkscale_leader{app="ghost"} 1.0' in body

        (work / "sparkscale.yaml").write_text(RELOADED)
        daemon.proc.send_signal(signal.SIGHUP)
        reloaded = wait_until(lambda: daemon.events("config.reloaded"), 30, "the reload")[0]
        assert reloaded["added"] == ["ghost2"] and reloaded["dry_run"] is True
        wait_until(lambda: daemon.events("cycle.app_absent", app="ghost2"), 30, "cycles of the added app")

        (work / "sparkscale.yaml").write_text("loop: {interval_s: -1}\n")
        daemon.proc.send_signal(signal.SIGHUP)
        refused = wait_until(lambda: daemon.events("config.reload_refused"), 30, "the refusal")[0]
        assert "loop.interval_s" in refused["error"]
        seen = len(daemon.events("cycle.app_absent", app="ghost2"))
        wait_until(lambda: len(daemon.events("cycle.app_absent", app="ghost2")) > seen + 1, 30,
                   "the old config to keep running")
        assert daemon.proc.poll() is None
    finally:
        daemon.stop()
    assert daemon.proc.returncode == 0
    assert daemon.events("daemon.stop")


def test_unreachable_redis_backs_off_and_takes_no_action(setup, embedded_env):
    cfg, *_ = setup
    daemon = DaemonProcess(setup, "noredis", [f"redis.port={free_port()}", "redis.socket_timeout_s=0.5"])
    zk = KazooClient(hosts=cfg.zookeeper.hosts)
    zk.start(timeout=15)
    try:
        events = wait_until(lambda: (e := daemon.events("cycle.unreachable", app="ghost")) and len(e) >= 3 and e,
                            60, "three back-offs")
        waits = [e["retry_in_s"] for e in events[:3]]
        assert waits == sorted(waits) and waits[0] < waits[2], waits  # exponential back-off
        assert all(e["action"] == "none" for e in events)
        assert daemon.proc.poll() is None
        # It took the lock (ZooKeeper is fine) but wrote no command: the action log is unreachable.
        assert not zk.exists(commands_path(cfg.zookeeper.root, "ghost")) or \
            not zk.get_children(commands_path(cfg.zookeeper.root, "ghost"))
    finally:
        daemon.stop()
        zk.stop()
    assert daemon.proc.returncode == 0


def test_unreachable_zookeeper_means_standby(setup):
    daemon = DaemonProcess(setup, "nozk", [f"zookeeper.hosts=127.0.0.1:{free_port()}"])
    try:
        absent = wait_until(lambda: (e := daemon.events("cycle.app_absent", app="ghost")) and len(e) >= 2 and e,
                            60, "cycles without ZooKeeper")
        assert {e["role"] for e in absent} == {"standby"}
        assert not daemon.events("leader.acquired")
    finally:
        daemon.stop()
    assert daemon.proc.returncode == 0
