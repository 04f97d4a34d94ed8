"""An operator's own, unmodified PySpark script under management (real Spark standalone, Redis,
ZooKeeper on loopback): `tests/fixtures/clickstream.py`, written like a user's job (file source of
JSON files, a UDF, a windowed count with a watermark into a parquet file sink, an `update`
aggregate into foreachBatch, `awaitAnyTermination` at the end), which no sparkscale module imports.

Submitted with `apps[].script` and driven by a load that lands files, the daemon (DS2) scales its
executors up after a step up, and each of its queries is migrated once under load in the running
driver while the other keeps running (CCR on one, DSM on the other); (the step down, which takes
another 1.5 minutes here, is the demo's test: tests/integration/test_demo.py)
the output equals a direct computation from the input files, and the script's bytes are unchanged. Bad scripts (one
that raises at start, a query without a checkpoint location) get a clear message and no unsafe
action.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from click.testing import CliRunner

from sparkscale.apps.submit import ROCKSDB_PROVIDER, PipelineError, running, stop, submit
from sparkscale.cli import main
from sparkscale.config import load_config
from sparkscale.daemon.action_log import ActionLog
from sparkscale.localenv.preflight import check_tools
from sparkscale.monitors.spark_rest import SparkRestError, driver_rest
from sparkscale.protocol.keys import progress_key
from sparkscale.redisconn import connect
from sparkscale.store.redis_queries import read_queries
from sparkscale_lab.bench.clickcheck import wait_for_outputs
from sparkscale_lab.bench.daemon_process import DaemonProcess
from sparkscale_lab.bench.filefeed import land_files
from tests.conftest import wait_until

pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).resolve().parent.parent / "fixtures" / "clickstream.py"
APP = "clicks"
WINDOW_S, WATERMARK_S = 10, 5
LOOKUP_MS = 30


@pytest.fixture(scope="module")
def setup(embedded_env, tmp_path_factory):
    work = tmp_path_factory.mktemp("clicks")
    data, out, checkpoints = work / "in", work / "out", work / "chk"
    data.mkdir()
    args = ["--input", str(data), "--output", str(out), "--checkpoint", str(checkpoints), "--trigger-s", "2",
            "--window-s", str(WINDOW_S), "--watermark-s", str(WATERMARK_S), "--max-files-per-trigger", "4",
            "--lookup-ms", str(LOOKUP_MS)]
    no_checkpoint, failing = work / "no_checkpoint.py", work / "failing.py"
    no_checkpoint.write_text(NO_CHECKPOINT_SCRIPT)
    failing.write_text(FAILING_SCRIPT)
    path = work / "sparkscale.yaml"
    path.write_text(
        "apps:\n"
        f"  - name: {APP}\n"
        f"    script: {SCRIPT}\n"
        f"    args: {json.dumps(args)}\n"
        '    spark_conf: {"spark.sql.shuffle.partitions": "4"}\n'
        "    min_executors: 1\n    max_executors: 3\n    initial_executors: 1\n    executor_memory_mb: 512\n"
        f"  - name: nocheck\n    script: {no_checkpoint}\n    executor_memory_mb: 512\n"
        f"  - name: failing\n    script: {failing}\n    executor_memory_mb: 512\n"
        "  - name: attached\n    min_executors: 1\n    max_executors: 1\n    initial_executors: 1\n"
        "loop: {interval_s: 5.0, window_s: 15.0, cooldown_s: 20.0, stabilization_s: 0.0}\n"
        "policy: {name: ds2}\n"
        # Steps of at most x2: the first windows of a fresh script (Python workers starting, few
        # records per task) make DS2 ask for several cores at 4 records/s, and straight to the
        # target that is the maximum before the step up this test is about.
        "guards: {scale_down_delay_s: 20.0, max_scale_up_factor: 2.0}\n"
        "outcomes: {evaluation_windows: 2}\n"
        "actuator: {ack_timeout_s: 30.0, confirm_timeout_s: 90.0}\n"
        "metrics: {port: 0}\n"
        "migration: {phase_timeout_s: 120, measure_timeout_s: 5}\n")
    overrides = [*embedded_env.overrides, "logging.stderr_format=json"]
    return load_config(path, overrides), str(path), overrides, data, out, work


def migrate(setup, app: str, query: str, partitions: int, strategy: str, exit_code: int = 0) -> dict:
    _cfg, path, overrides, _data, _out, _work = setup
    sets = [x for s in overrides for x in ("--set", s)]
    out = CliRunner().invoke(main, ["migrate", "--app", app, "--query", query, "--partitions", str(partitions),
                                    "--strategy", strategy, "--json", "--config", path, *sets])
    lines = [json.loads(line) for line in out.output.strip().splitlines() if line.startswith("{")]
    assert out.exit_code == exit_code, out.output
    return lines[-1]


def decisions_told(daemon: DaemonProcess) -> str:
    """The daemon's decisions and actions so far, one short line each, for a failure's message."""
    lines = []
    for e in daemon.events():
        if e.get("event") == "cycle":
            held = [x for x in e.get("explanation", []) if x.startswith(("guard", "blocklist", "total"))]
            lines.append(f"{e.get('timestamp', '')[11:19]} {e.get('executors')} {e.get('mode')} {e.get('actions')} "
                         f"{held[-2:]}")
        elif e.get("event") in ("action.done", "outcome"):
            lines.append(f"{e.get('timestamp', '')[11:19]} {e['event']} {e.get('results') or e.get('detail')}")
    return "\n".join(lines[-60:])


def executed(cfg, direction: str, after: float = 0.0) -> list:
    """The app's carried-out executor scalings in `direction` (up/down) decided after `after` (epoch
    seconds), from the action log."""
    out = []
    for d in ActionLog(connect(cfg.redis), cfg.redis.key_prefix).read(APP):
        for r in d.results or ():
            a = r.action
            if (r.status == "done" and a.type == "scale_executors" and (a.to > a.from_) == (direction == "up")
                    and d.decision.decided_at > after):
                out.append(r)
    return out


def active_executors(cfg, app: str) -> int | None:
    try:
        rest = driver_rest(cfg, cfg.app(app), timeout_s=5)
        return len(rest.executors(rest.application(app).id))
    except SparkRestError:
        return None


def test_an_unmodified_script_is_scaled_and_migrated_without_loss(setup):
    cfg, path, overrides, data, out, work = setup
    script_digest = hashlib.sha256(SCRIPT.read_bytes()).hexdigest()
    client = connect(cfg.redis)
    prefix = cfg.redis.key_prefix
    submit(cfg, APP, path, overrides)
    driver = running(cfg, APP)
    wait_until(lambda: active_executors(cfg, APP) == 1, 60, "clicks to settle at its initial executor")
    daemon = DaemonProcess(path, overrides, work / "daemon.jsonl", "clicks-daemon")
    stop_feed = threading.Event()
    # A lookup of 30 ms per record: 4 records/s need a fraction of a core, 40 need more than one.
    # The high step lasts until both migrations are done (the test stops the feed).
    feeding = threading.Thread(target=land_files, args=(data, "steps:4@30s,40@600s"),
                               kwargs={"seed": 3, "files_per_s": 1.0, "stop": stop_feed,
                                       "window_s": WINDOW_S, "watermark_s": WATERMARK_S})
    feeding.start()
    fed_at = time.time()
    try:
        # Both queries of the script are listed by the agent, each with its own checkpoint.
        def both_running() -> bool:
            queries = read_queries(client, prefix, APP)
            return {"page_windows", "user_totals"} <= set(queries) and all(
                int(client.hget(progress_key(prefix, APP, q), "batch_id") or -1) >= 1
                for q in ("page_windows", "user_totals"))

        wait_until(both_running, 180, "both queries of the script to run batches")
        queries = read_queries(client, prefix, APP)
        for name in ("page_windows", "user_totals"):
            info = queries[name]
            assert info.migratable and not info.pausable and info.sources == ("file",), info
            assert info.checkpoint is not None and info.checkpoint.endswith(f"/chk/{name}")
        # The file source has no latest offset: its backlog comes from the directory listing.
        sources = json.loads(client.hget(progress_key(prefix, APP, "user_totals"), "sources"))
        assert sources[0]["kind"] == "file" and sources[0]["backlog_estimate"] in ("file_listing", "unknown")

        # DS2 sizes the app from both queries' needs: the step up to 40 records/s takes a scale-up.
        wait_until(lambda: executed(cfg, "up", after=fed_at + 30), 240,
                   f"a scale-up of clicks after the step up (fed at {fed_at:.0f})",
                   story=lambda: decisions_told(daemon))
        cycles = daemon.events("cycle", app=APP)
        assert any({q["query"] for q in e.get("queries", [])} == {"page_windows", "user_totals"}
                   for e in cycles), cycles[-1:]

        # CCR on one query, DSM on the other, through the leading daemon, while the other keeps
        # running. Under this load no trigger idles: CCR's stop lands inside a batch too, which the
        # repartition sets aside and the restart recomputes.
        ccr = migrate(setup, APP, "page_windows", 8, "ccr")
        assert ccr["ok"] is True, ccr
        assert int(client.hget(progress_key(prefix, APP, "user_totals"), "batch_id")) >= 1
        wait_until(lambda: int(client.hget(progress_key(prefix, APP, "page_windows"), "state_partitions") or 0) == 8,
                   120, "page_windows batches on 8 state partitions")
        dsm = migrate(setup, APP, "user_totals", 2, "dsm")
        assert dsm["ok"] is True, dsm
        wait_until(lambda: int(client.hget(progress_key(prefix, APP, "user_totals"), "state_partitions") or 0) == 2,
                   120, "user_totals batches on 2 state partitions")
        # The same driver all along: the script's awaitAnyTermination waited through both stops.
        assert running(cfg, APP) is not None and running(cfg, APP).pid == driver.pid
        assert psutil.pid_exists(driver.pid)

        stop_feed.set()
        feeding.join(timeout=120)
        assert not feeding.is_alive()
        land_files(data, "constant:1@1s", seed=4, files_per_s=1.0, flush=True,
                   window_s=WINDOW_S, watermark_s=WATERMARK_S, realtime=False)
        check = wait_for_outputs(data, out, WINDOW_S, WATERMARK_S, timeout_s=240)
        assert check.ok, check.summary()
    finally:
        stop_feed.set()
        feeding.join(timeout=30)
        daemon.stop()
        stop(cfg, APP)
        client.close()
    assert daemon.proc.returncode == 0
    assert hashlib.sha256(SCRIPT.read_bytes()).hexdigest() == script_digest


NO_CHECKPOINT_SCRIPT = """\
from pyspark.sql import SparkSession

