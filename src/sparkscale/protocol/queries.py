"""What the agent tells the head side about an app's queries and their sources (no PySpark).

An app may run any number of queries of any sources. The agent keeps one entry per query in the
hash `queries_key` (field: the query's name, or its id when unnamed; value: `QueryInfo` JSON) and,
with every progress report, one `SourceReport` per source of the query in the progress fields'
`sources` (JSON list). The monitor, the planner, the migration runner and `status` read them here,
so that neither side guesses at the other's spelling.

Backlog estimates (`SourceReport.backlog_estimate`), best first:
- `source_offsets`: the source's offsets count records (the Redis streams source's `counts`,
  Kafka's `{topic: {partition: offset}}`): latest minus end offsets, exact; Kafka's own
  `avgOffsetsBehindLatest` / `maxOffsetsBehindLatest` are kept in `metrics`;
- `file_listing`: the file source reports none (its `latestOffset` is null): the files behind (in
  the source directory and not logged by the query's checkpoint, `sources/<n>`, or logged for a
  later batch), their bytes times the rows per byte of the last batch that read files; the rows
  per file instead while no batch's bytes are known (`backlog_detail` says which, agent/sources.py);
- `unknown`: no signal; the monitor then sizes from rates and batch timing and says so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from pydantic import GetCoreSchemaHandler, JsonValue
from pydantic_core import CoreSchema

from sparkscale.model.codec import Codec, Json, reshaped, without_nulls
from sparkscale.model.fields import object_at

BACKLOG_ESTIMATES = ("source_offsets", "file_listing", "unknown")
ROCKSDB_PROVIDER_CLASS = "RocksDBStateStoreProvider"  # the only provider Spark 4.3 repartitions offline
# The state reload figures of a batch: Spark 4.3.0's RocksDB custom metrics in
# `progress.stateOperators[*].customMetrics` (summed over the query's stateful operators, each
# already a sum over the stage's tasks: task time, not wall time) -> the progress field that carries
# them. rocksdbNumLoadedFromDfs > 0 marks a batch that loaded state from the checkpoint.
# Operators whose load figures Spark 4.3.0 wipes before it reports them: a streaming aggregation
# (and a session window) opens its store twice in a task, for the restore and then for the save;
# `RocksDB.load` clears its load metrics and `loadedFromDfs` on every call, and the second call
# (the version is loaded already) measures nothing. Their figures read 0 even after a reload from
# the checkpoint, so they are not published (docs/internals.md, "State reload figures").
RELOAD_FIGURES_RESET_BY: frozenset[str] = frozenset({"stateStoreSave", "sessionWindowStateStoreSaveExec"})
STATE_LOAD_FIELDS: dict[str, str] = {
    "rocksdbLoadLatencyMs": "state_load_ms",
    "rocksdbNumLoadedFromDfs": "state_loaded_from_dfs",
    "rocksdbReplayChangeLogLatencyMs": "state_replay_ms",
    "rocksdbNumReplayChangelogFiles": "state_replayed_files",
}


class Replay(StrEnum):
    """Whether a source gives the same records again after a restart of its query."""

    # Its offsets are in the query's checkpoint and the records stay readable at them: a restarted
    # query reads exactly what the stopped run had not committed.
    OFFSETS = "replays_from_offsets"
    # It hands out records once (a socket's lines, an in-memory stream's rows) or is unknown: a
    # restart reconnects or starts afresh, and what the old run held is gone.
    NONE = "not_replayable"


# Source kinds (agent.sources.source_kind, or the description's first word) whose offsets Spark
# checkpoints and whose records can be read again at them. The rate source computes its rows from
# the offset (and the start time kept in the checkpoint), so it replays too.
REPLAYABLE_KINDS: frozenset[str] = frozenset({"redis_streams", "kafka", "file", "rate", "delta", "kinesis"})
_WHY_NOT_REPLAYABLE = {
    "socket": "a socket source hands each line out once: a restart opens a new connection and what "
              "the old one held is lost",
    "memory": "an in-memory stream lives in the driver's process: a restart cannot read it again",
}


def source_replay(kind: str, description: str = "") -> tuple[Replay, str]:
    """(replay, why) for one source of a query: what a restart of the query does to its input."""
    word = description.split("[", 1)[0].lower()
    if kind in REPLAYABLE_KINDS or any(word.startswith(k) for k in ("delta", "kinesis")):
        return Replay.OFFSETS, f"{kind} source: replays from the offsets in the checkpoint"
    if kind == "socket" or "socket" in word:
        return Replay.NONE, _WHY_NOT_REPLAYABLE["socket"]
    if word.startswith("memorystream") or kind == "memory":
        return Replay.NONE, _WHY_NOT_REPLAYABLE["memory"]
    return Replay.NONE, (f"sparkscale does not know whether {description or kind!r} replays from its committed "
                         "offsets, so it treats it as a source that does not")


def queries_key(prefix: str, app: str) -> str:
    """The app's queries as the agent last saw them (a hash: query name -> `QueryInfo` JSON)."""
    return f"{prefix}{app}:queries"


