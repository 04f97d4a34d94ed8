"""The progress fields the agent publishes per batch, and the head side's typed reading of them: the
existing figures unchanged, plus the state reload figures Spark 4.3.0 gives in
`stateOperators[*].customMetrics` (summed over the stateful operators; absent when none reports
them). Progress objects are PySpark's own, built from JSON as Spark emits it (no JVM)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from pyspark.sql.streaming.listener import StreamingQueryProgress

from sparkscale.agent.progress import progress_fields, state_load_fields
from sparkscale.monitors.progress_reports import ProgressReport

RELOAD = {"rocksdbLoadLatencyMs": 1830, "rocksdbNumLoadedFromDfs": 2, "rocksdbReplayChangeLogLatencyMs": 120,
          "rocksdbNumReplayChangelogFiles": 7}


def operator(name: str, custom: dict | None, rows: int = 40, partitions: int = 4) -> dict:
    op = {"operatorName": name, "numRowsTotal": rows, "numRowsUpdated": 5, "numRowsRemoved": 0,
          "allUpdatesTimeMs": 12, "allRemovalsTimeMs": 0, "commitTimeMs": 30, "memoryUsedBytes": 1024,
          "numRowsDroppedByWatermark": 0, "numShufflePartitions": partitions, "numStateStoreInstances": partitions}
    if custom is not None:
        op["customMetrics"] = custom
    return op


def spark_progress(*operators: dict) -> StreamingQueryProgress:
    return StreamingQueryProgress.fromJson({
        "id": "6a1f2c3e-0000-4000-8000-000000000001", "runId": "6a1f2c3e-0000-4000-8000-000000000002",
        "name": "wordcount", "timestamp": "2030-01-01T00:00:10.000Z", "batchId": 42, "batchDuration": 2500,
        "durationMs": {"addBatch": 2300, "triggerExecution": 2500}, "stateOperators": list(operators),
        "sources": [{"description": "redis", "startOffset": None, "endOffset": None, "latestOffset": None,
                     "numInputRows": 900, "inputRowsPerSecond": 1000.0, "processedRowsPerSecond": 360.0}],
        "sink": {"description": "redis-sink", "numOutputRows": 900},
        "numInputRows": 900, "inputRowsPerSecond": 1000.0, "processedRowsPerSecond": 360.0,
    })


def redis_strings(fields: dict) -> dict[str, str]:
    """What Redis gives back: every value a string."""
    return {k: str(v) for k, v in fields.items()}


def test_reload_figures_are_summed_over_the_stateful_operators_next_to_the_existing_fields():
    fields = progress_fields(spark_progress(
        operator("flatMapGroupsWithState", {**RELOAD, "rocksdbGetCount": 99}),
        operator("dedupe", {"rocksdbLoadLatencyMs": 170, "rocksdbNumLoadedFromDfs": 1}, rows=10, partitions=8)))
    assert (fields["state_load_ms"], fields["state_loaded_from_dfs"]) == (2000, 3)
    assert (fields["state_replay_ms"], fields["state_replayed_files"]) == (120, 7)
    assert not any(k.startswith("rocksdb") for k in fields)  # only the four, under their field names
    # The existing figures, as before.
    assert (fields["query"], fields["batch_id"], fields["num_input_rows"], fields["batch_duration_ms"]) == (
        "wordcount", 42, 900, 2500)
    assert (fields["state_rows_total"], fields["state_partitions"]) == (50, 8)
    assert [op["operator"] for op in json.loads(fields["state_operators"])] == ["flatMapGroupsWithState", "dedupe"]


def test_an_aggregations_reload_figures_are_left_out_spark_wipes_them():
    # Spark 4.3.0: the save step's second RocksDB.load of the version the restore loaded clears the
    # load metrics, so a streaming aggregation reports 0 even for a batch that reloaded its state.
    wiped = progress_fields(spark_progress(operator("stateStoreSave", {**RELOAD, "rocksdbNumLoadedFromDfs": 0})))
    assert "state_loaded_from_dfs" not in wiped and "state_load_ms" not in wiped
    assert wiped["state_rows_total"] == 40  # its other figures stay
    mixed = progress_fields(spark_progress(operator("stateStoreSave", RELOAD),
                                           operator("dedupe", {"rocksdbNumLoadedFromDfs": 1}, rows=10)))
    assert mixed["state_loaded_from_dfs"] == 1  # only the operator whose figures hold


def test_metrics_no_operator_reports_are_absent_not_zero():
    hdfs = progress_fields(spark_progress(operator("stateStoreSave", {"loadedMapCacheMissCount": 4})))
    assert not {"state_load_ms", "state_loaded_from_dfs", "state_replay_ms", "state_replayed_files"} & hdfs.keys()
    assert hdfs["state_rows_total"] == 40
    stateless = progress_fields(spark_progress())
    assert "state_load_ms" not in stateless and "state_partitions" not in stateless
    # An operator object without customMetrics at all (another wrapper) and a zero that is reported.
    ops = [SimpleNamespace(), SimpleNamespace(customMetrics={"rocksdbNumLoadedFromDfs": 0})]
    assert state_load_fields(ops) == {"state_loaded_from_dfs": 0}


def test_progress_report_reads_the_reload_figures_and_none_without_them():
    fields = redis_strings(progress_fields(spark_progress(operator("dedupe", RELOAD))))
    report = ProgressReport.from_fields(fields)
    assert (report.state_load_ms, report.state_loaded_from_dfs) == (1830.0, 2)
    assert (report.state_replay_ms, report.state_replayed_files) == (120.0, 7)
    assert (report.batch_id, report.state_rows_total, report.state_partitions) == (42, 40, 4)
    plain = ProgressReport.from_fields(redis_strings(progress_fields(spark_progress(operator("s", None)))))
    assert (plain.state_load_ms, plain.state_loaded_from_dfs, plain.state_replay_ms, plain.state_replayed_files) == (
        None, None, None, None)
    assert plain.state_rows_total == 40


@pytest.mark.parametrize("value", ["", "None"])
def test_an_empty_reload_field_reads_as_none(value):
    fields = redis_strings(progress_fields(spark_progress(operator("s", RELOAD))))
    assert ProgressReport.from_fields({**fields, "state_load_ms": value}).state_load_ms is None
