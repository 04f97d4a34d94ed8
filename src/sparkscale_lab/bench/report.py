"""`sparkscale report DIR`: tables and plots from a benchmark's saved `results.json`, so that figures
can be re-rendered (or restyled) without re-running anything.

A scaling benchmark's DIR gets `results.md` (per case: the controllers compared, the median over
repeats with the range, each controller's scaling actions against ds2-baseline's where it ran, the
executors lost to an out-of-memory where a memory case counted them, then DS2's targets, met or
missed and by how much) and
`timeline-<case>-<controller>-<repeat>.png` per run plus `executors-<case>.png` (older single-case
results: without the case); a migration benchmark's DIR gets `results.md` and
`timeline-<strategy>.png`; a chaos run's DIR `results.md` and `timeline-<fault>.png`; a placement
run's DIR `results.md` and `workers.png`.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sparkscale_lab.bench.markdown import markdown_table
from sparkscale_lab.bench.scaling_controllers import BASELINE_CONTROLLER
from sparkscale_lab.bench.scaling_results import case_calibration, case_runs, scaling_cases
from sparkscale_lab.pipelines.profiles import parse_profile


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
        from sparkscale_lab.bench.migration import render_migration

        return render_migration(results_dir, results)
    if kind == "chaos":
        from sparkscale_lab.bench.chaos_report import render_chaos

        return render_chaos(results_dir, results)
    if kind == "placement":
        from sparkscale_lab.bench.placement_report import render_placement

        return render_placement(results_dir, results)
    results = remeasure_legacy(results)
    table = scaling_table(results)
    (results_dir / "results.md").write_text(f"{table}\n\nCommand: `{results['command']}`\n")
    from sparkscale_lab.bench.plots import plot_scaling

    plot_scaling(results_dir, results)
    return table


def _median(values: Sequence[float | int | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _cell(values: Sequence[float | int | None], digits: int = 1, unknown: str = "never") -> str:
    """Median over the repeats, with the range when they differ; '-' without runs. A run where the
    figure is unknown (e.g. never converged, no latency sampled) is counted as `n/k <unknown>`."""
    known = [v for v in values if v is not None]
    if not known:
        return unknown if values else "-"
    med = round(statistics.median(known), digits)
    text = f"{med:g}"
    if min(known) != max(known):
        text += f" ({round(min(known), digits):g}–{round(max(known), digits):g})"
    missing = len(values) - len(known)
    if missing:
        text += f", {missing}/{len(values)} {unknown}"
    return text


# -- results.json written before the matrix had one case (spec.workload, spec.profile) --------------


def remeasure_legacy(results: dict[str, Any]) -> dict[str, Any]:
    """An older single-case results.json with every run's measures computed again from its samples
    and actions under the current definitions (a shipped pipeline: counted backlog, 1 s trigger, no
    latency sampled then); newer results as they are."""
    if results.get("cases") or not results.get("runs"):
        return results
    from sparkscale_lab.bench.measures import ScalingAction, SloLimits, measure, needed_from_calibration, segments
    from sparkscale_lab.bench.timeline import Sample

    spec = results["spec"]
    profile = parse_profile(spec["profile"])
    limits = SloLimits(batch_limit_ms=1000.0, backlog_s=spec.get("slo_backlog_s", 10.0))
    needed = needed_from_calibration({float(r): n for r, n in results.get("calibration", {}).items()})
    runs = []
    for run in results["runs"]:
        samples = [Sample.from_dict(x) for x in run["samples"]]
        actions = [ScalingAction(**a) for a in run["actions"]]
        m = measure(samples, actions, segments(profile), limits, needed, load_at=profile.rate_at)
        runs.append({**run, "measures": m.to_dict()})
    return {**results, "runs": runs, "remeasured": True}


def targets_block(results: dict[str, Any]) -> list[dict[str, Any]]:
    """results.json `targets`: per case, DS2's targets judged on its runs (bench.targets)."""
    from sparkscale_lab.bench.measures import is_piecewise_constant, segments
    from sparkscale_lab.bench.targets import TARGET_CONTROLLER, evaluate_targets, summary

    out = []
    for case in scaling_cases(results):
        profile = parse_profile(case["profile"])
        checks = evaluate_targets(case_runs(results, case), segments(profile), is_piecewise_constant(profile),
                                  judges_out_of_memory=bool(case.get("judges_out_of_memory")))
        out.append({"case": case["name"], "workload": case["workload"], "profile": case["profile"],
                    "controller": TARGET_CONTROLLER, "summary": summary(checks),
                    "checks": [c.to_dict() for c in checks]})
    return out


