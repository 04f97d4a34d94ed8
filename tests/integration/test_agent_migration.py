"""Stateful-query migrations through the control agent, for real: a submitted wordcount on the
embedded environment is stopped (at a batch boundary, then mid-batch), its RocksDB state is
repartitioned offline, and it is started again with the new count while the driver keeps running;
the output is then checked record by record. The steps depend on each other, so this is one test.
"""

from __future__ import annotations

import json
import threading
import time
from contextlib import ExitStack
from pathlib import Path

import psutil
import pytest
import redis
from kazoo.client import KazooClient

from sparkscale.apps.submit import checkpoint_root, stop, submit
from sparkscale.config import Config, load_config
from sparkscale.protocol.commands import Ack, send_command, wait_ack
from sparkscale.protocol.keys import partitions_key
from sparkscale.protocol.znodes import agent_path
from sparkscale.redisconn import connect
from sparkscale.store.redis_queries import read_queries
from sparkscale_lab.pipelines.check import drained, verify_app
from sparkscale_lab.pipelines.loadgen import run_loadgen
from tests.conftest import leader_lock, wait_until

pytestmark = pytest.mark.integration

APP = "migr"
QUERY = "counts"  # wordcount's query
CONFIG = f"""
apps:
  - name: {APP}
    pipeline: wordcount
    min_executors: 1
    max_executors: 2
    initial_executors: 2
    executor_memory_mb: 512
    source_partitions: 2
    shuffle_partitions: 4
    max_records_per_batch: 2000
"""
LOAD = "50"  # records per second until stopped: well below what 2 executors process here
ACK_TIMEOUT_S = 120.0


@pytest.fixture(scope="module")
def setup(embedded_env, tmp_path_factory) -> tuple[Config, str, list[str]]:
    path = tmp_path_factory.mktemp("migration") / "sparkscale.yaml"
    path.write_text(CONFIG)
    overrides = [*embedded_env.overrides, "logging.stderr_format=json"]
    return load_config(path, overrides), str(path), overrides


class Channel:
    """Commands to the app's agent exactly as the daemon sends them: holding the app's leader lock,
    at its epoch (the agent runs only the live lock holder's commands)."""

    def __init__(self, cfg: Config):
        self.root = cfg.zookeeper.root
        self.zk = KazooClient(hosts=cfg.zookeeper.hosts, timeout=10)
        self.zk.start(timeout=15)
        self._held = ExitStack()
        self.epoch = self._held.enter_context(leader_lock(self.zk, self.root, APP))

    def send(self, type: str, **args) -> Ack:
        name = send_command(self.zk, self.root, APP, type, args, self.epoch, ttl_s=ACK_TIMEOUT_S)
        return wait_ack(self.zk, self.root, APP, name, ACK_TIMEOUT_S)

    def ok(self, type: str, **args) -> dict:
        ack = self.send(type, **args)
        assert ack.ok, f"{type} {args}: {ack.detail}"
        return ack.detail

    def refused(self, type: str, **args) -> str:
        ack = self.send(type, **args)
        assert not ack.ok, f"{type} {args} was carried out: {ack.detail}"
        return ack.detail

    def driver(self) -> tuple[int, int]:
        """The driver's pid (from the agent znode) and the znode's creation zxid."""
        data, stat = self.zk.get(agent_path(self.root, APP))
        return json.loads(data)["pid"], stat.czxid

    def close(self) -> None:
        self._held.close()
        self.zk.stop()
        self.zk.close()


def progress(client: redis.Redis, cfg: Config) -> dict[str, str]:
    return client.hgetall(f"{cfg.redis.key_prefix}{APP}:progress:{QUERY}")


def running_with(client: redis.Redis, cfg: Config, run_id: str, partitions: int, after_batch: int):
    """A condition: the restarted run published a batch past `after_batch` with `partitions` state partitions."""

    def check() -> bool:
        p = progress(client, cfg)
        return (p.get("run_id") == run_id and int(p.get("batch_id", -1)) > after_batch
                and int(p.get("state_partitions", 0)) == partitions)

    return check


def last_batch(checkpoint: Path, log: str) -> int:
    return max(int(f.name) for f in (checkpoint / log).iterdir() if f.name.isdigit())


