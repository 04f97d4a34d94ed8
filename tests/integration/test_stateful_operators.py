"""Each kind of stateful operator a user writes, migrated under load (CCR on two, DSM on the third) and
checked exact (real Spark standalone, Redis, ZooKeeper on loopback): `tests/fixtures/ads.py`, a user's job of
a stream-stream join with watermarks and an event-time range, an applyInPandasWithState running
count through a foreachBatch sink that overwrites by batch id, and dropDuplicatesWithinWatermark
through a foreachBatch sink that skips a batch id it has written, over files landing all along. A
stop inside a batch is finished under the same batch id and offsets before the repartition
(agent.queries.finish_interrupted): without that, its input came again under a later id, which
the skipping sink took twice. (The windowed aggregation and the `update` foreachBatch aggregate are
migrated in test_user_script.py.)

The verifier computes the output from the input files: every click joined to its impression once,
every user's count equal to its events, every event id once; nothing lost, nothing duplicated.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from sparkscale.actuators.migration import JournalStore
from sparkscale.apps.submit import stop, submit
from sparkscale.config import load_config
from sparkscale.protocol.keys import progress_key
from sparkscale.redisconn import connect
from sparkscale.store.redis_queries import read_queries
from sparkscale.zkconn import client as zk_client
from sparkscale_lab.bench.clicksinks import committed_files
from tests.conftest import wait_until
from tests.integration.test_foreign_jobs import cli

pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).resolve().parent.parent / "fixtures" / "ads.py"
APP = "ads"
QUERIES = ("joined", "sessions", "deduped")
MIGRATIONS = (("joined", "ccr", 6), ("sessions", "ccr", 6), ("deduped", "dsm", 2))
T0 = datetime(2026, 1, 1, tzinfo=UTC)
# Under the 1 s trigger, so no trigger idles and a stop lands inside a batch; at 0.3 s the queries
# fell behind and the final drain took 150 s of the test's 250.
LAND_EVERY_S = 0.6


class Feed:
    """Lands a file of events, impressions and clicks in each directory every `LAND_EVERY_S` (event
    time moves 1 s a file): each event twice (in this file and the next), a click for every third impression,
    2 s after it. Bounded: stops after `max_files` files or when told."""

    def __init__(self, root: Path, max_files: int = 1200):
        self.root, self.max_files, self.files = root, max_files, 0
        for kind in ("events", "impressions", "clicks"):
            (root / kind).mkdir(parents=True)
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.previous: list[dict] = []

    def _land(self, kind: str, rows: list[dict]) -> None:
        name = f"{self.files:06d}.json"
        tmp = self.root / kind / f".{name}"
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
        os.replace(tmp, self.root / kind / name)  # atomic: the file source never sees half a file

    def land_one(self) -> None:
        n = self.files
        at = lambda s: (T0 + timedelta(seconds=s)).isoformat()  # noqa: E731
        events = [{"id": n * 10 + i, "user": f"u{(n * 10 + i) % 7}", "at": at(n + i / 10)} for i in range(10)]
        self._land("events", events + self.previous)  # each event again in the next file
        self.previous = events
        self._land("impressions", [{"ad": n * 5 + i, "shown_at": at(n + i / 5)} for i in range(5)])
        self._land("clicks", [{"click_ad": n * 5 + i, "clicked_at": at(n + i / 5 + 2)} for i in range(5) if i % 3 == 0])
        self.files += 1

    def _run(self) -> None:
        while not self.stopping.is_set() and self.files < self.max_files:
            self.land_one()
            self.stopping.wait(LAND_EVERY_S)

    def finish(self) -> float:
        """Stop, land the last events' second copies (and an empty file beside them, so that every
        query runs a batch after this); when that was."""
        self.stopping.set()
        self.thread.join(timeout=30)
        finished_at = time.time()
        self._land("events", self.previous)
        self._land("impressions", [])
        self._land("clicks", [])
        self.files += 1
        return finished_at


def lines(files) -> list[dict]:
    return [json.loads(line) for part in files for line in Path(part).read_text().splitlines()]


def sink_rows(directory: Path) -> list[dict]:
    """What a file sink committed (listed in its `_spark_metadata` log), as any Spark reader of it
    sees it: the files an interrupted batch wrote before its commit are not part of the output."""
    return lines(committed_files(directory)[0])


def batches(directory: Path) -> list[tuple[int, list[dict]]]:
    """A foreachBatch output's complete batch writes (`_SUCCESS`), by batch id: an interrupted
    batch's partial write is done again by its replay."""
    return [(int(d.name.split("=")[1]), lines(sorted(d.glob("part-*.json"))))
            for d in sorted(directory.glob("batch=*")) if (d / "_SUCCESS").exists()]


def latest_counts(directory: Path) -> dict[str, int]:
    """Each user's running count as the newest batch that updated it wrote it."""
    out: dict[str, tuple[int, int]] = {}
    for batch, written in batches(directory):
        for row in written:
            if row["user"] not in out or out[row["user"]][0] < batch:
                out[row["user"]] = (batch, row["events"])
    return {u: n for u, (_b, n) in out.items()}


