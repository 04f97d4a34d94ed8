"""The Spark standalone master's JSON endpoint: which applications run, and with how many cores.
`get_json` also reads a worker's `/json/` (monitors/cluster_view.py)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any


class SparkUnreachable(Exception):
    """The master did not answer (connection refused, timeout, bad JSON)."""


@dataclass(frozen=True)
class MasterApp:
    app_id: str
    name: str
    state: str
    cores: int


@dataclass(frozen=True)
class MasterView:
    alive_workers: int
    cores_total: int
    cores_used: int
    active_apps: list[MasterApp]

    def app_named(self, name: str) -> MasterApp | None:
        """The running application with this name (the newest if several share it)."""
        matches = [a for a in self.active_apps if a.name == name]
        return max(matches, key=lambda a: a.app_id) if matches else None


def get_json(url: str, timeout_s: float) -> Any:
    """The JSON a standalone daemon's web UI serves at `url`; SparkUnreachable if it does not answer."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            return json.load(resp)
    except (OSError, ValueError) as exc:
        raise SparkUnreachable(f"{url} did not answer: {exc}") from exc


class SparkMasterClient:
    def __init__(self, web_url: str, timeout_s: float):
        self.web_url = web_url.rstrip("/")
        self.timeout_s = timeout_s

    def view(self) -> MasterView:
        data = get_json(f"{self.web_url}/json/", self.timeout_s)
        apps = [
            MasterApp(app_id=a["id"], name=a["name"], state=a.get("state", ""), cores=int(a.get("cores", 0)))
            for a in data.get("activeapps", [])
        ]
        return MasterView(
            alive_workers=int(data.get("aliveworkers", 0)),
            cores_total=int(data.get("cores", 0)),
            cores_used=int(data.get("coresused", 0)),
            active_apps=apps,
        )
