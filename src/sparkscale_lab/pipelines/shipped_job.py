"""A shipped pipeline as an ordinary PySpark script: `shipped_job.py --app A [--config C] [--set k=v]`.

The driver runs it exactly as it runs an operator's own script (agent/bootstrap.py): the agent is
started first and knows each query by the writer that started it, so nothing here is special to
sparkscale's management. It builds the app's workload (`apps[].pipeline`) and waits like any job.
"""

from __future__ import annotations

import argparse

from pyspark.sql import SparkSession

from sparkscale.apps.submit import checkpoint_root
from sparkscale.config import load_config
from sparkscale_lab.pipelines.workloads import PipelineContext, build_workload


def main() -> None:
    parser = argparse.ArgumentParser(prog="shipped_job")
    parser.add_argument("--app", required=True)
    parser.add_argument("--config", default=None)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    cfg = load_config(args.config, args.overrides).with_app(args.app)
    app = cfg.app(args.app)
    spark = SparkSession.builder.getOrCreate()
    build_workload(PipelineContext(spark=spark, cfg=cfg, app=app, checkpoint_root=checkpoint_root(cfg, app)))
    spark.streams.awaitAnyTermination()


if __name__ == "__main__":
    main()
