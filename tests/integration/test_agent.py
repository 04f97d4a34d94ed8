"""The control agent in a real driver on the embedded standalone cluster: commands through a real
ZooKeeper, executors counted through the driver's REST API, progress and pause keys in a real Redis.

One SparkSession and one agent serve the whole module (a session costs ~20 s on 2 cores), so the
tests run in file order and each starts from where the previous one left the application.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Iterator

import pytest
import redis
from kazoo.client import KazooClient
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from structlog.testing import capture_logs

from sparkscale.agent import ControlAgent
from sparkscale.config import AppConfig
from sparkscale.monitors.spark_master import SparkMasterClient, SparkUnreachable
from sparkscale.protocol.commands import (
    EXPIRY_GRACE_S,
    Ack,
    Command,
    command_seq,
    send_command,
    wait_ack,
    wait_for_znode,
)
from sparkscale.protocol.fencing import read_live_lock
from sparkscale.protocol.znodes import acks_path, agent_epoch_path, agent_path, commands_path
from tests.conftest import leader_lock, wait_until

pytestmark = pytest.mark.integration

APP = AppConfig(name="agenttest", min_executors=1, max_executors=6, initial_executors=2)
# The acting leader's epoch in these tests is the sequence number of the lock `leader` holds.
ACK_TIMEOUT_S = 60.0
# Set by the test that needs it: the next batch of `ticks` then runs until LONG_BATCH_S has passed,
# far longer than its 1 s trigger, so no idle trigger comes while the stop watches for one.
LONG_BATCHES = threading.Event()
IN_LONG_BATCH = threading.Event()
LONG_BATCH_S = 8.0


def _ticks_batch(df, batch_id: int) -> None:
    df.write.format("noop").mode("overwrite").save()
    if LONG_BATCHES.is_set():
        IN_LONG_BATCH.set()
        time.sleep(LONG_BATCH_S)  # the workload: a batch that outlasts its trigger


@pytest.fixture(scope="module")
def spark(embedded_env, tmp_path_factory) -> Iterator[SparkSession]:
    cfg = embedded_env.cfg
    session = (
        SparkSession.builder.master(cfg.spark.master_url)
        .appName("sparkscale-agent-test")
        .config("spark.cores.max", "6")
        .config("spark.executor.cores", "1")
        .config("spark.executor.memory", "512m")
        .config("spark.decommission.enabled", "true")
        .config("spark.ui.port", str(cfg.spark.driver_ui_port))
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.local.dir", str(tmp_path_factory.mktemp("spark-local")))
        .getOrCreate()
    )
    yield session
    for query in session.streams.active:
        query.stop()
    session.stop()


@pytest.fixture(scope="module")
def zk(embedded_env) -> Iterator[KazooClient]:
    client = KazooClient(hosts=embedded_env.cfg.zookeeper.hosts, timeout=10)
    client.start(timeout=15)
    yield client
    client.stop()
    client.close()


@pytest.fixture(scope="module", autouse=True)
def leader(embedded_env, zk) -> Iterator[int]:
    """These tests act as the app's leader: they hold its lock, as the daemon does (the agent runs
    commands only from the live holder's session at its epoch), and yield that epoch."""
    with leader_lock(zk, embedded_env.cfg.zookeeper.root, APP.name) as epoch:
        yield epoch


@pytest.fixture(scope="module")
def rds(embedded_env) -> redis.Redis:
    return redis.Redis(port=embedded_env.cfg.redis.port, decode_responses=True)


@pytest.fixture(scope="module")
def queries(spark, tmp_path_factory) -> dict[str, object]:
    """`ticks`: a stateful aggregation of the rate source (never runs dry), its batches made long on
    demand; `files`: a file source that runs dry once its two files are read, so it reaches a clean
    batch boundary."""
    checkpoints = tmp_path_factory.mktemp("checkpoints")
    ticks = (
        spark.readStream.format("rate").option("rowsPerSecond", 20).option("numPartitions", 2).load()
        .groupBy((F.col("value") % 4).alias("k")).count()
        .writeStream.foreachBatch(_ticks_batch).outputMode("complete").queryName("ticks")
        .option("checkpointLocation", str(checkpoints / "ticks"))
        .trigger(processingTime="1 second").start()
    )
    indir = tmp_path_factory.mktemp("files-in")
    for i in range(2):
        (indir / f"part-{i}.json").write_text("".join(json.dumps({"n": i * 10 + j}) + "\n" for j in range(10)))
    files = (
        spark.readStream.schema("n LONG").option("maxFilesPerTrigger", 1).json(str(indir))
        .writeStream.format("noop").queryName("files")
        .option("checkpointLocation", str(checkpoints / "files"))
        .trigger(processingTime="1 second").start()
    )
    return {"ticks": ticks, "files": files}


