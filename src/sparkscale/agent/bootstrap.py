"""The driver's main program under `sparkscale pipeline submit`: start the control agent, then run
the app's script as `__main__`, untouched.

spark-submit runs this file; it gets the managed session (the conf spark-submit passed), installs
the query hooks and starts the agent (`attach`), then runs the operator's script with runpy, so the
script's own `SparkSession.builder.getOrCreate()` returns that session and every query it starts
is known to the agent. An example pipeline (`apps[].pipeline`, a workload plug-in) names a script
too (`apps/workloads.py`) and takes exactly this path. Exit code: the script's (SystemExit), 1 if it
raised, 2 for a bad config.
"""

from __future__ import annotations

import argparse
import runpy
import signal
import sys
import traceback
from pathlib import Path

import structlog

from sparkscale.config import AppConfig, ConfigError, load_config
from sparkscale.config.identities import Role, identity_for, process_identity, set_process_identity
from sparkscale.config.secrets import check_secrets
from sparkscale.logsetup import configure_logging

log = structlog.get_logger("sparkscale.agent.bootstrap")

def app_script(app: AppConfig, config_path: str | None, overrides: list[str]) -> tuple[str, list[str]]:
    """What the driver runs for `app`: its own script and args, or its workload plug-in's script."""
    if app.script is not None:
        return app.script, list(app.args)
    from sparkscale.apps.workloads import workload

    assert app.pipeline is not None  # AppConfig gives one of script and pipeline
    args = ["--app", app.name]
    if config_path:
        args += ["--config", config_path]
    for item in overrides:
        args += ["--set", item]
    return workload(app.pipeline).script, args


def run_script(app: str, script: str, args: list[str]) -> int:
    """Run `script` as `__main__` with `args` as its argv; its exit code, or 1 if it raised."""
    saved = sys.argv
    sys.argv = [script, *args]
    script_dir = str(Path(script).parent)
    sys.path.insert(0, script_dir)  # as `python script.py` would: its neighbours import
    try:
        runpy.run_path(script, run_name="__main__")
        return 0
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except BaseException as exc:  # the user's error is reported, then the driver ends
        log.error("driver.script_failed", app=app, script=script, error=f"{type(exc).__name__}: {exc}",
                  traceback="".join(traceback.format_exception(exc)))
        return 1
    finally:
        sys.argv = saved
        if sys.path and sys.path[0] == script_dir:
            sys.path.pop(0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sparkscale-driver")
    parser.add_argument("--app", required=True)
    parser.add_argument("--config", default=None)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args(argv)
    try:
        cfg = load_config(args.config, args.overrides).with_app(args.app)
        app = cfg.app(args.app)
        # The agent's and the pipeline's Redis and ZooKeeper; with identities, the agent's own secret
        # ($SPARKSCALE_IDENTITY_FILE, given by `pipeline submit`), as which every client here connects.
        set_process_identity(identity_for(Role.AGENT, app.name))
        check_secrets(cfg, args.config or "<defaults>", process_identity())
        script, script_args = app_script(app, args.config, args.overrides)  # a workload plug-in that is not there
    except (ConfigError, KeyError, ValueError) as exc:
        print(f"invalid config:\n{exc}", file=sys.stderr)
        return 2
    configure_logging(cfg.logging.model_copy(update={"stderr_format": "json", "file": None}))

    from pyspark.sql import SparkSession

    from sparkscale.agent.attach import start_agent
    from sparkscale.apps.run_files import started_marker

    spark = SparkSession.builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    marker = started_marker(cfg, app.name)

    def on_first_query() -> None:
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(spark.sparkContext.applicationId)

    agent = start_agent(spark, cfg, app, on_first_query=on_first_query)

    def _on_signal(signum: int, _frame: object) -> None:
        log.info("driver.signal", app=app.name, signal=signal.Signals(signum).name)
        agent.hooks.shutdown()
        for query in spark.streams.active:
            query.stop()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    log.info("driver.script_starting", app=app.name, script=script, args=script_args,
             app_id=spark.sparkContext.applicationId)
    code = 1
    try:
        code = run_script(app.name, script, script_args)
        # A script that returned while a migration holds its query (it did not wait on it) keeps
        # the driver up until the query runs again and ends.
        while agent.held and not agent.hooks.stopping.is_set():
            agent.hooks.stopping.wait(1.0)
    finally:
        marker.unlink(missing_ok=True)
        agent.stop()
        spark.stop()
    log.info("driver.exit", app=app.name, code=code)
    return code


if __name__ == "__main__":
    sys.exit(main())