spark = SparkSession.builder.getOrCreate()
(spark.readStream.format("rate").option("rowsPerSecond", 2).load()
    .groupBy().count().writeStream.format("noop").outputMode("complete").queryName("counter").start())
spark.streams.awaitAnyTermination()
"""

FAILING_SCRIPT = """\
raise FileNotFoundError("no such input directory: /data/clicks")
"""


def test_bad_scripts_get_a_clear_message_and_no_unsafe_action(setup):
    cfg, path, overrides, _data, _out, _work = setup
    # A script that raises at start: the submit fails naming the app, with the script's error.
    with pytest.raises(PipelineError) as err:
        submit(cfg, "failing", path, overrides)
    text = str(err.value)
    assert text.startswith("failing exited with code 1 while starting") and "no such input directory" in text
    # A query without a checkpoint location is managed (listed, monitored) but never migrated.
    submit(cfg, "nocheck", path, overrides)
    client = connect(cfg.redis)
    try:
        wait_until(lambda: "counter" in read_queries(client, cfg.redis.key_prefix, "nocheck"), 60,
                   "the agent to list the counter query")
        info = read_queries(client, cfg.redis.key_prefix, "nocheck")["counter"]
        assert info.temporary_checkpoint and not info.migratable
        refused = migrate(setup, "nocheck", "counter", 2, "ccr", exit_code=1)
        assert "nocheck/counter cannot be migrated: it has no checkpoint location" in str(refused["detail"])
        assert "counter" in read_queries(client, cfg.redis.key_prefix, "nocheck")
        assert read_queries(client, cfg.redis.key_prefix, "nocheck")["counter"].status == "active"
    finally:
        stop(cfg, "nocheck")
        client.close()


ATTACH_SCRIPT = """\
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import sparkscale

