"""Load figures of a snapshot the real builder made (snapshot_builder): the virtual source gives
each of its partitions the whole window as useful time, which no core spent, so the load
utilisation counts the stages' useful time only.

The query reads 4 Kafka partitions over a 30 s window in two batches, a scan stage of one task per
partition then a shuffle stage of two tasks, on 2 executors of 2 cores; the trigger is 1 s.
"""

from __future__ import annotations

import pytest

from sparkscale.config import AppConfig, PolicyConfig
from sparkscale.model.snapshot import Snapshot
from sparkscale.monitors.progress_reports import ProgressReport
from sparkscale.monitors.snapshot_builder import Batch, SnapshotInputs, build_snapshot
from sparkscale.monitors.spark_rest import RestExecutor, RestStage, RestTask
from sparkscale.policies.dhalion import DhalionPolicy
from sparkscale.policies.figures import load_figures, stage_work
from sparkscale.policies.history import DecisionHistory
from sparkscale.protocol.queries import SourceReport

T = 1_800_000_000.0
WINDOW_S = 30.0
PARTITION_ROWS = (100, 100, 200, 200)  # each batch reads these from partitions 0..3: 600 rows
ARRIVAL_RPS = 60.0  # each report's input rate (the arrival estimate without positions or backlogs)
CORES = 4  # 2 executors x 2 cores


def task(index: int, run_ms: float, *, scan: int = 0, shuffle: int = 0, fetch_wait_ms: float = 0.0) -> RestTask:
    return RestTask(task_id=index, index=index, executor_id=str(1 + index % 2), status="SUCCESS",
                    run_time_ms=run_ms, input_records=scan, shuffle_read_records=shuffle,
                    fetch_wait_ms=fetch_wait_ms, shuffle_write_records=scan, output_records=shuffle)


def batch(n: int, start_s: float) -> tuple[Batch, dict[int, list[RestStage]], ProgressReport]:
    """Batch `n`: the scan's tasks work 0.3 s each, the shuffle's 0.3 s each (0.5 s less 0.2 s fetch wait)."""
    end_s = start_s + 0.4
    scan = RestStage(stage_id=10 * n, attempt_id=0, status="COMPLETE", name="scan", num_tasks=4,
                     submitted_at_s=start_s, completed_at_s=start_s + 0.2,
                     tasks=tuple(task(p, 300, scan=rows) for p, rows in enumerate(PARTITION_ROWS)))
    rows = sum(PARTITION_ROWS)
    shuffle = RestStage(stage_id=10 * n + 1, attempt_id=0, status="COMPLETE", name="shuffle", num_tasks=2,
                        submitted_at_s=start_s + 0.2, completed_at_s=end_s,
                        tasks=tuple(task(p, 500, shuffle=rows // 2, fetch_wait_ms=200) for p in range(2)))
    before = {"t": {str(p): (n - 1) * r for p, r in enumerate(PARTITION_ROWS)}}
    after = {"t": {str(p): n * r for p, r in enumerate(PARTITION_ROWS)}}
    source = SourceReport("KafkaV2[Subscribe[t]]", "kafka", num_input_rows=rows, start_offset=before,
                          end_offset=after)
    report = ProgressReport(batch_id=n, run_id="r", num_input_rows=rows, batch_duration_ms=400,
                            input_rows_per_s=ARRIVAL_RPS, published_at_s=end_s, sources=(source,))
    return (Batch("r", n, (n,), (scan.stage_id, shuffle.stage_id), start_s, end_s),
            {scan.stage_id: [scan], shuffle.stage_id: [shuffle]}, report)


def snapshot() -> Snapshot:
    made = [batch(1, T + 10), batch(2, T + 20)]
    executors = [RestExecutor(id=e, host="h", cores=2, active=True, active_tasks=0, max_memory_bytes=1 << 30,
                              added_at_s=T - 100) for e in ("1", "2")]
    return build_snapshot(SnapshotInputs(
        app="wc", query="counts", taken_at=T + WINDOW_S, window_s=WINDOW_S, executors=executors,
        batches=[b for b, _, _ in made], stages={k: v for _, s, _ in made for k, v in s.items()},
        progress=[r for _, _, r in made], trigger_interval_s=1.0, host={}, app_figures={}))


def test_load_utilisation_counts_the_stages_useful_time_not_the_virtual_sources_window():
    snap = snapshot()
    source = snap.operator("source")
    assert [i.records_in for i in source.instances] == [2 * r for r in PARTITION_ROWS]
    assert [i.useful_time_s for i in source.instances] == [WINDOW_S] * 4  # what the builder gives it
    # The stages: 2 batches x (4 scan tasks + 2 shuffle tasks) x 0.3 s = 3.6 core-s, for 1200 source records.
    useful_s, records = 2 * (4 + 2) * 0.3, 2 * sum(PARTITION_ROWS)
    work = stage_work(snap)
    assert (work.useful_s, work.source_records) == (pytest.approx(useful_s), records)
    figures = load_figures(snap, AppConfig(name="wc"))
    assert figures.arrival_rate == pytest.approx(ARRIVAL_RPS)
    assert figures.processed_rate == pytest.approx(records / WINDOW_S)  # 40 rec/s: the arrival is larger
    # 60 rec/s x 0.003 core-s per record / 4 cores = 0.045. Counting the source's 4 x 30 s as well
    # (the old sum) gave 60 x (3.6 + 120) / 1200 / 4 = 1.545: an app at 5 % load read as overloaded.
    assert figures.load_utilization == pytest.approx(ARRIVAL_RPS * useful_s / records / CORES)
    assert figures.load_utilization == pytest.approx(0.045)
    assert figures.utilization == pytest.approx(0.4)  # the batch ratio (0.4 s per 1 s trigger) is the larger


def test_dhalion_sees_the_over_provisioning_on_the_builders_snapshot():
    # Utilisation 0.4 < 0.5 and no backpressure: 2 -> ceil(2 x 0.4 / 0.8) = 1 executor (the old
    # figure, 1.545, called the app healthy).
    cfg = PolicyConfig(name="dhalion", target_utilization=0.8)
    plan = DhalionPolicy().decide(snapshot(), DecisionHistory.empty(), cfg, AppConfig(name="wc"))
    [action] = plan.actions
    assert (action.type, action.from_, action.to) == ("scale_executors", 2, 1)
    assert plan.observation.diagnosis == "over_provisioning"
