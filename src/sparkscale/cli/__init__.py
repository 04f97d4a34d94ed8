"""The `sparkscale` command line: the `main` group and the commands of each module registered on it.

One module per command group: daemon (run, check-config, status, actions, explain, blocklist,
scale-executors), cluster, pipeline (pipeline, loadgen, verify), migrate, offline (plan, snapshot,
simulate) and bench (bench, report, demo). Every command that reads config takes `--config` and `--set`.
"""

from __future__ import annotations

import click

from sparkscale.cli import bench, cluster, daemon, migrate, offline, pipeline, placement


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="sparkscale")
def main() -> None:
    """sparkscale: autoscaling for stateful Spark Structured Streaming pipelines."""


for _command in (
    daemon.check_config, daemon.run, daemon.status, daemon.actions, daemon.explain, daemon.blocklist,
    daemon.scale_executors,
    cluster.cluster,
    pipeline.pipeline, pipeline.loadgen, pipeline.verify,
    migrate.migrate_command,
    offline.plan_command, offline.snapshot_command, offline.simulate_command,
    placement.cluster_plan_command,
    bench.bench, bench.report_command, bench.demo,
):
    main.add_command(_command)
del _command