def _m(runs: Sequence[dict[str, Any]], key: str, index: int | None = None) -> list[Any]:
    values = [r["measures"].get(key) for r in runs]
    if index is None:
        return values
    return [v[index] if v is not None and len(v) > index else None for v in values]


def actions_ratio(runs: Sequence[dict[str, Any]], baseline: Sequence[dict[str, Any]]) -> str:
    """Median scaling actions of `runs` over the baseline's, as `0.5x`; n/a when either is unknown
    or the baseline took none."""
    ours, theirs = _median(_m(runs, "scaling_actions")), _median(_m(baseline, "scaling_actions"))
    if ours is None or not theirs:
        return "n/a"
    return f"{round(ours / theirs, 2):g}x"


def oom_cell(runs: Sequence[dict[str, Any]]) -> str:
    """Executors lost to an out-of-memory, summed over the runs that counted them (n/a: none did)."""
    known = [r["executors_lost_oom"] for r in runs if r.get("executors_lost_oom") is not None]
    return str(sum(known)) if known else "n/a"


def case_table(results: dict[str, Any], case: dict[str, Any]) -> str:
    """One row per controller: the median of each figure over its runs (range in brackets). Where
    ds2-baseline ran, its scaling actions are each row's yardstick; where a run counted executors
    lost to an out-of-memory (a memory case), their sum is a column."""
    from sparkscale_lab.bench.measures import segments

    segs = segments(parse_profile(case["profile"]))
    all_runs = case_runs(results, case)
    baseline = [r for r in all_runs if r["controller"] == BASELINE_CONTROLLER]
    counted_oom = any(r.get("executors_lost_oom") is not None for r in all_runs)
    change_cols = [f"converge after {seg.rate:g}/s @{seg.start_s:g}s (s)" for seg in segs[1:]]
    header = ["controller", "runs", "backlog SLO (s)", "latency SLO (s)", "scaling actions",
              *([f"scaling actions vs {BASELINE_CONTROLLER}"] if baseline else []), *change_cols,
              "peak backlog (s of input)", "peak latency (s)", "executor-core-s", "over-provisioning (x)",
              "under-provisioned (s)", "direction changes", "at steady load", "batch over trigger (s)",
              *(["executors lost to OOM"] if counted_oom else []), "lost", "duplicated"]
    rows = []
    for controller in results["spec"]["controllers"]:
        runs = [r for r in all_runs if r["controller"] == controller]
        if not runs:
            continue
        latency_ms = _m(runs, "peak_latency_ms")
        rows.append([
            controller, str(len(runs)), _cell(_m(runs, "slo_backlog_s"), unknown="n/a"),
            _cell(_m(runs, "slo_latency_s"), unknown="n/a"), _cell(_m(runs, "scaling_actions"), 0),
            *([actions_ratio(runs, baseline)] if baseline else []),
            *[_cell(_m(runs, "convergence_s", i)) for i in range(1, len(segs))],
            _cell(_m(runs, "peak_backlog_s"), unknown="n/a"),
            _cell([None if v is None else v / 1000 for v in latency_ms], unknown="n/a"),
            _cell(_m(runs, "executor_core_s"), 0), _cell(_m(runs, "over_provisioning"), 2, unknown="n/a"),
            _cell(_m(runs, "under_provisioned_s"), unknown="n/a"), _cell(_m(runs, "direction_changes"), 0),
            _cell(_m(runs, "steady_reversals"), 0, unknown="n/a"),
            _cell([r["measures"].get("batch_over_trigger_s", r["measures"].get("slo_batch_s")) for r in runs],
                  unknown="n/a"),
            *([oom_cell(runs)] if counted_oom else []),
            str(sum(r["lost"] for r in runs)), str(sum(r["duplicated"] for r in runs)),
        ])
    return markdown_table(header, rows)


