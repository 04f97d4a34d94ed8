"""The `drivers` section: how managed drivers are kept running (apps/supervisor.py).

A driver must outlive the daemon that started it (a daemon restart must not take the pipelines
down) and come back from its checkpoints after a crash, so each runs under a supervisor of its own.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from sparkscale.config.base import ConfigSection


class DriversConfig(ConfigSection):
    """How each managed driver's supervisor is started, and when it gives up restarting."""

    # systemd: the driver lives in its own cgroup, not the daemon's (systemd/sparkscale-app@.service).
    supervisor: Literal["process", "systemd"] = Field("process", description=(
        "process: `pipeline submit` (and the daemon, for a whole-app restart) starts the supervisor "
        "(`sparkscale pipeline run APP`) in a session of its own; systemd: it starts systemd_unit instead, "
        "so the driver lives outside the daemon's cgroup (systemd/README.md)."))
    systemd_unit: str = Field("sparkscale-app@{app}.service", description=(
        "The systemd unit of an app's supervisor ({app} stands for the app's name), for supervisor: systemd."))
    restart_delay_s: float = Field(2.0, gt=0, description=(
        "After a crash, wait this many seconds before the restart, doubling each time up to max_restart_delay_s."))
    max_restart_delay_s: float = Field(60.0, gt=0, description="The longest wait before a restart, in seconds.")
    max_restarts: int = Field(5, ge=0, description=(
        "More crashes than this within restart_window_s and the supervisor gives up (exit 1). A driver "
        "whose first start fails before its queries run (a bad script) is not restarted."))
    restart_window_s: float = Field(600.0, gt=0, description="The window max_restarts counts crashes in, in seconds.")

    @field_validator("systemd_unit")
    @classmethod
    def _unit(cls, value: str) -> str:
        if "{app}" not in value or not re.fullmatch(r"[A-Za-z0-9:_.@{}\\-]+\.service", value):
            raise ValueError("expected a unit name with {app} ending in .service, e.g. sparkscale-app@{app}.service")
        return value

    @model_validator(mode="after")
    def _delays(self) -> DriversConfig:
        if self.max_restart_delay_s < self.restart_delay_s:
            raise ValueError("max_restart_delay_s must be at least restart_delay_s")
        return self

    def unit(self, app: str) -> str:
        return self.systemd_unit.replace("{app}", app)
