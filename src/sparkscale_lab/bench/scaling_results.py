"""A scaling benchmark's results.json, case by case: read by the report's tables (report.py) and
its plots (plots.py) alike."""

from __future__ import annotations

from typing import Any

# -- cases: results.json written before the matrix had one case (spec.workload, spec.profile) ------


def scaling_cases(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The cases of a scaling benchmark; an older single-case results.json as one unnamed case."""
    if results.get("cases"):
        return list(results["cases"])
    spec = results["spec"]
    return [{"name": "", "workload": spec["workload"], "profile": spec["profile"], "backlog_basis": "counted",
             "latency_source": None, "trigger_s": None}]


def case_runs(results: dict[str, Any], case: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in results.get("runs", []) if r.get("case", "") == case["name"]]


def case_calibration(results: dict[str, Any], case: dict[str, Any]) -> dict[str, Any]:
    calibration = results.get("calibration", {})
    return calibration.get(case["workload"], {}) if results.get("cases") else calibration