def targets_table(block: dict[str, Any]) -> str:
    met = {True: "yes", False: "**no**", None: "not judged"}
    lines = ["| target | measured | met | missed by |", "|---|---|---|---|"]
    lines += [f"| {c['target']} | {c['measured']} | {met[c['met']]} | {c['missed_by'] or '-'} |"
              for c in block["checks"]]
    return "\n".join(lines)


def case_notes(results: dict[str, Any], case: dict[str, Any]) -> list[str]:
    spec = results["spec"]
    calibration = ", ".join(f"{rate}/s: {n if n is not None else 'none'}"
                            for rate, n in case_calibration(results, case).items())
    basis = ("stated by the app's progress reports (the agent's estimate, what the daemon sizes from; counted "
             "before the first report)" if case.get("backlog_basis") == "stated"
             else "counted (records arrived minus records the query finished)")
    latency = case.get("latency_source")
    notes = [
        f"Workload `{case['workload']}`, profile `{case['profile']}`, seed {spec['seed']}, executors "
        f"{spec['min_executors']}–{spec['max_executors']}; calibrated need (executors keeping up): "
        f"{calibration or 'not measured'}. Median over runs (range); lost and duplicated summed over runs.",
        f"Backlog SLO (the headline): seconds with more than {spec.get('slo_backlog_s', 10):g} s of input "
        f"waiting: backlog / input rate (records arrived over the last 10 s; the profile's rate before that or "
        f"when nothing arrived), and at least {spec.get('slo_backlog_floor_records', 50)} records. The backlog "
        f"is {basis}.",
        (f"Latency SLO: seconds with an end-to-end latency above {spec.get('slo_latency_s', 10):g} s: {latency}; "
         "n/a where no latency was sampled." if latency else
         "Latency SLO: not sampled in these results (n/a)."),
        "Batch over trigger: seconds whose last batch outlasted the trigger interval, a diagnostic only (a "
        "multi-stage batch outlasts its trigger even when the query keeps up). Convergence: seconds from the "
        "load change until the executor count stays put and the backlog within the SLO to the step's end; "
        "at steady load: direction reversals between two actions of the same step.",
    ]
    runs = case_runs(results, case)
    if any(r["controller"] == BASELINE_CONTROLLER for r in runs):
        notes.append("Scaling actions vs ds2-baseline: the row's median scaling actions over those of ds2-baseline, "
                     "DS2 with every stability setting at its value before issue 33 (no utilisation band, no "
                     "start-up grace, no draining, direction, ineffective-scale-up, idle-executor or memory "
                     "guard), run in the same benchmark; ds2 is the product's defaults plus the guards the "
                     "benchmark chooses "
                     "(bench.scaling_controllers).")
    if any(r.get("executors_lost_oom") is not None for r in runs):
        notes.append("Executors lost to OOM: executors the driver's /allexecutors lists as removed for an "
                     "out-of-memory (removeReason: exit code 52, Spark's OOM exit, or an OutOfMemoryError), summed "
                     "over runs; n/a where the driver did not answer.")
    if results.get("remeasured"):
        notes.append("Older results: every run's measures were computed again from its saved samples and actions "
                     "with these definitions (`sparkscale report`), not as that run's results.json had them.")
    for r in case_runs(results, case):
        for note in r.get("notes", []):
            notes.append(f"{r['controller']} run {r['repeat']}: {note}")
    for r in results.get("failed_runs", []):
        if r.get("case") == case["name"]:
            notes.append(f"{r['controller']} run {r['repeat']} FAILED: {r['error']}")
    return notes


def scaling_table(results: dict[str, Any]) -> str:
    """Per case: the controllers' table, DS2's targets and the notes (one case without a heading
    for older results)."""
    blocks = {b["case"]: b for b in targets_block(results)}
    parts = []
    for case in scaling_cases(results):
        heading = f"## {case['name']}: `{case['workload']}` under `{case['profile']}`\n\n" if case["name"] else ""
        block = blocks[case["name"]]
        parts.append(f"{heading}{case_table(results, case)}\n\n"
                     f"Targets for {block['controller']} (median of its runs; {block['summary']}):\n\n"
                     f"{targets_table(block)}\n\n" + "\n".join(f"- {n}" for n in case_notes(results, case)))
    return "\n\n".join(parts)
