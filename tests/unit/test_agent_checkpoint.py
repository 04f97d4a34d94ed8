"""The agent's reading of a query checkpoint before an offline repartition, and of Spark's answers."""

from __future__ import annotations

import json
from pathlib import Path

from sparkscale.agent.checkpoint import _is_already_partitioned, _state_partitions, _uncommitted_at

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
    assert _uncommitted_at(cp, 8) == 1
    assert _uncommitted_at(cp, 2) == 0  # a real repartition: Spark decides (enforce_exactly_once_sink)


def test_clean_or_unreadable_checkpoints_go_to_spark(tmp_path):
    assert _uncommitted_at(checkpoint(tmp_path / "a", {0: 4, 1: 4}, [0, 1]), 4) == 0
    assert _uncommitted_at(tmp_path / "missing", 4) == 0
    # A failed repartition batch to 8 after committed 4s: Spark must retry it or refuse, not us.
    assert _uncommitted_at(checkpoint(tmp_path / "b", {0: 4, 1: 8}, [0]), 4) == 0
    broken = checkpoint(tmp_path / "c", {0: 4, 1: 4}, [0])
    (broken / "offsets" / "1").write_text("v1\nnot json\n")
    assert _uncommitted_at(broken, 4) == 0


def test_spark_answers():
    assert _is_already_partitioned(Exception(ALREADY))
    assert not _is_already_partitioned(Exception("[STATE_REPARTITION_INVALID_CHECKPOINT.LAST_BATCH_FAILED] ..."))
    assert _state_partitions({"stateOperators": [{"numShufflePartitions": 8}, {"numShufflePartitions": 2}]}) == 8
    assert _state_partitions({"stateOperators": []}) is None and _state_partitions(None) is None
