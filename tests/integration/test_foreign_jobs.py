"""Jobs nobody here wrote, run from their config alone (real Spark standalone, Redis, ZooKeeper on
loopback): `tests/fixtures/netwc.py`, Spark's own socket word count example beside an unnamed rate
count through an idempotent foreachBatch and a query whose first batch is slow, every checkpoint from
the session's `spark.sql.streaming.checkpointLocation`.

- The socket query's migration is refused naming the socket source, before anything stops; the
  executors are scaled all the same; the line server sees one connection for the whole run.
- The unnamed rate count is migrated (DSM) on the same checkpoint directory, and the CLI returns
  promptly once the migration is done; its foreachBatch output stays exact (no record lost or counted
  twice, across the restart), which only holds if its state survived.
- The slow query's migration, asked while its first batch runs, is refused (no committed batch yet),
  and the query goes on to commit that batch; migrated then, with no input left, it is done once
  the restarted query idles, its restore stated as not measured.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from sparkscale.actuators.migration import JournalStore
from sparkscale.apps.submit import stop, submit
from sparkscale.cli import main
from sparkscale.config import load_config
from sparkscale.protocol.keys import progress_key
from sparkscale.redisconn import connect
from sparkscale.store.redis_queries import read_queries
from sparkscale.zkconn import client as zk_client
from sparkscale_lab.bench.daemon_process import DaemonProcess
from tests.conftest import wait_until
from tests.integration.test_user_script import active_executors

pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).resolve().parent.parent / "fixtures" / "netwc.py"
APP = "netwc"


class LineServer:
    """A socket source's peer: sends a line of words every 50 ms to each client; counts clients."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.connections = 0
        self.lines_sent = 0
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        self.server.settimeout(0.5)
        while not self.stopping.is_set():
            try:
                conn, _ = self.server.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # closed
            self.connections += 1
            threading.Thread(target=self._send, args=(conn,), daemon=True).start()

    def _send(self, conn: socket.socket) -> None:
        deadline = time.monotonic() + 900  # bounded, whatever happens to the test
        with conn:
            while not self.stopping.is_set() and time.monotonic() < deadline:
                try:
                    conn.sendall(b"apache spark streams words\n")
                except OSError:
                    return
                self.lines_sent += 1
                time.sleep(0.05)

    def close(self) -> None:
        self.stopping.set()
        self.server.close()


def cli(setup, *args: str) -> tuple[int, list[dict], str]:
    path, overrides = setup["path"], setup["overrides"]
    sets = [x for s in overrides for x in ("--set", s)]
    out = CliRunner().invoke(main, [*args, "--config", path, *sets])
    return out.exit_code, [json.loads(x) for x in out.output.splitlines() if x.startswith("{")], out.output


@pytest.fixture(scope="module")
def setup(embedded_env, tmp_path_factory):
    work = tmp_path_factory.mktemp("netwc")
    output, slow_input, checkpoints = work / "out", work / "slow-in", work / "chk"
    slow_input.mkdir()
    (slow_input / "words.txt").write_text("".join(f"line {i}\n" for i in range(10)))
    server = LineServer()
    path = work / "sparkscale.yaml"
    path.write_text(
        "apps:\n"
        f"  - name: {APP}\n"
        f"    script: {SCRIPT}\n"
        f"    args: {json.dumps(['127.0.0.1', str(server.port), str(output), str(slow_input)])}\n"
        "    spark_conf: {\"spark.sql.shuffle.partitions\": \"4\", "
        f"\"spark.sql.streaming.checkpointLocation\": \"{checkpoints}\"}}\n"
        "    min_executors: 1\n    max_executors: 2\n    initial_executors: 1\n    executor_memory_mb: 512\n"
        "actuator: {ack_timeout_s: 30.0, confirm_timeout_s: 90.0}\n"
        "metrics: {port: 0}\n"
        # The default measure_timeout_s (300 s): the CLI must not wait for it.
        "migration: {phase_timeout_s: 120}\n")
    overrides = [*embedded_env.overrides, "logging.stderr_format=json"]
    cfg = load_config(path, overrides)
    try:
        yield {"cfg": cfg, "path": str(path), "overrides": overrides, "output": output, "server": server,
               "checkpoints": checkpoints, "work": work}
    finally:
        server.close()


def by_source(cfg, kind: str):
    client = connect(cfg.redis)
    try:
        found = [i for i in read_queries(client, cfg.redis.key_prefix, APP).values() if kind in i.sources]
    finally:
        client.close()
    return found[0] if found and found[0].committed else None


def exact_counts(output: Path) -> tuple[int, dict[int, tuple[int, int]]]:
    """The running count per key as the last batch that updated it wrote it: (batches, {k: (n, top)})."""
    latest: dict[int, tuple[int, int, int]] = {}
    batches = sorted(output.glob("batch=*"))
    for directory in batches:
        batch = int(directory.name.split("=")[1])
        for part in directory.glob("part-*.json"):
            for line in part.read_text().splitlines():
                row = json.loads(line)
                if row["k"] not in latest or latest[row["k"]][0] < batch:
                    latest[row["k"]] = (batch, row["n"], row["top"])
    return len(batches), {k: (n, top) for k, (_b, n, top) in latest.items()}