@dataclass(frozen=True)
class SourceReport:
    """One source of one query at one progress report."""

    description: str
    kind: str  # "redis_streams", "kafka", "file", "rate", ... or "other"
    num_input_rows: int = 0
    input_rows_per_s: float | None = None
    processed_rows_per_s: float | None = None
    start_offset: Json = None  # as the source reports it
    end_offset: Json = None
    latest_offset: Json = None
    metrics: dict[str, str] = field(default_factory=dict)
    backlog_records: int | None = None  # None: unknown
    backlog_files: int | None = None  # file source only
    backlog_estimate: str = "unknown"
    backlog_detail: str = ""
    position_records: int | None = None  # records ever arrived, where a source can tell (arrival rate)
    # What `position_records` counts: "records", or for a file source whose records cannot be
    # counted cheaply, "files" (positions are only compared with positions of the same source).
    position_unit: str = "records"

    @classmethod
    def __get_pydantic_core_schema__(cls, source: object, handler: GetCoreSchemaHandler) -> CoreSchema:
        # Keys of a newer agent are ignored; an older one's report may lack the description and kind.
        return reshaped(handler, source, lambda v: {"description": "", "kind": "other", **object_at(v, "")})

    def to_dict(self) -> dict[str, JsonValue]:
        return SOURCE_REPORT_JSON.dump_object(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SourceReport:
        return SOURCE_REPORT_JSON.load(data)


def source_reports(fields: dict[str, Any]) -> list[SourceReport]:
    """The `sources` of a progress hash or history entry (JSON text in Redis)."""
    raw = fields.get("sources")
    if raw in (None, ""):
        return []
    data = json.loads(raw) if isinstance(raw, (str, bytes)) else raw
    return [SourceReport.from_dict(d) for d in data if isinstance(d, dict)]


@dataclass(frozen=True)
class QueryInfo:
    """One query of an app, as the agent sees it in the driver."""

    name: str  # the query's name, or its id when the user gave none
    id: str
    run_id: str
    status: str  # "active", "held" (stopped for a migration), "terminated"
    checkpoint: str | None = None  # resolved checkpoint root; None: unknown
    temporary_checkpoint: bool = False  # Spark made one up: state does not survive a restart
    restartable: bool = False  # the agent captured the writer that started it
    pausable: bool = False  # every source honours the app's pause key (the Redis streams source)
    sources: tuple[str, ...] = ()  # source kinds, in the query's order
    state_partitions: int | None = None
    trigger_interval_s: float | None = None
    state_store_provider: str | None = None  # as the checkpoint records it; None: not known yet
    updated_at: float = 0.0
    error: str | None = None  # why it terminated, if it failed
    source_descriptions: tuple[str, ...] = ()  # as Spark describes each source, in `sources`' order
    committed: bool = False  # a batch of it has committed (its progress was reported)
    # No name, and its checkpoint is a random subdirectory of spark.sql.streaming.checkpointLocation:
    # the agent restarts it on the same directory, but a new driver would give it another one.
    session_checkpoint: bool = False

    @property
    def migratable(self) -> bool:
        """A stateful migration (stop, repartition, restart) can be carried out on it."""
        return self.why_not_migratable() is None

    def not_replayable(self) -> list[tuple[str, str]]:
        """(source, why) for each source a restart would lose input of."""
        out = []
        for i, kind in enumerate(self.sources):
            description = self.source_descriptions[i] if i < len(self.source_descriptions) else ""
            replay, why = source_replay(kind, description)
            if replay is not Replay.OFFSETS:
                out.append((description or kind, why))
        return out

    def why_not_restartable(self, allow_lossy_restart: bool = False) -> str | None:
        """Why stopping and starting this query again could lose, duplicate or wreck something
        (None: it may be restarted). Each answer says what the user can change."""
        if self.checkpoint is None or self.temporary_checkpoint:
            return ("it has no checkpoint location (set option('checkpointLocation', ...) or "
                    "spark.sql.streaming.checkpointLocation): its state would not survive a restart")
        if not self.restartable:
            return "the agent did not see it started (it was started before the agent), so it cannot restart it"
        if not self.committed:
            return ("it has no committed batch yet (its first batch is still running): a stop now leaves a "
                    "checkpoint Spark may refuse to start from; ask again once its first batch is done")
        lossy = self.not_replayable()
        if lossy and not allow_lossy_restart:
            named = "; ".join(f"{source}: {why}" for source, why in lossy)
            return (f"a restart would lose input ({named}); executor scaling still applies. Read from a source "
                    "that replays (Kafka, files, the Redis streams source), or set apps[].allow_lossy_restart: "
                    "true to accept the loss")
        return None

    def why_not_migratable(self, allow_lossy_restart: bool = False) -> str | None:
        """Why its state partitions cannot be migrated (stop, repartition, restart), or None."""
        problem = self.why_not_restartable(allow_lossy_restart)
        if problem is not None:
            return problem
        if self.state_store_provider and not self.state_store_provider.endswith(ROCKSDB_PROVIDER_CLASS):
            return (f"its state store is {self.state_store_provider.rsplit('.', 1)[-1]}: Spark's offline state "
                    f"repartition needs {ROCKSDB_PROVIDER_CLASS} (set spark.sql.streaming.stateStore.providerClass "
                    "before the query's first start)")
        return None

    def why_not_app_restartable(self, allow_lossy_restart: bool = False) -> str | None:
        """Why a restart of the whole application (a new executor shape) would harm this query."""
        if self.session_checkpoint:
            return ("it has no name and its checkpoint is a random directory under "
                    "spark.sql.streaming.checkpointLocation: a new driver would start it afresh in another "
                    "one, without its state. Name the query (.queryName('...')) or give it "
                    "option('checkpointLocation', ...)")
        return self.why_not_restartable(allow_lossy_restart)

    @classmethod
    def __get_pydantic_core_schema__(cls, source: object, handler: GetCoreSchemaHandler) -> CoreSchema:
        return reshaped(handler, source, lambda v: without_nulls(object_at(v, ""), ("sources", "source_descriptions")))

    def to_json(self) -> str:
        return QUERY_INFO_JSON.dumps(self)

    @classmethod
    def from_json(cls, text: str | bytes) -> QueryInfo:
        """Keys of a newer agent are ignored; raises a FieldError (a ValueError) naming the field."""
        return QUERY_INFO_JSON.loads(text)


SOURCE_REPORT_JSON: Codec[SourceReport] = Codec(SourceReport, label="source report")
QUERY_INFO_JSON: Codec[QueryInfo] = Codec(QueryInfo, label="query info")

