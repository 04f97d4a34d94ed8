"""Every Redis key name sparkscale uses, in one place (docs/internals.md, "Redis").

`prefix` is `redis.key_prefix` from the config (default `sparkscale:`), `app` the managed
application's name. The daemon, the in-driver agent, the sources and sinks, the load generator and
the verifier all build their key names here, so that a key is spelled once.
"""

from __future__ import annotations

# -- per application: input, source bookkeeping, output ---------------------------------------------


def input_stream_key(prefix: str, app: str, partition: int) -> str:
    """Input partition `partition` of the app (a stream; never trimmed while a verifier may run)."""
    return f"{prefix}{app}:in:{partition}"


def input_stream_prefix(prefix: str, app: str) -> str:
    """What every input stream key of the app starts with (followed by the partition number)."""
    return f"{prefix}{app}:in:"


def paused_key(prefix: str, app: str) -> str:
    """Present = the app's sources admit nothing new."""
    return f"{prefix}{app}:paused"


def source_status_key(prefix: str, app: str, query: str) -> str:
    """The Redis streams source's bookkeeping hash for one query (offsets, backlog)."""
    return f"{prefix}{app}:source:{query}"


def output_base(prefix: str, app: str, query: str) -> str:
    """The namespace of a query's sink keys (`:log`, `:kv`, `:meta`, `:stage:*`)."""
    return f"{prefix}{app}:out:{query}"


def loadgen_runs_key(prefix: str, app: str) -> str:
    """Hash run_id -> JSON run record (status, counts, uid format) of the load generator, for verifiers."""
    return f"{prefix}{app}:loadgen:runs"


def driver_key(prefix: str, app: str) -> str:
    """Where the app's driver is (JSON: app_id, ui_url = its REST API, driver_host, pid), as its
    agent registered it; the daemon reads the REST URL here (no port fixed in advance)."""
    return f"{prefix}{app}:driver"


def executor_target_key(prefix: str, app: str) -> str:
    """The executor count the app's agent last asked Spark for (a string int; absent: unknown). More
    than the executors registered: some are still starting, which the planner counts."""
    return f"{prefix}{app}:executors:target"


# -- per query: what the agent publishes ------------------------------------------------------------


def progress_key(prefix: str, app: str, query: str) -> str:
    """The query's last progress report (a hash, `progress_fields`)."""
    return f"{prefix}{app}:progress:{query}"


def progress_history_key(prefix: str, app: str, query: str) -> str:
    """The query's progress reports over time (a stream, capped), with its idle samples (`idle=1`)."""
    return f"{progress_key(prefix, app, query)}:history"


def partitions_key(prefix: str, app: str, query: str) -> str:
    """The query's state partitions after its last repartition (a string int)."""
    return f"{prefix}{app}:partitions:{query}"


# -- per application: what the head side keeps -----------------------------------------------------


def shape_key(prefix: str, app: str) -> str:
    """The executor shape a migration gave the app (a hash)."""
    return f"{prefix}{app}:shape"


def status_key(prefix: str, app: str) -> str:
    """Every daemon's view of the app (a hash: daemon identity -> JSON), for `sparkscale status`."""
    return f"{prefix}{app}:status"


def snapshots_key(prefix: str, app: str) -> str:
    """The snapshots behind the leader's decisions with actions (a stream)."""
    return f"{prefix}{app}:snapshots"


def datastore_key(prefix: str, app: str, migration_id: str) -> str:
    """The Redis DataStore of a CCR migration: what was captured (JSON, expires)."""
    return f"{prefix}{app}:migration:{migration_id}:captured"


# -- global -----------------------------------------------------------------------------------------


def actions_key(prefix: str) -> str:
    """The action log (a stream of decisions, results and outcomes of every app)."""
    return f"{prefix}actions"


def blocklist_key(prefix: str) -> str:
    """Blocked (app, diagnosis, action type) entries with their expiry (a hash)."""
    return f"{prefix}blocklist"


def downtime_samples_key(prefix: str, kind: str) -> str:
    """The cluster's measured stalls of one kind of action (a list, newest first, trimmed):
    `daemon/downtime_tracker.py`, EDRP's downtime model."""
    return f"{prefix}downtime:{kind}"