def inputs(root: Path, kind: str) -> list[dict]:
    return [json.loads(line) for f in sorted((root / kind).glob("[0-9]*.json")) for line in f.read_text().splitlines()]


@pytest.fixture(scope="module")
def setup(embedded_env, tmp_path_factory):
    work = tmp_path_factory.mktemp("ads")
    source, output, checkpoints = work / "in", work / "out", work / "chk"
    path = work / "sparkscale.yaml"
    path.write_text(
        "apps:\n"
        f"  - name: {APP}\n"
        f"    script: {SCRIPT}\n"
        f"    args: {json.dumps([str(source), str(output), str(checkpoints)])}\n"
        '    spark_conf: {"spark.sql.shuffle.partitions": "4"}\n'
        "    min_executors: 1\n    max_executors: 2\n    initial_executors: 2\n    executor_memory_mb: 512\n"
        "actuator: {ack_timeout_s: 30.0, confirm_timeout_s: 90.0}\n"
        "metrics: {port: 0}\n"
        # Under this load no trigger idles: a CCR stop lands inside a batch after this wait (10 s by default).
        "migration: {phase_timeout_s: 120, idle_trigger_wait_s: 2}\n")
    overrides = [*embedded_env.overrides, "logging.stderr_format=json"]
    return {"cfg": load_config(path, overrides), "path": str(path), "overrides": overrides, "source": source,
            "output": output}


def test_join_state_and_dedup_migrate_under_load_with_ccr_and_dsm_exactly(setup):
    cfg, source, output = setup["cfg"], setup["source"], setup["output"]
    feed = Feed(source)
    for _ in range(3):
        feed.land_one()  # something to read at the first trigger
    client = connect(cfg.redis)
    zk = zk_client(cfg.zookeeper)
    zk.start()
    prefix = cfg.redis.key_prefix
    submit(cfg, APP, setup["path"], setup["overrides"])
    feed.thread.start()
    migrated: list[tuple[str, str, dict]] = []
    try:
        def committed():
            infos = read_queries(client, prefix, APP)
            return all(q in infos and infos[q].migratable for q in QUERIES)

        wait_until(committed, 240, "the three queries to commit a batch and be migratable")
        # One migration per query, both strategies: DSM (whose recomputed batch a skipping sink could
        # take twice) on the dedup query, CCR on the join and the running count.
        for query, strategy, partitions in MIGRATIONS:
            code, lines, text = cli(setup, "migrate", "--app", APP, "--query", query, "--partitions",
                                    str(partitions), "--strategy", strategy, "--json")
            assert code == 0 and lines[-1]["ok"] is True, text
            journal = JournalStore(zk, cfg.zookeeper.root, APP).read()
            migrated.append((query, strategy, {**lines[-1], "repartition": journal.marks.get("repartition")}))
            wait_until(lambda q=query, p=partitions: int(
                client.hget(progress_key(prefix, APP, q), "state_partitions") or 0) == p,
                120, f"{query} to run on {partitions} state partitions after {strategy}")
        finished_at = feed.finish()
        landed = feed.files

        def drained():
            """Every query ran a batch after the last files landed and has no file left unread."""
            for q in QUERIES:
                progress = client.hgetall(progress_key(prefix, APP, q))
                sources = json.loads(progress.get("sources") or "[]")
                if float(progress.get("published_at") or 0) < finished_at or not sources or any(
                        s.get("backlog_files") != 0 for s in sources):
                    return False
            return True

        wait_until(drained, 240, f"every query to read all {landed} files")
    finally:
        feed.stopping.set()
        stop(cfg, APP)
        zk.stop()
        client.close()
    for query, strategy, answer in migrated:
        figures = answer.get("figures") or {}
        shown = {k: figures.get(k) for k in ("restore_s", "boundary_wait_s", "capture_s", "rebalance_s", "total_s",
                                             "catch_up_s", "recovery_s", "follow_up")}
        print(f"{query} {strategy}: phases_s {figures.get('phases_s')} {json.dumps(shown)} "
              f"finished_batches {(answer['repartition'] or {}).get('finished_batches')}")
    # Under this load the stops land inside batches: those were finished under their own ids first.
    finished = [(q, s) for q, s, a in migrated if (a["repartition"] or {}).get("finished_batches")]
    assert finished, [a["repartition"] for _q, _s, a in migrated]

    clicks = Counter(c["click_ad"] for c in inputs(source, "clicks"))
    joined = Counter(r["ad"] for r in sink_rows(output / "joined"))
    assert joined == clicks, (sum(joined.values()), sum(clicks.values()), (joined - clicks) + (clicks - joined))

    events = inputs(source, "events")
    per_user = Counter(e["user"] for e in events)
    assert latest_counts(output / "sessions") == dict(per_user)

    ids = Counter(r["id"] for _batch, written in batches(output / "deduped") for r in written)
    assert set(ids) == {e["id"] for e in events} and set(ids.values()) == {1}, ids.most_common(3)
    print(f"verified: {sum(clicks.values())} clicks joined, {len(events)} events in {len(per_user)} users' counts, "
          f"{len(ids)} distinct ids, after {len(migrated)} migrations")
