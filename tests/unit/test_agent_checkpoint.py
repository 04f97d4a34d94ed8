"""The agent's reading of a query checkpoint before an offline repartition, and of Spark's answers."""

from __future__ import annotations

import json
from pathlib import Path

from sparkscale.agent.checkpoint import _is_already_partitioned, _state_partitions, uncommitted_at

ALREADY = (
    "An error occurred while calling o68.repartition.\n: org.apache.spark.sql.execution.streaming.state."
    "StateRepartitionShufflePartitionsAlreadyMatchError: [STATE_REPARTITION_INVALID_CHECKPOINT."
    "SHUFFLE_PARTITIONS_ALREADY_MATCH] The provided checkpoint location '/cp' is in an invalid state."
)


def checkpoint(tmp_path: Path, planned: dict[int, int], committed: list[int]) -> Path:
    """A checkpoint's offset log (batch -> shuffle partitions, Spark's v1 layout) and commit log."""
    (tmp_path / "offsets").mkdir(parents=True)
    (tmp_path / "commits").mkdir()
    for batch, partitions in planned.items():
        meta = {"batchWatermarkMs": 0, "conf": {"spark.sql.shuffle.partitions": str(partitions)}}
        (tmp_path / "offsets" / str(batch)).write_text(f"v1\n{json.dumps(meta)}\n{{}}\n")
        (tmp_path / "offsets" / f".{batch}.crc").write_bytes(b"\0")
    for batch in committed:
        (tmp_path / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    return tmp_path


def test_an_aborted_batch_at_the_target_count_is_left_for_the_restart(tmp_path):
    cp = checkpoint(tmp_path, {0: 8, 1: 8, 2: 8}, [0, 1])
    assert uncommitted_at(cp, 8) == 1
    assert uncommitted_at(cp, 2) == 0  # a real repartition: Spark decides (enforce_exactly_once_sink)


def test_clean_or_unreadable_checkpoints_go_to_spark(tmp_path):
    assert uncommitted_at(checkpoint(tmp_path / "a", {0: 4, 1: 4}, [0, 1]), 4) == 0
    assert uncommitted_at(tmp_path / "missing", 4) == 0
    # A failed repartition batch to 8 after committed 4s: Spark must retry it or refuse, not us.
    assert uncommitted_at(checkpoint(tmp_path / "b", {0: 4, 1: 8}, [0]), 4) == 0
    broken = checkpoint(tmp_path / "c", {0: 4, 1: 4}, [0])
    (broken / "offsets" / "1").write_text("v1\nnot json\n")
    assert uncommitted_at(broken, 4) == 0


def test_spark_answers():
    assert _is_already_partitioned(Exception(ALREADY))
    assert not _is_already_partitioned(Exception("[STATE_REPARTITION_INVALID_CHECKPOINT.LAST_BATCH_FAILED] ..."))
    assert _state_partitions({"stateOperators": [{"numShufflePartitions": 8}, {"numShufflePartitions": 2}]}) == 8
    assert _state_partitions({"stateOperators": []}) is None and _state_partitions(None) is None


def _commits(checkpoint, upto: int) -> None:
    (checkpoint / "commits").mkdir(parents=True, exist_ok=True)
    for b in range(upto + 1):
        (checkpoint / "commits" / str(b)).write_text("v1\n{}")


def test_a_file_sink_log_gets_the_batches_an_offline_repartition_added(tmp_path):
    from sparkscale.agent.checkpoint import fill_file_sink_log

    sink, checkpoint = tmp_path / "out", tmp_path / "cp"
    log = sink / "_spark_metadata"
    log.mkdir(parents=True)
    (log / "6").write_text('v1\n{"path":"file:///out/a.parquet","action":"add"}')
    _commits(checkpoint, 7)  # batch 7: the repartition's own
    assert fill_file_sink_log(checkpoint, f"FileSink[file:{sink}]") == [7]
    assert (log / "7").read_text() == "v1"
    assert fill_file_sink_log(checkpoint, f"FileSink[file:{sink}]") == []  # idempotent
    assert fill_file_sink_log(checkpoint, "ForeachBatchSink") == []  # not a file sink


def test_a_filled_compaction_batch_holds_every_file_so_far(tmp_path):
    from sparkscale.agent.checkpoint import fill_file_sink_log

    sink, checkpoint = tmp_path / "out", tmp_path / "cp"
    log = sink / "_spark_metadata"
    log.mkdir(parents=True)
    (log / "4.compact").write_text('v1\n{"path":"a"}\n{"path":"b"}')
    for b, name in ((5, "c"), (6, "d"), (7, "e"), (8, "f")):
        (log / str(b)).write_text(f'v1\n{{"path":"{name}"}}')
    _commits(checkpoint, 9)
    assert fill_file_sink_log(checkpoint, f"FileSink[{sink}]", compact_interval=5) == [9]
    lines = (log / "9.compact").read_text().splitlines()
    assert lines[0] == "v1" and [json.loads(x)["path"] for x in lines[1:]] == list("abcdef")


def test_an_interrupted_batch_is_set_aside_unless_a_file_sink_logged_its_output(tmp_path):
    import pytest

    from sparkscale.agent.checkpoint import InterruptedOutput, discard_uncommitted

    checkpoint, sink = tmp_path / "cp", tmp_path / "out"
    _commits(checkpoint, 5)
    offsets = checkpoint / "offsets"
    offsets.mkdir()
    for b in range(7):
        (offsets / str(b)).write_text("v1")
    (offsets / ".6.crc").write_text("crc")
    (sink / "_spark_metadata").mkdir(parents=True)
    (sink / "_spark_metadata" / "6").write_text("v1")
    with pytest.raises(InterruptedOutput, match="batch 6 was interrupted after its file sink logged its output"):
        discard_uncommitted(checkpoint, f"FileSink[file:{sink}]")
    assert (offsets / "6").exists()
    assert discard_uncommitted(checkpoint, "ForeachBatchSink") == [6]
    assert not (offsets / "6").exists() and (offsets / ".6.discarded").exists()
    assert (offsets / ".6.crc.discarded").exists() and not (offsets / ".6.crc").exists()
    assert discard_uncommitted(checkpoint, None) == []


def test_the_state_store_provider_is_read_from_the_checkpoint_and_decides_migratability(tmp_path):
    from sparkscale.agent.checkpoint import state_store_provider
    from sparkscale.protocol.queries import QueryInfo

    offsets = tmp_path / "offsets"
    offsets.mkdir()
    hdfs = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
    (offsets / "0").write_text('v1\n{"batchWatermarkMs":0,"conf":{"spark.sql.streaming.stateStore.providerClass":'
                               f'"{hdfs}"}}}}\n{{"logOffset":0}}')
    assert state_store_provider(tmp_path) == hdfs
    assert state_store_provider(tmp_path / "nothing") is None
    info = QueryInfo(name="q", id="1", run_id="r", status="active", checkpoint=f"file:{tmp_path}", restartable=True,
                     state_store_provider=hdfs, sources=("file",),
                     source_descriptions=(f"FileStreamSource[{tmp_path}]",), committed=True)
    assert not info.migratable and "its state store is HDFSBackedStateStoreProvider" in info.why_not_migratable()
    rocks = info.__class__(**{**info.__dict__, "state_store_provider": hdfs.replace(
        "HDFSBackedStateStoreProvider", "RocksDBStateStoreProvider")})
    assert rocks.migratable and QueryInfo.from_json(rocks.to_json()) == rocks
