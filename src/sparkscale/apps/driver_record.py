"""The driver a supervisor runs now (its spark-submit process), recorded by pid and start time so
that `pipeline stop` and `running` find exactly it (a recycled pid is never taken for it)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from sparkscale.apps.run_files import driver_record_path
from sparkscale.config import Config
from sparkscale.processes import live_process


@dataclass(frozen=True)
class DriverRecord:
    """The driver the supervisor runs now (its spark-submit process), for `running` and fault tests."""

    app: str
    pid: int
    create_time: float
    started_at: float
    restarts: int


def current_driver(cfg: Config, app_name: str) -> DriverRecord | None:
    """The app's driver process if it runs (whoever supervises it)."""
    try:
        record = DriverRecord(**json.loads(driver_record_path(cfg, app_name).read_text()))
    except (FileNotFoundError, ValueError, TypeError):
        return None
    return record if live_process(record.pid, record.create_time) is not None else None
