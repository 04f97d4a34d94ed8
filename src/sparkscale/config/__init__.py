"""The one config file: typed sections, defaults for the embedded environment, clear errors.

Every key has a default aimed at the embedded local environment (`sparkscale cluster up`), so a
file that names only what a user changes is valid (`sections`); `load_config` reads a file and
`--set` overrides and reports every problem with its file and key (`loading`).
"""

from sparkscale.config.loading import ConfigError, ConfigProblem, load_config
from sparkscale.config.sections import (
    ActionLogConfig,
    ActuatorConfig,
    AppConfig,
    ClusterConfig,
    Config,
    ConfigSection,
    DaemonConfig,
    DagConfig,
    DynamicAllocationConfig,
    GuardsConfig,
    LoggingConfig,
    LoopConfig,
    MetricsConfig,
    MigrationConfig,
    OutcomesConfig,
    PolicyConfig,
    RedisConfig,
    SparkConfig,
    TaxiConfig,
    ZooKeeperConfig,
)

__all__ = [
    "ActionLogConfig",
    "ActuatorConfig",
    "AppConfig",
    "ClusterConfig",
    "Config",
    "ConfigError",
    "ConfigProblem",
    "ConfigSection",
    "DaemonConfig",
    "DagConfig",
    "DynamicAllocationConfig",
    "GuardsConfig",
    "LoggingConfig",
    "LoopConfig",
    "MetricsConfig",
    "MigrationConfig",
    "OutcomesConfig",
    "PolicyConfig",
    "RedisConfig",
    "SparkConfig",
    "TaxiConfig",
    "ZooKeeperConfig",
    "load_config",
]