@pytest.fixture(scope="module")
def agent(spark, embedded_env, queries) -> Iterator[ControlAgent]:
    control = ControlAgent(spark, embedded_env.cfg, APP, initial_executors=APP.initial_executors)
    control.start()
    yield control
    control.stop()


def command(env, zk: KazooClient, type: str, args: dict | None = None, epoch: int | None = None) -> Ack:
    """Send one command exactly as the daemon does (by default at the live lock's epoch) and wait
    for the agent's ack."""
    root = env.cfg.zookeeper.root
    if epoch is None:
        live = read_live_lock(zk, root, APP.name)
        assert live is not None, "nobody holds the leader lock"
        epoch = live.epoch
    name = send_command(zk, root, APP.name, type, args, epoch)
    return wait_ack(zk, root, APP.name, name, ACK_TIMEOUT_S)


def active_executors(spark: SparkSession) -> list[dict]:
    """Active executors from the driver's REST API, the way the daemon's monitors see them."""
    sc = spark.sparkContext
    url = f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}/executors"
    with urllib.request.urlopen(url, timeout=15) as resp:
        return [e for e in json.load(resp) if e["id"] != "driver" and e["isActive"]]


def settled(agent: ControlAgent, spark: SparkSession, env, n: int):
    """n executors and nothing in between: the master grants the app n cores (1 per executor), and
    the REST API and the agent's own view list the same n active executors.

    They disagree for a while as executors come and go (the REST API is fed by the listener bus),
    and an executor of the start-up burst can register tens of seconds after its launch on 2 busy
    cores: the master's count covers those launched but not yet registered."""
    master = SparkMasterClient(env.cfg.spark.master_web_url, timeout_s=5)

    def check() -> bool:
        try:
            rest = {e["id"] for e in active_executors(spark)}
            app = next((a for a in master.view().active_apps if a.app_id == spark.sparkContext.applicationId), None)
        except (OSError, SparkUnreachable):
            return False
        own = {e.id for e in agent.executors.list() if e.active}
        return app is not None and app.cores == n and len(rest) == n and rest == own

    return check


# -- tests, in order ------------------------------------------------------------------------------


def test_agent_registers_an_ephemeral_znode(agent, zk, spark, embedded_env):
    data, stat = zk.get(agent_path(embedded_env.cfg.zookeeper.root, APP.name))
    info = json.loads(data)
    assert stat.ephemeralOwner != 0
    assert info["app_id"] == spark.sparkContext.applicationId
    assert info["ui_url"] == spark.sparkContext.uiWebUrl
    assert info["driver_host"] == "127.0.0.1" and isinstance(info["pid"], int)


def test_initial_target_then_set_executors(agent, spark, zk, embedded_env, record_property, leader):
    # Standalone launches up to spark.cores.max (6) executors at first; the agent trims to 2.
    wait_until(settled(agent, spark, embedded_env, 2), 150, "the initial 2 executors (the burst's surplus trimmed)")

    started = time.monotonic()
    ack = command(embedded_env, zk, "set_executors", {"total": 4})
    assert ack.ok, ack.detail
    assert ack.detail["target"] == 4
    wait_until(settled(agent, spark, embedded_env, 4), 90, "4 active executors after set_executors 4")
    record_property("scale_out_2_to_4_s", round(time.monotonic() - started, 1))
    # The new leader's epoch is remembered in ZooKeeper for a restarted agent.
    data, _ = zk.get(agent_epoch_path(embedded_env.cfg.zookeeper.root, APP.name))
    assert int(data) == leader


def test_decommission_removes_the_newest_executor(agent, spark, zk, embedded_env, record_property):
    wait_until(settled(agent, spark, embedded_env, 4), 60, "the agent and the REST API to agree on 4 executors")
    before = active_executors(spark)
    newest = max(before, key=lambda e: (e["addTime"], int(e["id"])))["id"]

    started = time.monotonic()
    ack = command(embedded_env, zk, "decommission", {"count": 1})
    assert ack.ok, ack.detail
    assert ack.detail["removed"] == [newest] and ack.detail["graceful"] is True
    wait_until(settled(agent, spark, embedded_env, 3), 90, "3 active executors after decommissioning one")
    record_property("decommission_one_s", round(time.monotonic() - started, 1))
    # The removed executor is not replaced: the target went down with it.
    assert agent.target_executors == 3


def refused_epoch(epoch: int, leader: int) -> str:
    """Why the agent refuses a command at an epoch below the leader's: the fencing's "stale epoch",
    or, below 0, the command's format before the fencing is asked."""
    if epoch < 0:
        return f"malformed command: command epoch: expected an integer >= 0 (got {epoch})"
    return f"stale epoch {epoch} < {leader}"


