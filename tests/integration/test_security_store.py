"""Issue 32, the store seam for real, on Redis and ZooKeeper alone (no Spark): one daemon (`sparkscale
run`) manages three apps that never run, while the tests put poisoned records where it reads them:

- a `file://` driver REST URL in Redis: refused (logged once with the app's key), never opened; the
  app's cycles go on as for a driver that does not answer, and so does the daemon;
- an executor shape out of bounds in Redis: read as none (logged once), the app's cycles go on;
- a malformed manual request znode (a list for `by`, a NaN expiry): answered "not a valid request"
  and removed (logged once), and the app's next cycles still run as leader.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from sparkscale import zkconn
from sparkscale.config import Config, load_config
from sparkscale.localenv import LocalEnvironment
from sparkscale.localenv.ports import isolated_overrides
from sparkscale.model.manual_request import ManualResult
from sparkscale.protocol.keys import driver_key, shape_key
from sparkscale.protocol.znodes import requests_path, results_path
from sparkscale.redisconn import connect
from sparkscale_lab.bench.daemon_process import DaemonProcess
from tests.conftest import wait_until

pytestmark = pytest.mark.integration

ROOT = "/sparkscale-seam"
FILER, POISONED, ASKED = "filer", "poisoned", "asked"  # configured, never started


@dataclass
class SeamEnv:
    cfg: Config
    daemon: DaemonProcess
    canary: Path  # what the file:// URL names: a daemon that opened it would have read it


@pytest.fixture(scope="module")
def seam(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeamEnv]:
    """ZooKeeper and Redis, the poisoned Redis records, then one daemon over the three apps."""
    work = tmp_path_factory.mktemp("seam")
    apps = ", ".join(f"{{name: {name}, pipeline: wordcount}}" for name in (FILER, POISONED, ASKED))
    overrides = [*isolated_overrides(work / "run"), f"zookeeper.root={ROOT}", f"apps=[{apps}]",
                 "loop.interval_s=1", "metrics.enabled=false", "logging.level=debug"]
    cfg = load_config(None, overrides)
    env = LocalEnvironment(cfg)
    daemon = None
    try:
        statuses = {s.name: s for s in env.up(only=("zookeeper", "redis"))}
        assert statuses["redis"].answers and statuses["zookeeper"].answers, statuses
        canary = work / "canary"
        canary.write_text("secret\n")
        client = connect(cfg.redis)
        prefix = cfg.redis.key_prefix
        client.set(driver_key(prefix, FILER), json.dumps({"app": FILER, "ui_url": f"file://{canary}"}))
        client.hset(shape_key(prefix, POISONED), mapping={"executor_cores": "9" * 30, "executor_memory_mb": "-5",
                                                          "migration": "mig-poison"})
        client.close()
        daemon = DaemonProcess(None, overrides, work / "daemon.jsonl", "seam-daemon")
        stderr = daemon.stderr_path
        for app in (FILER, POISONED, ASKED):
            wait_until(lambda app=app: daemon.events("cycle.app_absent", app=app, role="leader"), 60,
                       f"a leader cycle of {app}", story=lambda: stderr.read_text()[-3000:])
        yield SeamEnv(cfg, daemon, canary)
    finally:
        if daemon is not None:
            daemon.stop()
        env.down()


def _cycles(seam: SeamEnv, app: str) -> int:
    return len(seam.daemon.events("cycle.app_absent", app=app))


def _keeps_cycling(seam: SeamEnv, app: str, more: int = 3) -> None:
    seen = _cycles(seam, app)
    wait_until(lambda: _cycles(seam, app) >= seen + more, 30, f"{more} more cycles of {app}")
    assert seam.daemon.proc.poll() is None


def test_a_file_url_in_redis_is_refused_never_opened_and_the_daemon_keeps_cycling(seam: SeamEnv) -> None:
    key = driver_key(seam.cfg.redis.key_prefix, FILER)
    wait_until(lambda: seam.daemon.events("store.bad_record", key=key), 30, "the URL's refusal")
    _keeps_cycling(seam, FILER)
    [refused] = seam.daemon.events("store.bad_record", key=key)  # once, however many cycles read it
    assert refused["record"] == f"file://{seam.canary}" and "scheme 'file'" in refused["problem"]
    absent = seam.daemon.events("cycle.app_absent", app=FILER)[-1]
    assert "REST URL is refused" in absent["reason"]  # reported as a driver that cannot be reached, with why
    assert not seam.daemon.events("cycle.error") and not seam.daemon.events("cycle.failed")


def test_a_poisoned_shape_is_skipped_once_and_the_app_keeps_cycling(seam: SeamEnv) -> None:
    key = shape_key(seam.cfg.redis.key_prefix, POISONED)
    wait_until(lambda: seam.daemon.events("store.bad_record", key=key), 30, "the shape's refusal")
    _keeps_cycling(seam, POISONED)
    [bad] = seam.daemon.events("store.bad_record", key=key)
    assert bad["record"] == "mig-poison" and "executor_cores" in bad["problem"]
    assert not seam.daemon.events("cycle.error", app=POISONED)


def test_a_malformed_manual_request_is_refused_and_the_next_cycle_still_runs_for_the_app(seam: SeamEnv) -> None:
    zk = zkconn.client(seam.cfg.zookeeper)
    zk.start(timeout=15)
    try:
        body = b'{"to": 2, "by": ["x"], "requested_at": 1, "expires_at": "nan"}'
        path = zk.create(f"{requests_path(ROOT, ASKED)}/req-", body, sequence=True, makepath=True)
        name = path.rsplit("/", 1)[1]
        answer = wait_until(lambda: _data(zk, f"{results_path(ROOT, ASKED)}/{name}"), 30, "the request's answer")
        assert ManualResult.from_json(answer) == ManualResult(False, "not a valid request")
        assert zk.exists(path) is None  # removed: not read again
        _keeps_cycling(seam, ASKED)
        assert seam.daemon.events("cycle.app_absent", app=ASKED)[-1]["role"] == "leader"
        assert len(seam.daemon.events("store.bad_record", key=requests_path(ROOT, ASKED), record=name)) == 1
        assert not seam.daemon.events("cycle.error", app=ASKED)
    finally:
        zk.stop()
        zk.close()


def _data(zk: KazooClient, path: str) -> bytes | None:
    stat = zk.exists(path)
    return None if stat is None else bytes(zk.get(path)[0])
