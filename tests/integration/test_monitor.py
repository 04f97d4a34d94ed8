"""The monitor against a real wordcount under a constant load: a live snapshot agrees with the load
generator, with the query's own progress reports and with the executor processes of the app."""

from __future__ import annotations

import bisect
import threading
import time
from datetime import datetime

import pytest
from click.testing import CliRunner

from sparkscale.apps.submit import stop, submit
from sparkscale.cli.offline import snapshot_command
from sparkscale.config import Config, load_config
from sparkscale.model.snapshot import Snapshot
from sparkscale.monitors.collector import AppNotRunningError, CollectOptions, collect_snapshot, read_progress
from sparkscale.monitors.host import executor_processes
from sparkscale.policies.base import get_policy
from sparkscale.policies.history import DecisionHistory
from sparkscale.redisconn import connect
from sparkscale_lab.pipelines.loadgen import SecondReport, run_loadgen
from tests.conftest import wait_until

pytestmark = pytest.mark.integration

APP = "wcmon"
QUERY = "counts"
RATE = 2000
MAX_LOAD_S = 150
MIN_BATCHES = 3
WINDOW_S = 20.0
IDLE_WINDOW_S = 12.0  # longer than Spark's 10 s between idle events (noDataProgressEventInterval)
EDGE_S = 5.0

CONFIG = f"""
apps:
  - name: {APP}
    pipeline: wordcount
    max_executors: 2
    initial_executors: 2
    executor_memory_mb: 512
    source_partitions: 2
    shuffle_partitions: 4
    max_records_per_batch: 20000
loop:
  window_s: {WINDOW_S}
"""


