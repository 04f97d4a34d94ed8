"""`sparkscale report DIR`: tables and plots from a benchmark's saved `results.json`, so that figures
can be re-rendered (or restyled) without re-running anything.

A scaling benchmark's DIR gets `results.md` (controllers compared: the median over repeats, with the
range) and `timeline-<controller>-<repeat>.png` per run plus `executors.png`; a migration
benchmark's DIR gets `results.md` and `timeline-<strategy>.png`.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sparkscale.pipeline.profiles import parse_profile


class ReportError(Exception):
    """The directory holds no readable results."""


def load_results(results_dir: Path) -> dict[str, Any]:
    path = results_dir / "results.json"
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ReportError(f"{path} does not exist") from None
    except ValueError as exc:
        raise ReportError(f"{path} is not JSON: {exc}") from None


def render(results_dir: Path) -> str:
    """Write the tables and plots for the results in `results_dir`; return the markdown table."""
    results = load_results(results_dir)
    kind = results.get("kind", "scaling")
    if kind == "migration":
        from sparkscale.bench.migration import render_migration

        return render_migration(results_dir, results)
    table = scaling_table(results)
    (results_dir / "results.md").write_text(f"{table}\n\nCommand: `{results['command']}`\n")
    from sparkscale.bench.plots import plot_scaling

    plot_scaling(results_dir, results)
    return table


def _median(values: Sequence[float | int | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _cell(values: Sequence[float | int | None], digits: int = 1) -> str:
    """Median over the repeats, with the range when they differ; '-' for never / unknown. A run
    where the figure is unknown (e.g. never converged) is counted as `n/k never`."""
    known = [v for v in values if v is not None]
    if not known:
        return "never" if values else "-"
    med = round(statistics.median(known), digits)
    text = f"{med:g}"
    if min(known) != max(known):
        text += f" ({round(min(known), digits):g}–{round(max(known), digits):g})"
    missing = len(values) - len(known)
    if missing:
        text += f", {missing}/{len(values)} never"
    return text


def scaling_table(results: dict[str, Any]) -> str:
    """One row per controller: the median of each figure over its runs (range in brackets)."""
    spec = results["spec"]
    profile = parse_profile(spec["profile"])
    from sparkscale.bench.measures import segments

    segs = segments(profile)
    change_cols = [f"converge after {seg.rate:g}/s @{seg.start_s:g}s (s)" for seg in segs[1:]]
    header = ["controller", "runs", "scaling actions", *change_cols, "SLO violation (s)", "of which backlog (s)",
              "peak backlog", "executor-core-s", "over-provisioning (x)", "under-provisioned (s)", "direction changes",
              "lost", "duplicated"]
    rows = []
    for controller in spec["controllers"]:
        runs = [r for r in results["runs"] if r["controller"] == controller]
        if not runs:
            continue
        m = [r["measures"] for r in runs]
        rows.append([
            controller, str(len(runs)), _cell([x["scaling_actions"] for x in m], 0),
            *[_cell([x["convergence_s"][i] for x in m]) for i in range(1, len(segs))],
            _cell([x["slo_violation_s"] for x in m]), _cell([x["slo_backlog_s"] for x in m]),
            _cell([x["peak_backlog_records"] for x in m], 0),
            _cell([x["executor_core_s"] for x in m], 0), _cell([x["over_provisioning"] for x in m], 2),
            _cell([x["under_provisioned_s"] for x in m]), _cell([x["direction_changes"] for x in m], 0),
            str(sum(r["lost"] for r in runs)), str(sum(r["duplicated"] for r in runs)),
        ])
    calibration = ", ".join(f"{rate}/s: {n if n is not None else 'none'}"
                            for rate, n in results.get("calibration", {}).items())
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
             *["| " + " | ".join(row) + " |" for row in rows]]
    notes = [f"Workload `{spec['workload']}`, profile `{spec['profile']}`, seed {spec['seed']}, executors "
             f"{spec['min_executors']}–{spec['max_executors']}; calibrated need (executors keeping up): "
             f"{calibration or 'not measured'}. Median over runs (range); lost and duplicated summed over runs. "
             f"SLO violation: seconds with the last batch longer than the trigger interval or a backlog above "
             f"{spec.get('slo_backlog_s', 10):g} s of input; convergence: seconds from the load change until the "
             "executor count stays put and the backlog within that limit to the step's end."]
    for r in results["runs"]:
        for note in r.get("notes", []):
            notes.append(f"{r['controller']} run {r['repeat']}: {note}")
    return "\n".join(lines) + "\n\n" + "\n".join(notes)
