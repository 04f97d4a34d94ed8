"""The one config file: typed sections, defaults for the embedded environment, clear errors.

Every key has a default aimed at the embedded local environment (`sparkscale cluster up`), so a
file that names only what a user changes is valid (`sections`); `load_config` reads a file and
`--set` overrides and reports every problem with its file and key (`loading`, `problems`).
"""

from sparkscale.config.apps import AppConfig, AppMode, DagConfig, DynamicAllocationConfig, TaxiConfig
from sparkscale.config.base import ConfigSection
from sparkscale.config.connections import RedisConfig, SparkConfig, ZooKeeperConfig
from sparkscale.config.drivers import DriversConfig
from sparkscale.config.guards import GuardsConfig
from sparkscale.config.loading import load_config
from sparkscale.config.placement import PlacementConfig
from sparkscale.config.policy import PolicyConfig
from sparkscale.config.problems import ConfigError, ConfigProblem
from sparkscale.config.sections import (
    ActionLogConfig,
    ActuatorConfig,
    ClusterConfig,
    Config,
    DaemonConfig,
    LoggingConfig,
    LoopConfig,
    MetricsConfig,
    MigrationConfig,
    OutcomesConfig,
    QuotasConfig,
)

__all__ = [
    "ActionLogConfig",
    "ActuatorConfig",
    "AppConfig",
    "AppMode",
    "ClusterConfig",
    "Config",
    "ConfigError",
    "ConfigProblem",
    "ConfigSection",
    "DaemonConfig",
    "DagConfig",
    "DriversConfig",
    "DynamicAllocationConfig",
    "GuardsConfig",
    "LoggingConfig",
    "LoopConfig",
    "MetricsConfig",
    "MigrationConfig",
    "OutcomesConfig",
    "PlacementConfig",
    "PolicyConfig",
    "QuotasConfig",
    "RedisConfig",
    "SparkConfig",
    "TaxiConfig",
    "ZooKeeperConfig",
    "load_config",
]