spark = SparkSession.builder.getOrCreate()
sparkscale.attach(spark, app="attached", config=sys.argv[1], overrides=sys.argv[3:])
(spark.readStream.format("rate").option("rowsPerSecond", 5).load()
    .groupBy((F.col("value") % 3).alias("k")).count()
    .writeStream.format("noop").outputMode("update").queryName("ticks")
    .option("checkpointLocation", sys.argv[2]).trigger(processingTime="1 second").start())
spark.streams.awaitAnyTermination()
"""


def test_a_driver_launched_its_own_way_is_managed_after_one_attach_line(setup):
    """`sparkscale.attach(spark, app=...)` in a job started with plain spark-submit (not through
    `pipeline submit`): the agent registers, lists the query as migratable, and a migration stops,
    repartitions and restarts it in that driver, which keeps running."""
    cfg, path, overrides, _data, _out, work = setup
    script = work / "attached_job.py"
    script.write_text(ATTACH_SCRIPT)
    tools = check_tools(cfg.cluster.java, cfg.spark.home)
    argv = [str(tools.spark_submit), "--master", cfg.spark.master_url, "--conf", "spark.driver.host=127.0.0.1",
            "--conf", "spark.driver.bindAddress=127.0.0.1", "--conf", "spark.cores.max=1",
            "--conf", "spark.executor.memory=512m", "--conf", "spark.sql.shuffle.partitions=4",
            # Spark repartitions only RocksDB state offline: a job launched its own way must say so.
            "--conf", f"spark.sql.streaming.stateStore.providerClass={ROCKSDB_PROVIDER}",
            "--conf", f"spark.pyspark.python={sys.executable}",
            str(script), path, str(work / "attached-checkpoint"), *overrides]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_HOME": str(tools.spark_home)}
    client = connect(cfg.redis)
    with open(work / "attached.log", "wb") as log_file:
        proc = subprocess.Popen(argv, stdout=log_file, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        def listed():
            info = read_queries(client, cfg.redis.key_prefix, "attached").get("ticks")
            return info if info is not None and info.migratable and info.state_partitions else None

        info = wait_until(listed, 120, "the attached driver's agent to list its query")
        assert info.sources == ("rate",) and not info.pausable and info.state_partitions == 4
        assert info.state_store_provider == ROCKSDB_PROVIDER
        assert driver_rest(cfg, cfg.app("attached"), timeout_s=5).application("attached") is not None
        moved = migrate(setup, "attached", "ticks", 2, "ccr")
        assert moved["ok"] is True, moved
        wait_until(lambda: int(client.hget(progress_key(cfg.redis.key_prefix, "attached", "ticks"),
                                           "state_partitions") or 0) == 2, 60, "ticks batches on 2 state partitions")
        assert proc.poll() is None, (work / "attached.log").read_text()[-2000:]
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
        client.close()
