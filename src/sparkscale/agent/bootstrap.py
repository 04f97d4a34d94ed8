"""The bootstrap of a managed pipeline's driver (the program `sparkscale pipeline submit` hands to
spark-submit): builds the app's queries, starts the control agent beside them, and runs until the
queries end (and none is held by the agent for a migration) or the process is told to stop."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import Any

import structlog

from sparkscale.config import ConfigError, load_config
from sparkscale.logsetup import configure_logging

log = structlog.get_logger("sparkscale.agent.bootstrap")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sparkscale-driver")
    parser.add_argument("--app", required=True)
    parser.add_argument("--config", default=None)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args(argv)
    try:
        cfg = load_config(args.config, args.overrides).with_app(args.app)
        app = cfg.app(args.app)
    except (ConfigError, KeyError) as exc:
        print(f"invalid config:\n{exc}", file=sys.stderr)
        return 2
    configure_logging(cfg.logging.model_copy(update={"stderr_format": "json", "file": None}))

    from pyspark.sql import SparkSession

    from sparkscale.agent import SHUFFLE_PARTITIONS_CONF, ControlAgent
    from sparkscale.pipeline.submit import checkpoint_root, started_marker
    from sparkscale.pipeline.workloads import PipelineContext, build_workload, workload
    from sparkscale.protocol.streams import stored_partitions

    spark = SparkSession.builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    # Under Spark's dynamic allocation Spark owns the executor target: the agent must not set it.
    initial = None if app.dynamic_allocation.enabled else app.initial_executors
    agent = ControlAgent(spark, cfg, app, initial_executors=initial)
    # A migration changed the query's state partitions: its checkpoint has the new count, and the
    # workload (dag's repartitions between stages) must use it too, also after a driver restart.
    migrated = stored_partitions(agent.redis, cfg.redis.key_prefix, app.name, workload(app.pipeline).query)
    if migrated is not None and migrated != app.shuffle_partitions:
        log.info("driver.migrated_partitions", app=app.name, configured=app.shuffle_partitions, partitions=migrated)
        app = app.model_copy(update={"shuffle_partitions": migrated})
    spark.conf.set(SHUFFLE_PARTITIONS_CONF, str(app.shuffle_partitions))
    root = checkpoint_root(cfg, app)

    def start_queries(partitions: int) -> list[Any]:
        with_partitions = app.model_copy(update={"shuffle_partitions": partitions})
        return build_workload(PipelineContext(spark=spark, cfg=cfg, app=with_partitions, checkpoint_root=root))

    agent.query_starter = start_queries  # start_query (after a migration) builds the queries again
    agent.start()
    stopping = threading.Event()

    def _on_signal(signum: int, _frame: object) -> None:
        log.info("driver.signal", app=app.name, signal=signal.Signals(signum).name)
        stopping.set()
        for query in spark.streams.active:
            query.stop()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)

    queries = start_queries(app.shuffle_partitions)
    log.info("driver.queries_started", app=app.name, queries=[q.name for q in queries],
             app_id=spark.sparkContext.applicationId)
    marker = started_marker(cfg, app.name)
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(spark.sparkContext.applicationId)
    code = 0
    try:
        # Runs until every query stopped (by the agent, a signal, or a failure) and none is held
        # by the agent: a held query is being migrated and will be started again.
        while (spark.streams.active or agent.held) and not stopping.is_set():
            spark.streams.awaitAnyTermination(timeout=5)
            spark.streams.resetTerminated()
    except Exception as exc:  # noqa: BLE001 - a failed query ends the driver with its reason logged
        log.error("driver.query_failed", app=app.name, error=str(exc))
        code = 1
    finally:
        marker.unlink(missing_ok=True)
        agent.stop()
        spark.stop()
    log.info("driver.exit", app=app.name, code=code)
    return code


if __name__ == "__main__":
    sys.exit(main())