def test_bad_commands_are_answered_not_ignored(agent, zk, embedded_env, leader):
    ack = command(embedded_env, zk, "defragment_universe", {})
    assert not ack.ok and "unknown command type 'defragment_universe'" in ack.detail

    ack = command(embedded_env, zk, "set_executors", {"total": 2}, epoch=leader - 4)
    assert not ack.ok and ack.detail == refused_epoch(leader - 4, leader)
    assert agent.target_executors == 3  # the stale command changed nothing

    ack = command(embedded_env, zk, "set_executors", {"total": 99})
    assert not ack.ok and "outside [min_executors, max_executors]" in ack.detail

    ack = command(embedded_env, zk, "set_executors", {"total": 5, "surge": True})  # 3 active: a surge adds one
    assert not ack.ok and "a surge adds exactly one executor (3 active, asked 5)" in ack.detail

    ack = command(embedded_env, zk, "set_executors", {"total": "four"})
    assert not ack.ok and "'total' must be an integer" in ack.detail

    ack = command(embedded_env, zk, "decommission", {"executor_ids": ["no-such-executor"]})
    assert not ack.ok and "no active executors with ids ['no-such-executor']" in ack.detail

    # Malformed JSON written straight to ZooKeeper still gets an ack.
    root = embedded_env.cfg.zookeeper.root
    path = zk.create(f"{commands_path(root, APP.name)}/cmd-", b"{not json", sequence=True)
    ack = wait_ack(zk, root, APP.name, path.rsplit("/", 1)[1], ACK_TIMEOUT_S)
    assert not ack.ok and ack.detail.startswith("malformed command")


def test_a_forged_command_with_a_high_epoch_is_refused_and_does_not_change_the_stored_epoch(
        agent, zk, embedded_env, leader):
    root = embedded_env.cfg.zookeeper.root
    epoch_path = agent_epoch_path(root, APP.name)
    before = int(zk.get(epoch_path)[0])
    # Anyone who can write a znode can claim an epoch; stored, 2^31 would fence every real leader out.
    ack = command(embedded_env, zk, "set_executors", {"total": 2}, epoch=2**31)
    assert not ack.ok and ack.detail == f"not the current leader: epoch {2**31}, live lock epoch {leader}"
    # The live epoch, claimed by a session that does not hold the lock: forged as well.
    forger = KazooClient(hosts=embedded_env.cfg.zookeeper.hosts, timeout=10)
    forger.start(timeout=15)
    try:
        ack = command(embedded_env, forger, "abort_query", {"query": "ticks"}, epoch=leader)
    finally:
        forger.stop()
        forger.close()
    assert not ack.ok and "not the current leader: written by session" in ack.detail
    assert int(zk.get(epoch_path)[0]) == before == leader and agent.highest_epoch == leader
    assert agent.target_executors == 3  # neither ran
    assert command(embedded_env, zk, "report").ok  # the real leader still acts


def test_answered_commands_leave_no_znodes_behind(agent, zk, embedded_env):
    root = embedded_env.cfg.zookeeper.root
    for _ in range(3):
        assert command(embedded_env, zk, "report").ok
    # Each sender deleted its command and then its ack once answered (refused ones included).
    assert zk.get_children(commands_path(root, APP.name)) == []
    assert zk.get_children(acks_path(root, APP.name)) == []


def test_a_stale_expired_command_is_skipped(agent, zk, embedded_env, leader, rds):
    root = embedded_env.cfg.zookeeper.root
    now = time.time()
    # Written as the leader's session writes it, but its sender stopped waiting 570 s ago.
    stale = Command("pause_sources", {}, epoch=leader, issued_at=now - 600, expires_at=now - 570)
    with capture_logs() as events:
        path = zk.create(f"{commands_path(root, APP.name)}/cmd-", stale.to_json(), ephemeral=True, sequence=True)
        ack = wait_ack(zk, root, APP.name, path.rsplit("/", 1)[1], ACK_TIMEOUT_S)
    assert not ack.ok and ack.detail.startswith("expired 57") and ack.detail.endswith("s ago: not run")
    assert not rds.exists(f"{embedded_env.cfg.redis.key_prefix}{APP.name}:paused")  # it did not run
    assert any(e["event"] == "agent.command_expired" for e in events)


def test_pause_and_resume_sources(agent, rds, zk, embedded_env):
    key = f"{embedded_env.cfg.redis.key_prefix}{APP.name}:paused"
    ack = command(embedded_env, zk, "pause_sources")
    assert ack.ok and rds.exists(key)
    ack = command(embedded_env, zk, "resume_sources")
    assert ack.ok and ack.detail["was_paused"] is True and not rds.exists(key)


