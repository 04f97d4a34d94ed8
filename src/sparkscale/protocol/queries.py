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
- `file_listing`: the file source reports none (its `latestOffset` is null): files in the source
  directory that the query's checkpoint has not logged (`sources/<n>`), times the rows per file seen
  in the query's recent batches;
- `unknown`: no signal; the monitor then sizes from rates and batch timing and says so.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

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
    start_offset: Any = None
    end_offset: Any = None
    latest_offset: Any = None
    metrics: dict[str, str] = field(default_factory=dict)
    backlog_records: int | None = None  # None: unknown
    backlog_files: int | None = None  # file source only
    backlog_estimate: str = "unknown"
    backlog_detail: str = ""
    position_records: int | None = None  # records ever arrived, where a source can tell (arrival rate)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SourceReport:
        known = {f for f in cls.__dataclass_fields__}
        clean = {k: v for k, v in data.items() if k in known}
        clean.setdefault("description", "")
        clean.setdefault("kind", "other")
        return cls(**clean)


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

    @property
    def migratable(self) -> bool:
        """A stateful migration (stop, repartition, restart) can be carried out on it."""
        return self.why_not_migratable() is None

    def why_not_migratable(self) -> str | None:
        if self.checkpoint is None or self.temporary_checkpoint:
            return ("it has no checkpoint location (set option('checkpointLocation', ...) or "
                    "spark.sql.streaming.checkpointLocation): its state would not survive a restart")
        if not self.restartable:
            return "the agent did not see it started (it was started before the agent), so it cannot restart it"
        if self.state_store_provider and not self.state_store_provider.endswith(ROCKSDB_PROVIDER_CLASS):
            return (f"its state store is {self.state_store_provider.rsplit('.', 1)[-1]}: Spark's offline state "
                    f"repartition needs {ROCKSDB_PROVIDER_CLASS} (set spark.sql.streaming.stateStore.providerClass "
                    "before the query's first start)")
        return None

    def to_json(self) -> str:
        data = asdict(self)
        data["sources"] = list(self.sources)
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str | bytes) -> QueryInfo:
        data = json.loads(text)
        known = {f for f in cls.__dataclass_fields__}
        clean = {k: v for k, v in data.items() if k in known}
        clean["sources"] = tuple(clean.get("sources") or ())
        return cls(**clean)


def read_queries(client: Any, prefix: str, app: str) -> dict[str, QueryInfo]:
    """The app's queries by name, as the agent last published them (empty before the agent ran)."""
    out: dict[str, QueryInfo] = {}
    for name, value in (client.hgetall(queries_key(prefix, app)) or {}).items():
        key = name.decode() if isinstance(name, bytes) else str(name)
        try:
            out[key] = QueryInfo.from_json(value)
        except (ValueError, TypeError):
            continue
    return out
