"""A stopped query's checkpoint: reading it, and rewriting its state into another partition count.

A stateful migration (stop, repartition, restart) must not hand Spark a checkpoint it would
mishandle, and must tell Spark's "already that many partitions" answer from a failure. What the
agent reads from checkpoint logs and from Spark's errors is here, with the one call of Spark's
offline state repartition (`spark._streamingCheckpointManager.repartition`).
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from py4j.protocol import Py4JError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Spark's error condition when the checkpoint already has the requested state partitions.
ALREADY_PARTITIONED = "STATE_REPARTITION_INVALID_CHECKPOINT.SHUFFLE_PARTITIONS_ALREADY_MATCH"
# How a file sink describes itself in a query's progress (`sink.description`).
_FILE_SINK = re.compile(r"^FileSink\[(?P<path>.+)\]$")


class InterruptedOutput(Exception):
    """An interrupted batch already wrote its output to a file sink: it must be finished, not re-planned."""


def discard_uncommitted(checkpoint: Path, sink_description: str | None) -> list[int]:
    """Set aside the offsets of batches planned but not committed (a stop inside a batch); the ids.

    The agent finishes such batches under their own ids before a repartition
    (`agent.queries.QueryControl.finish_interrupted`), so this is what is left for a failed
    repartition's own batch, and for a batch that could not be finished.

    Spark 4.3.0's offline repartition past such a batch leaves a checkpoint a file source cannot
    restart from (FileStreamSource.getBatch's offset assertion fails). Without their offsets the
    repartition starts from the last committed batch, and the restarted query plans the interrupted
    input again (a file source re-reads the files its log holds for it; a source with offsets reads
    from the committed end): the batch is recomputed, as DSM does. Refused (InterruptedOutput) when
    a file sink already logged that batch's output. Set aside as `.<id>.discarded`, not deleted."""
    pending = pending_batches(checkpoint)
    if not pending:
        return []
    match = _FILE_SINK.match(sink_description or "")
    if match is not None:
        log_dir = Path(urlparse(match.group("path")).path) / "_spark_metadata"
        written = [b for b in pending if (log_dir / str(b)).exists() or (log_dir / f"{b}.compact").exists()]
        if written:
            raise InterruptedOutput(f"batch {written[0]} was interrupted after its file sink logged its output")
    for batch in pending:
        directory = checkpoint / "offsets"
        os.replace(directory / str(batch), directory / f".{batch}.discarded")
        crc = directory / f".{batch}.crc"  # the local file system's checksum of the entry
        if crc.exists():
            os.replace(crc, directory / f".{batch}.crc.discarded")
    return pending


def repartition_state(spark: SparkSession, checkpoint: Path, partitions: int, enforce_exactly_once_sink: bool,
                      sink_description: str | None = None) -> dict[str, Any]:
    """Rewrite the checkpoint's state into `partitions` state partitions (Spark's offline state
    repartition: a new batch that reads no input, picked up by the next start).

    Returns the outcome for the ack: `repartitioned` true with `partitions` and `duration_s`, or
    false with `already` (and `uncommitted_batches` when an aborted run left batches to run again).
    Any error but "already that many" propagates.
    """
    pending = uncommitted_at(checkpoint, partitions)
    if pending:
        # Spark would write empty commits for the abandoned batches before noticing that the
        # count already matches: their input is then never read again and their state versions
        # are missing, so the restarted query fails (checked on 4.3.0). Without the call the
        # restart simply runs the abandoned batch again.
        return {"repartitioned": False, "already": partitions, "uncommitted_batches": pending}
    discarded = discard_uncommitted(checkpoint, sink_description)
    started = time.monotonic()
    try:
        spark._streamingCheckpointManager.repartition(str(checkpoint), partitions, enforce_exactly_once_sink)
    except Exception as exc:  # only "already that many" is an answer; the rest propagate
        # A failed repartition leaves its batch's offsets without a commit, and Spark then refuses
        # to start the query (STREAMING_UNFINISHED_REPARTITION_DETECTED, seen on 4.3.0): set it aside
        # so that the query can start again on its old count.
        discard_uncommitted(checkpoint, None)
        if not _is_already_partitioned(exc):
            raise
        return {"repartitioned": False, "already": partitions}
    duration_s = round(time.monotonic() - started, 3)
    outcome: dict[str, Any] = {"repartitioned": True, "partitions": partitions, "duration_s": duration_s}
    if discarded:
        outcome["recomputed_batches"] = discarded
    return outcome


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


def uncommitted_at(checkpoint: Path, partitions: int) -> int:
    """Batches planned but not committed (an aborted run) when both the last committed batch and the
    last planned one already have `partitions`; 0 otherwise (then Spark's own checks apply)."""
    offsets, commits = _log_batches(checkpoint, "offsets"), _log_batches(checkpoint, "commits")
    if not offsets or not commits or offsets[-1] <= commits[-1]:
        return 0
    if any(_batch_partitions(checkpoint, batch) != partitions for batch in (commits[-1], offsets[-1])):
        return 0
    return offsets[-1] - commits[-1]


def is_temporary(root: str) -> bool:
    """Spark made the checkpoint root up (`temporary-<uuid>` under java.io.tmpdir, deleted on stop)
    because neither the writer nor spark.sql.streaming.checkpointLocation named one."""
    return root.rstrip("/").rsplit("/", 1)[-1].startswith("temporary-")


def last_committed_batch(checkpoint: Path) -> int | None:
    """The newest batch of the checkpoint's commit log; None: nothing was ever committed."""
    commits = _log_batches(checkpoint, "commits")
    return commits[-1] if commits else None


def repair_first_batch(checkpoint: Path) -> str | None:
    """Make a checkpoint whose first batch never committed startable again; what was done, or None.

    A run stopped (or crashed) inside batch 0 leaves its offsets and the state its finished tasks
    wrote, and no commit. Spark 4.3 then refuses to start it (STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY:
    the state location "should be empty on batch 0"). Nothing of that state was committed, so it is
    set aside (`state` -> `state.batch0-<time>.discarded`); the offsets stay, so the restart runs
    batch 0 again over the same input, under the same id."""
    state = checkpoint / "state"
    if last_committed_batch(checkpoint) is not None or not _log_batches(checkpoint, "offsets"):
        return None
    if not state.is_dir() or not any(state.iterdir()):
        return None
    aside = checkpoint / f"state.batch0-{int(time.time())}.discarded"
    os.replace(state, aside)
    return (f"batch 0 never committed and left state behind, which Spark refuses on batch 0: set it aside "
            f"as {aside.name}; batch 0 runs again over the same offsets")


def uncommitted_batches(checkpoint: Path) -> int:
    """Batches whose offsets are logged but whose commit is not: a stop that landed inside a batch."""
    return len(pending_batches(checkpoint))


def pending_batches(checkpoint: Path) -> list[int]:
    """Ids of the batches planned (offsets logged) after the last committed one."""
    commits = _log_batches(checkpoint, "commits")
    last_commit = commits[-1] if commits else -1
    return [b for b in _log_batches(checkpoint, "offsets") if b > last_commit]



def fill_file_sink_log(checkpoint: Path, sink_description: str | None, compact_interval: int = 10) -> list[int]:
    """Give a file sink's log the batches an offline repartition added; the ids written.

    Spark 4.3.0's offline state repartition commits a batch of its own in the query's logs but not
    in a file sink's `_spark_metadata` log, whose next compaction batch then fails with
    BATCH_METADATA_NOT_FOUND (seen on 4.3.0). Those batches wrote no files: each gets the entry
    FileStreamSink itself writes for a batch without output (the version line alone)."""
    match = _FILE_SINK.match(sink_description or "")
    if match is None:
        return []
    log_dir = Path(urlparse(match.group("path")).path) / "_spark_metadata"
    if not log_dir.is_dir():
        return []
    logged = {int(name.removesuffix(".compact")) for name in os.listdir(log_dir)
              if name.removesuffix(".compact").isdigit()}
    commits = _log_batches(checkpoint, "commits")
    if not logged or not commits:
        return []
    written = []
    for batch in range(max(logged) + 1, commits[-1] + 1):
        if (batch + 1) % compact_interval == 0:
            # A compaction batch: its entry holds every file so far (the last compaction and after).
            entry, text = log_dir / f"{batch}.compact", "\n".join(["v1", *_sink_entries(log_dir, batch)])
        else:
            entry, text = log_dir / str(batch), "v1"
        tmp = log_dir / f".{batch}.sparkscale.tmp"
        tmp.write_text(text)
        os.replace(tmp, entry)
        written.append(batch)
    return written


def _sink_entries(log_dir: Path, before: int) -> list[str]:
    """The file entries (JSON lines) a sink log holds for batches before `before`."""
    batches = sorted((int(n.removesuffix(".compact")), n) for n in os.listdir(log_dir)
                     if n.removesuffix(".compact").isdigit() and int(n.removesuffix(".compact")) < before)
    last_compact = max((b for b, n in batches if n.endswith(".compact")), default=-1)
    lines: list[str] = []
    for batch, name in batches:
        if batch >= last_compact:
            lines += (log_dir / name).read_text().splitlines()[1:]
    return [line for line in lines if line.strip()]


def state_store_provider(checkpoint: Path) -> str | None:
    """The state store provider the query's checkpoint was written with (its last offset log entry's
    metadata; the checkpoint's choice wins over the session's at a restart), or None if unknown."""
    batches = _log_batches(checkpoint, "offsets")
    if not batches:
        return None
    try:
        lines = (checkpoint / "offsets" / str(batches[-1])).read_text().splitlines()
        provider: str | None = json.loads(lines[1])["conf"].get("spark.sql.streaming.stateStore.providerClass")
        return provider
    except (OSError, IndexError, KeyError, TypeError, ValueError):
        return None