class SentClock:
    """(wall time, records sent) after every second of the load generator, to interpolate from."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.sent: list[int] = []

    def __call__(self, report: SecondReport) -> None:
        self.times.append(time.time())
        self.sent.append(report.sent_total)

    def sent_at(self, t: float) -> float:
        i = bisect.bisect_left(self.times, t)
        assert 0 < i < len(self.times), "the window must lie inside the load generator's run"
        t0, t1, s0, s1 = self.times[i - 1], self.times[i], self.sent[i - 1], self.sent[i]
        return s0 + (s1 - s0) * (t - t0) / (t1 - t0)


@pytest.fixture(scope="module")
def setup(embedded_env, tmp_path_factory) -> tuple[Config, str, list[str]]:
    path = tmp_path_factory.mktemp("monitor") / "sparkscale.yaml"
    path.write_text(CONFIG)
    overrides = [*embedded_env.overrides, "logging.stderr_format=json"]
    return load_config(path, overrides), str(path), overrides


def reported_batches(client, cfg: Config, query: str) -> dict[int, tuple[float, int]]:
    """batch id -> (when the query itself reports the batch ended, its numInputRows)."""
    app = cfg.app(APP)
    return {
        r.batch_id: (datetime.fromisoformat(r.timestamp.replace("Z", "+00:00")).timestamp()
                     + (r.batch_duration_ms or 0) / 1000, r.num_input_rows)
        for r in read_progress(client, cfg.redis.key_prefix, APP, query, app.source_partitions, since_s=0)
    }


def test_live_wordcount_snapshot_matches_load_progress_and_executors(setup, tmp_path):
    cfg, path, overrides = setup
    with pytest.raises(AppNotRunningError, match="not running"):
        collect_snapshot(cfg, APP)

    submit(cfg, APP, path, overrides)
    client = connect(cfg.redis)
    clock = SentClock()
    done = threading.Event()
    result: dict[str, object] = {}

    stop_load = threading.Event()

    def load() -> None:
        try:
            result["summary"] = run_loadgen(cfg, APP, f"constant:{RATE}@{MAX_LOAD_S}s", seed=7,
                                            stop=stop_load, on_second=clock)
        finally:
            done.set()

    def steady() -> bool:
        """A full window of load, with at least MIN_BATCHES ending in it (the first batch of a fresh
        query can take half a minute on a busy machine)."""
        now = time.time()
        if not clock.times or now - clock.times[0] < WINDOW_S + 2:
            return False
        ended = [e for e, _rows in reported_batches(client, cfg, QUERY).values() if now - WINDOW_S < e <= now]
        return len(ended) >= MIN_BATCHES

    worker = threading.Thread(target=load, daemon=True)
    try:
        worker.start()
        wait_until(lambda: steady() or done.is_set(), MAX_LOAD_S - 20, "a steady window of batches")
        assert not done.is_set(), "the load generator stopped early"
        snap = collect_snapshot(cfg, APP, CollectOptions(window_s=WINDOW_S))
        local_executors = {p.cmdline()[p.cmdline().index("--executor-id") + 1]
                           for p in executor_processes(snap.extensions["spark"]["app_id"])}
        wait_until(lambda: clock.times[-1] > snap.taken_at or done.is_set(), 10, "a load report after the snapshot")
        assert not done.is_set(), "the load generator stopped early"
        stop_load.set()
        wait_until(done.is_set, 30, "the load generator to stop")
        worker.join(5)
        reports = reported_batches(client, cfg, snap.query)
        # The CLI swaps sys.stdout for the whole process while it runs: only once the load generator's
        # thread has stopped logging is its stdout the snapshot alone.
        cli = CliRunner().invoke(snapshot_command, ["--app", APP, "--config", path,
                                                    *[a for o in overrides for a in ("--set", o)]])

        # The input stopped: once the last batch is older than a window, that window holds only
        # the agent's idle samples (Spark posts a QueryIdleEvent, not a progress event, for a trigger
        # that finds nothing new). The backlog is still known, 0, and the query says it is idle.
        def idle_window() -> Snapshot | None:
            quiet = collect_snapshot(cfg, APP, CollectOptions(window_s=IDLE_WINDOW_S))
            return quiet if quiet.extensions["source"]["idle"] and not quiet.extensions["monitor"]["batches"] else None

        quiet = wait_until(idle_window, 120, "a window of idle samples only")
    finally:
        stop(cfg, APP)

    # Kept for people: the live snapshot, and what the stages read and wrote.
    (tmp_path / "snapshot.json").write_text(snap.to_json(indent=2))

    # Operators: the virtual source, the scan (one task per input partition), the stateful count.
    assert [op.id for op in snap.operators] == ["source", "stage0", "stage1"]
    source, stage0, stage1 = snap.operators
    assert source.parallelism == stage0.parallelism == 2
    assert stage1.parallelism == 4
    # MIN_BATCHES ended in the window just before the snapshot; the monitor may date one at an edge
    # outside it. That they are the batches the query reported is checked below.
    assert len(snap.extensions["monitor"]["batches"]) >= MIN_BATCHES - 1

    # Arrival rate: what the load generator sent over the same window, within 10 %.
    achieved = (clock.sent_at(snap.taken_at) - clock.sent_at(snap.taken_at - WINDOW_S)) / WINDOW_S
    assert achieved == pytest.approx(RATE, rel=0.1)
    assert source.arrival_rate == pytest.approx(achieved, rel=0.1)

    # The batches the monitor used are the ones the query reports as ended in the window. The monitor
    # dates a batch by its last job, the query by the end of its commit a moment later, so a batch
    # ending at an edge of the window may fall either side; the edges get EDGE_S of slack.
    used = snap.extensions["monitor"]["batches"]
    excluded = {b["batch"] for b in snap.extensions["monitor"]["excluded_batches"]}
    start, end = snap.taken_at - WINDOW_S, snap.taken_at
    assert all(start - EDGE_S < reports[b][0] <= end + EDGE_S for b in used), (used, reports)
    inside = {b for b, (ended, _rows) in reports.items() if start + EDGE_S < ended <= end - EDGE_S}
    assert inside <= set(used) | excluded, (inside, used, excluded)

    # What the stages read agrees with what the query reports it took in, batch for batch.
    reported = sum(reports[b][1] for b in used)
    assert reported > 0
    assert sum(i.records_in for i in stage0.instances) == pytest.approx(reported, rel=0.01)
    assert sum(i.records_in for i in source.instances) == pytest.approx(reported, rel=0.01)
    assert sum(i.records_in for i in stage1.instances) > 0
    assert all(i.useful_time_s >= 0 for op in snap.operators for i in op.instances)

    # The executors listed are the app's executor processes (all on this host).
    assert {e.id for e in snap.executors} == local_executors
    assert len(local_executors) == 2

    # A valid snapshot: JSON round trip, the CLI, and DS2 plans from it.
    assert Snapshot.from_json(snap.to_json()) == snap
    assert cli.exit_code == 0, cli.output
    assert Snapshot.from_json(cli.stdout).query == QUERY
    plan = get_policy("ds2").decide(snap, DecisionHistory.empty(), cfg.policy, cfg.app(APP))
    assert set(plan.parallelism) == {"source", "stage0", "stage1"}

    # Idle: a known backlog of 0 and no input, from idle samples alone.
    assert quiet.operators[0].backlog == 0 and quiet.extensions["source"]["backlog_known"], quiet.extensions["source"]
    assert quiet.operators[0].arrival_rate == 0


def test_snapshot_command_says_when_the_app_does_not_run(setup):
    _, path, overrides = setup
    result = CliRunner().invoke(snapshot_command, ["--app", APP, "--config", path,
                                                   *[a for o in overrides for a in ("--set", o)]])
    assert result.exit_code == 1
    assert "is not running" in result.stderr
