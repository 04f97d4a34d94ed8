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
    # "process": `pipeline submit` starts `sparkscale pipeline run APP` in a session of its own (the
    # embedded environment, or any host without systemd); "systemd": it starts the unit below
    # (systemd/sparkscale-app@.service), so the driver lives in its own cgroup, not the daemon's.
    supervisor: Literal["process", "systemd"] = "process"
    systemd_unit: str = "sparkscale-app@{app}.service"
    # After a crash: wait restart_delay_s, doubling up to max_restart_delay_s; more than
    # max_restarts crashes within restart_window_s and the supervisor gives up (exit 1).
    restart_delay_s: float = Field(2.0, gt=0)
    max_restart_delay_s: float = Field(60.0, gt=0)
    max_restarts: int = Field(5, ge=0)
    restart_window_s: float = Field(600.0, gt=0)

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