def test_progress_is_published_to_redis(agent, rds, embedded_env):
    key = f"{embedded_env.cfg.redis.key_prefix}{APP.name}:progress:ticks"
    first = int(wait_until(lambda: rds.hget(key, "batch_id"), 60, "a progress hash for 'ticks'"))
    wait_until(lambda: int(rds.hget(key, "batch_id")) > first, 60, "a later batch id for 'ticks'")
    latest = rds.hgetall(key)
    assert latest["query"] == "ticks" and float(latest["batch_duration_ms"]) > 0
    assert "processed_rows_per_s" in latest and "input_rows_per_s" in latest
    assert int(latest["state_partitions"]) == 4 and int(latest["state_rows_total"]) == 4
    sources = json.loads(latest["sources"])
    assert sources and "end_offset" in sources[0]
    assert rds.xlen(f"{key}:history") >= 2


def test_report(agent, zk, embedded_env, spark):
    ack = command(embedded_env, zk, "report")
    assert ack.ok, ack.detail
    names = {q["name"] for q in ack.detail["queries"]}
    assert names == {"ticks", "files"}
    assert ack.detail["paused"] is False and ack.detail["target_executors"] == 3
    assert sum(e["active"] for e in ack.detail["executors"]) == 3


def test_a_query_that_never_idles_is_stopped_inside_a_batch_and_says_so(agent, zk, embedded_env, queries, rds):
    # The rate source cannot be paused and this batch outlasts the 1 s trigger: no idle trigger
    # comes, so the stop lands inside a batch, which a restart recomputes (DSM); the ack says so.
    LONG_BATCHES.set()
    assert IN_LONG_BATCH.wait(60), "no long batch of 'ticks' started"
    ack = command(embedded_env, zk, "stop_query", {"query": "ticks", "timeout_s": 2})
    assert ack.ok, ack.detail
    assert ack.detail["pausable"] is False and ack.detail["inside_batch"] is True
    assert "no idle trigger within 2 s: stopped inside a batch" in ack.detail["notes"]
    assert not queries["ticks"].isActive
    assert not rds.exists(f"{embedded_env.cfg.redis.key_prefix}{APP.name}:paused")  # nothing to pause
    assert command(embedded_env, zk, "resume_sources").ok


def test_stop_query_at_a_batch_boundary(agent, zk, embedded_env, queries, rds):
    ack = command(embedded_env, zk, "stop_query", {"query": "files", "timeout_s": 60})
    assert ack.ok, ack.detail
    # A file source cannot be paused (no pause key taken); its query runs dry, so its trigger idles.
    assert ack.detail["notes"] == [] and ack.detail["pausable"] is False and ack.detail["inside_batch"] is False
    # Both files read, one per batch (0 and 1); an idle progress event may carry the next id.
    assert ack.detail["last_batch_id"] >= 1
    assert not queries["files"].isActive
    assert not rds.exists(f"{embedded_env.cfg.redis.key_prefix}{APP.name}:paused")


def test_restarted_agent_keeps_its_epoch_and_runs_nothing_twice(agent, zk, embedded_env, spark, rds, leader):
    root = embedded_env.cfg.zookeeper.root
    # Answered, but its sender never cleaned up (it died first): the next agent must not run it again.
    answered = send_command(zk, root, APP.name, "report", {}, leader)
    assert wait_for_znode(zk, f"{acks_path(root, APP.name)}/{answered}", ACK_TIMEOUT_S) is not None
    agent.stop()
    wait_until(lambda: zk.exists(agent_path(root, APP.name)) is None, 10, "the agent znode to go")
    done = set(zk.get_children(acks_path(root, APP.name)))
    assert answered in done
    # Sent while no agent runs, its sender waiting 1 s only: timed out long before the next agent.
    timed_out = send_command(zk, root, APP.name, "pause_sources", {}, leader, ttl_s=1.0)
    time.sleep(1.0 + EXPIRY_GRACE_S + 2.0)
    # Sent while no agent runs: the next one must pick it up.
    pending = send_command(zk, root, APP.name, "resume_sources", {}, leader)

    with capture_logs() as events:
        successor = ControlAgent(spark, embedded_env.cfg, APP)
        successor.start()
        try:
            expired = wait_ack(zk, root, APP.name, timed_out, ACK_TIMEOUT_S)
            assert not expired.ok and "s ago: not run" in expired.detail
            ack = wait_ack(zk, root, APP.name, pending, ACK_TIMEOUT_S)
            assert ack.ok and not rds.exists(f"{embedded_env.cfg.redis.key_prefix}{APP.name}:paused")
            stale = command(embedded_env, zk, "report", epoch=leader - 1)
            assert not stale.ok and stale.detail == refused_epoch(leader - 1, leader)
            assert successor.last_seq >= command_seq(pending)
        finally:
            successor.stop()
    received = {e["command"] for e in events if e["event"] == "agent.command_received"}
    assert pending in received and not received & done
    # The old agent's fixture teardown calls stop() again: harmless.
