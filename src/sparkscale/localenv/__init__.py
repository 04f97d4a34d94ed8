"""The embedded local environment (`sparkscale cluster up|down|status`)."""

from sparkscale.localenv.environment import EnvironmentStartError, LocalEnvironment, ServiceStatus
from sparkscale.localenv.preflight import PreflightError, Tools, check_tools

__all__ = ["EnvironmentStartError", "LocalEnvironment", "PreflightError", "ServiceStatus", "Tools", "check_tools"]
