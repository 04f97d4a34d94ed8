"""A stopped query's checkpoint: reading it, and rewriting its state into another partition count.

A stateful migration (stop, repartition, restart) must not hand Spark a checkpoint it would
mishandle, and must tell Spark's "already that many partitions" answer from a failure. What the
agent reads from checkpoint logs and from Spark's errors is here, with the one call of Spark's
offline state repartition (`spark._streamingCheckpointManager.repartition`).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from py4j.protocol import Py4JError

# Spark's error condition when the checkpoint already has the requested state partitions.
ALREADY_PARTITIONED = "STATE_REPARTITION_INVALID_CHECKPOINT.SHUFFLE_PARTITIONS_ALREADY_MATCH"


def repartition_state(spark: Any, checkpoint: Path, partitions: int, enforce_exactly_once_sink: bool) -> dict[str, Any]:
    """Rewrite the checkpoint's state into `partitions` state partitions (Spark's offline state
    repartition: a new batch that reads no input, picked up by the next start).

    Returns the outcome for the ack: `repartitioned` true with `partitions` and `duration_s`, or
    false with `already` (and `uncommitted_batches` when an aborted run left batches to run again).
    Any error but "already that many" propagates.
    """
    pending = _uncommitted_at(checkpoint, partitions)
    if pending:
        # Spark would write empty commits for the abandoned batches before noticing that the
        # count already matches: their input is then never read again and their state versions
        # are missing, so the restarted query fails (checked on 4.3.0). Without the call the
        # restart simply runs the abandoned batch again.
        return {"repartitioned": False, "already": partitions, "uncommitted_batches": pending}
    started = time.monotonic()
    try:
        spark._streamingCheckpointManager.repartition(str(checkpoint), partitions, enforce_exactly_once_sink)
    except Exception as exc:  # noqa: BLE001 - only "already that many" is an answer; the rest propagate
        if not _is_already_partitioned(exc):
            raise
        return {"repartitioned": False, "already": partitions}
    duration_s = round(time.monotonic() - started, 3)
    return {"repartitioned": True, "partitions": partitions, "duration_s": duration_s}


def _state_partitions(progress: dict[str, Any] | None) -> int | None:
    """State partitions of a query's first stateful operator, from a progress dict (None if stateless)."""
    operators = (progress or {}).get("stateOperators") or []
    if not operators or operators[0].get("numShufflePartitions") is None:
        return None
    return int(operators[0]["numShufflePartitions"])


def _is_already_partitioned(exc: BaseException) -> bool:
    """Spark's "already has the requested number of partitions". PySpark 4.3 does not convert this
    error: it arrives as a Py4JJavaError around a SparkThrowable, whose condition we read."""
    condition = None
    java_exception = getattr(exc, "java_exception", None)
    try:
        if java_exception is not None:
            condition = str(java_exception.getCondition())
    except Py4JError:
        pass
    return condition == ALREADY_PARTITIONED or ALREADY_PARTITIONED in str(exc)


def _log_batches(checkpoint: Path, log_dir: str) -> list[int]:
    directory = checkpoint / log_dir
    return sorted(int(f.name) for f in directory.iterdir() if f.name.isdigit()) if directory.is_dir() else []


def _batch_partitions(checkpoint: Path, batch_id: int) -> int | None:
    """The shuffle partitions a batch was planned with, from its offset log entry (line 2: metadata JSON)."""
    try:
        lines = (checkpoint / "offsets" / str(batch_id)).read_text().splitlines()
        return int(json.loads(lines[1])["conf"]["spark.sql.shuffle.partitions"])
    except (OSError, IndexError, KeyError, TypeError, ValueError):
        return None


def _uncommitted_at(checkpoint: Path, partitions: int) -> int:
    """Batches planned but not committed (an aborted run) when both the last committed batch and the
    last planned one already have `partitions`; 0 otherwise (then Spark's own checks apply)."""
    offsets, commits = _log_batches(checkpoint, "offsets"), _log_batches(checkpoint, "commits")
    if not offsets or not commits or offsets[-1] <= commits[-1]:
        return 0
    if any(_batch_partitions(checkpoint, batch) != partitions for batch in (commits[-1], offsets[-1])):
        return 0
    return offsets[-1] - commits[-1]