def test_stop_repartition_restart_then_abort_repartition_restart(setup, record_property):
    cfg, path, overrides = setup
    client = connect(cfg.redis)
    checkpoint = checkpoint_root(cfg, cfg.app(APP)) / QUERY
    submit(cfg, APP, path, overrides)
    channel = Channel(cfg)
    halt = threading.Event()
    loading = threading.Thread(target=run_loadgen, args=(cfg, APP, LOAD), kwargs={"seed": 11, "stop": halt})
    loading.start()
    try:
        # The first batch of a fresh driver takes ~50 s here (Python workers, RocksDB): a committed
        # batch is what a repartition needs.
        wait_until(lambda: int(progress(client, cfg).get("batch_id", -1)) >= 1, 120, "the first batches of counts")
        assert int(progress(client, cfg)["state_partitions"]) == 4
        driver_pid, znode = channel.driver()
        # The agent lists the query with what a migration needs: where its checkpoint is, that the
        # agent saw it started (so it can restart it) and that its sources honour the pause key.
        info = read_queries(client, cfg.redis.key_prefix, APP)[QUERY]
        assert (info.status, info.migratable, info.pausable, info.sources) == ("active", True, True, ("redis_streams",))
        assert info.checkpoint == f"file:{checkpoint}"

        # -- 1. stop at a batch boundary, held for the migration ------------------------------------
        stopped = channel.ok("stop_query", query=QUERY, hold=True)
        assert stopped["stopped"] is True and stopped["held"] is True
        report = channel.ok("report")
        assert report["queries"] == [] and report["held"] == [QUERY]
        # A re-sent stop (a daemon that crashed before reading the ack) is answered, not refused.
        assert channel.ok("stop_query", query=QUERY, hold=True) == {"query": QUERY, "stopped": False,
                                                                     "already_stopped": True}
        assert channel.ok("abort_query", query=QUERY)["already_stopped"] is True
        assert "no active query 'nope'" in channel.refused("stop_query", query="nope", hold=True)

        # Bad arguments are refused with the reason.
        assert "'partitions' must be an integer" in channel.refused("repartition", query=QUERY, partitions="8")
        assert "'partitions' must be in [1, 4096]" in channel.refused("repartition", query=QUERY, partitions=0)
        assert "'enforce_exactly_once_sink' must be true or false" in channel.refused(
            "repartition", query=QUERY, partitions=8, enforce_exactly_once_sink="no")
        assert "no checkpoint of query 'ghost'" in channel.refused("repartition", query="ghost", partitions=8)
        assert "'hold' must be true or false" in channel.refused("abort_query", query=QUERY, hold=1)
        assert "query 'ghost' cannot be restarted: the agent did not see it started (seen: ['counts'])" in \
            channel.refused("start_query", query="ghost")

        # -- 2. repartition 4 -> 8 offline, start again with 8 ---------------------------------------
        repartitioned = channel.ok("repartition", query=QUERY, partitions=8)
        assert repartitioned["repartitioned"] is True and repartitioned["partitions"] == 8
        record_property("repartition_4_to_8_s", repartitioned["duration_s"])
        assert client.get(partitions_key(cfg.redis.key_prefix, APP, QUERY)) == "8"
        # Idempotent: the checkpoint already has 8 (Spark throws; the agent answers).
        assert channel.ok("repartition", query=QUERY, partitions=8) == {"query": QUERY, "repartitioned": False,
                                                                         "already": 8}
        repartition_batch = last_batch(checkpoint, "commits")

        restart_began = time.monotonic()
        started = channel.ok("start_query", query=QUERY, partitions=8)
        assert started["started"] is True and started["partitions"] == 8 and started["paused"] is True
        assert channel.ok("resume_sources")["was_paused"] is True  # stop_query paused them
        wait_until(running_with(client, cfg, started["run_id"], 8, repartition_batch), 90,
                   "batches of the restarted counts with 8 state partitions")
        record_property("restart_to_first_batch_s", round(time.monotonic() - restart_began, 1))
        report = channel.ok("report")
        assert [(q["name"], q["partitions"]) for q in report["queries"]] == [(QUERY, 8)] and report["held"] == []
        # The same driver (and agent session) all along: it did not exit while nothing ran.
        assert channel.driver() == (driver_pid, znode) and psutil.pid_exists(driver_pid)
        assert channel.ok("start_query", query=QUERY) == {"query": QUERY, "started": False, "already_running": True}
        assert "is active" in channel.refused("repartition", query=QUERY, partitions=2)

        # -- 3. abort mid-batch (DSM), repartition 8 -> 2 skipping the abandoned batch, restart ------
        aborted = channel.ok("abort_query", query=QUERY)
        assert aborted["stopped"] is True and aborted["held"] is True
        assert isinstance(aborted["batch_was_running"], bool)
        record_property("abort_batch_was_running", aborted["batch_was_running"])
        # The count already matches: answered without Spark, which would commit the abandoned batch
        # as empty (losing its input and its state version) before refusing.
        same = channel.ok("repartition", query=QUERY, partitions=8, enforce_exactly_once_sink=False)
        assert same["repartitioned"] is False and same["already"] == 8
        record_property("uncommitted_batches_after_abort", same.get("uncommitted_batches", 0))
        repartitioned = channel.ok("repartition", query=QUERY, partitions=2, enforce_exactly_once_sink=False)
        assert repartitioned["repartitioned"] is True
        repartition_batch = last_batch(checkpoint, "commits")
        started = channel.ok("start_query", query=QUERY, partitions=2)
        assert started["started"] is True and started["paused"] is False
        wait_until(running_with(client, cfg, started["run_id"], 2, repartition_batch), 90,
                   "batches of the restarted counts with 2 state partitions")
        assert client.get(partitions_key(cfg.redis.key_prefix, APP, QUERY)) == "2"
        assert channel.driver() == (driver_pid, znode)

        halt.set()
        loading.join(timeout=30)
        wait_until(lambda: drained(client, cfg, cfg.app(APP)), 120, "migr to process all its input")
        result = verify_app(cfg, APP)
        assert (result.lost, result.duplicated, result.unexpected) == (0, 0, 0), result.summary()
        assert result.ok, result.summary()
    finally:
        halt.set()
        loading.join(timeout=30)
        channel.close()
        stop(cfg, APP)
        client.close()
