"""The Grafana dashboard and the operator's metrics table name exactly the metrics the daemon serves
(daemon/metrics.py), so a renamed or new metric cannot leave them behind."""

from __future__ import annotations

import json
import re
from pathlib import Path

from sparkscale.daemon.metrics import DaemonMetrics

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "docs" / "grafana" / "sparkscale.json"
OPERATIONS = ROOT / "docs" / "operations.md"
# How prometheus_client exposes a family's samples, by type: what a query names.
EXPOSED_AS = {"counter": "_total", "histogram": "_bucket", "gauge": ""}
SAMPLE_SUFFIXES = ("_total", "_created", "_bucket", "_sum", "_count")


def served_families() -> dict[str, str]:
    """Family name -> type of every metric the daemon serves."""
    return {family.name: family.type for family in DaemonMetrics().registry.collect()}


def exposed_names() -> set[str]:
    return {name + EXPOSED_AS[kind] for name, kind in served_families().items()}


def dashboard_exprs() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]


def family_of(sample: str) -> str:
    for suffix in SAMPLE_SUFFIXES:
        if sample.endswith(suffix):
            return sample[: -len(suffix)]
    return sample


def test_every_served_metric_has_a_panel() -> None:
    exprs = "\n".join(dashboard_exprs())
    missing = sorted(name for name in exposed_names() if not re.search(rf"\b{name}\b", exprs))
    assert missing == [], f"no panel queries {missing}"


def test_every_metric_a_panel_queries_is_served() -> None:
    families = served_families()
    named = {m for expr in dashboard_exprs() for m in re.findall(r"\bsparkscale_\w+", expr)}
    unknown = sorted(m for m in named if family_of(m) not in families and m not in families)
    assert unknown == [], f"panels query metrics the daemon does not serve: {unknown}"


def test_every_served_metric_is_documented_for_operators() -> None:
    text = OPERATIONS.read_text(encoding="utf-8")
    # The table names a histogram by its family (its _bucket, _sum and _count go together).
    documented = {name + ("_total" if kind == "counter" else "") for name, kind in served_families().items()}
    missing = sorted(name for name in documented if f"`{name}`" not in text)
    assert missing == [], f"docs/operations.md does not describe {missing}"
