"""`sparkscale.attach(spark, app=...)`: put a driver started any way at all under management.

One call in the operator's code, before it starts its queries: installs the query hooks (so the
agent can restart each query as the code started it) and starts the control agent. The bootstrap
of `sparkscale pipeline submit` makes the same call before it runs the script.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import structlog
from pyspark.sql import SparkSession

from sparkscale.agent.hooks import HOOKS, install
from sparkscale.agent.loop import ControlAgent
from sparkscale.config import AppConfig, Config, load_config

log = structlog.get_logger(__name__)


def start_agent(spark: SparkSession, cfg: Config, app: AppConfig,
                on_first_query: Callable[[], None] | None = None) -> ControlAgent:
    hooks = install(HOOKS)
    hooks.on_first_start = on_first_query
    if hooks.started:
        log.warning("agent.attached_late", app=app.name, queries=sorted(hooks.started))
    # Under Spark's dynamic allocation Spark owns the executor target: the agent must not set it.
    initial = None if app.dynamic_allocation.enabled else app.initial_executors
    agent = ControlAgent(spark, cfg, app, initial_executors=initial, hooks=hooks)
    agent.start()
    return agent


def attach(spark: SparkSession, app: str, config: str | None = None,
           overrides: list[str] | None = None) -> ControlAgent:
    """Start the control agent of `app` (a name in the config) in this driver and return it.

    Call it before starting any query: queries started earlier are monitored but cannot be
    migrated (the agent never saw how they were started). `config` defaults as for the CLI: the
    file named by $SPARKSCALE_CONFIG, else the built-in defaults."""
    cfg = load_config(config or os.environ.get("SPARKSCALE_CONFIG"), overrides or []).with_app(app)
    return start_agent(spark, cfg, cfg.app(app))