def test_a_foreign_job_scales_and_migrates_only_what_replays(setup):
    cfg, server, output = setup["cfg"], setup["server"], setup["output"]
    client = connect(cfg.redis)
    zk = zk_client(cfg.zookeeper)
    zk.start()
    submit(cfg, APP, setup["path"], setup["overrides"])
    try:
        # The slow query, asked to migrate while its first batch runs: refused, nothing stopped.
        def slow_listed():
            info = read_queries(client, cfg.redis.key_prefix, APP).get("slow")
            return info if info is not None and info.status == "active" else None

        slow = wait_until(slow_listed, 120, "the agent to list the slow query")
        assert not slow.committed, slow  # 10 records at 2 s each: its first batch runs for 20 s or more
        code, lines, text = cli(setup, "migrate", "--app", APP, "--query", "slow", "--partitions", "2",
                                "--strategy", "dsm", "--json")
        assert code == 1 and "no committed batch yet" in text, text
        wait_until(lambda: client.hget(progress_key(cfg.redis.key_prefix, APP, "slow"), "batch_id") is not None,
                   180, "the slow query to commit its first batch")
        assert read_queries(client, cfg.redis.key_prefix, APP)["slow"].status == "active"
        # Its input ends with its first batch: migrated now, the restarted query sees no new input. The
        # migration ends once it idles, the restore stated as not measured (not degraded after 180 s).
        wait_until(lambda: read_queries(client, cfg.redis.key_prefix, APP)["slow"].migratable, 60,
                   "the slow query to be migratable once committed")
        code, lines, text = cli(setup, "migrate", "--app", APP, "--query", "slow", "--partitions", "2",
                                "--strategy", "dsm", "--json")
        assert code == 0 and lines[-1]["ok"] is True, text
        idle = JournalStore(zk, cfg.zookeeper.root, APP).read()
        assert idle.status == "done" and idle.marks["first_output"].startswith("not measured"), idle
        print(f"idle DSM of slow: done {idle.phases['done'] - idle.requested_at:.1f} s after the request")

        # The socket query: refused before anything stops, naming the socket source.
        netwc = wait_until(lambda: by_source(cfg, "socket"), 120, "the socket query to commit a batch")
        assert not netwc.migratable and "TextSocket" in netwc.why_not_migratable()
        code, lines, text = cli(setup, "migrate", "--app", APP, "--query", netwc.name, "--partitions", "8",
                                "--strategy", "ccr", "--json")
        assert code == 1 and "TextSocket" in text and "new connection" in text, text
        assert read_queries(client, cfg.redis.key_prefix, APP)[netwc.name].run_id == netwc.run_id  # never stopped

        # Executor scaling needs no restart: it applies to the same app.
        code, _lines, text = cli(setup, "scale-executors", "--app", APP, "--to", "2")
        assert code == 0, text
        wait_until(lambda: active_executors(cfg, APP) == 2, 120, "netwc to run 2 executors")

        # The unnamed rate count: migrated (DSM) on its own checkpoint, the same id before and after.
        rate = wait_until(lambda: by_source(cfg, "rate"), 120, "the rate query to commit a batch")
        assert rate.session_checkpoint and rate.name == rate.id and rate.migratable, rate
        code, lines, text = cli(setup, "migrate", "--app", APP, "--query", rate.name, "--partitions", "2",
                                "--strategy", "dsm", "--json")
        returned_at = time.time()
        assert code == 0 and lines[-1]["ok"] is True, text
        journal = JournalStore(zk, cfg.zookeeper.root, APP).read()
        assert journal is not None and journal.status == "done", journal
        # The CLI returned once the migration was done, not after measure_timeout_s (300 s).
        print(f"migrate returned {returned_at - journal.phases['done']:.1f} s after the migration was done")
        assert returned_at - journal.phases["done"] < 60

        def restarted():
            info = read_queries(client, cfg.redis.key_prefix, APP).get(rate.name)
            return info if info is not None and info.run_id != rate.run_id and info.state_partitions == 2 else None

        after = wait_until(restarted, 120, "the rate count to run on 2 state partitions")
        assert after.checkpoint == rate.checkpoint  # pinned: not a new random directory

        # Its output stays exact across the restart: n per key counts every value up to the top once.
        before_batches, _ = exact_counts(output)
        wait_until(lambda: exact_counts(output)[0] >= before_batches + 3, 120, "three more batches of the count")

        # The daemon cycles over the app (dry-run: it decides, and acts on nothing).
        daemon = DaemonProcess(setup["path"], setup["overrides"], setup["work"] / "daemon.jsonl", "netwc-daemon",
                               extra=["loop.interval_s=2", "loop.window_s=10", "loop.dry_run=true"], max_cycles=2)
        assert daemon.proc.wait(timeout=180) == 0, daemon.stderr_tail(2000)
        cycles = daemon.events("cycle", app=APP)
        assert len(cycles) >= 2 and {q["query"] for q in cycles[-1]["queries"]} >= {netwc.name, rate.name}, cycles
        assert not [e for e in daemon.events() if e.get("level") == "error"], daemon.events()[-5:]
    finally:
        stop(cfg, APP)
        zk.stop()
        client.close()
    _batches, counts = exact_counts(output)
    assert set(counts) == {0, 1, 2}, counts
    for k, (n, top) in counts.items():
        assert n == len(range(k, top + 1, 3)), (k, n, top)  # fewer: lost; more: counted twice
    assert server.connections == 1 and server.lines_sent > 0, (server.connections, server.lines_sent)
    print(f"verified: rate count {_batches} batches, (n, top) per key {counts}; socket: "
          f"{server.connections} connection, {server.lines_sent} lines sent")
