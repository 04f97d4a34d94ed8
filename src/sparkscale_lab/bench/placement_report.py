"""results.md of `sparkscale bench placement`: the runs side by side, how each figure is measured,
and `workers.png` (each worker's busy share and executors over time, a column per run); also what
`sparkscale report DIR` re-renders from results.json."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from sparkscale_lab.bench.markdown import markdown_table


def _num(value: Any, digits: int = 2) -> str:
    return "-" if value is None else f"{round(float(value), digits):g}"


def _mb(value: Any) -> str:
    return "-" if value is None else f"{float(value) / 1e6:.1f}"


def _shares(run: Mapping[str, Any]) -> str:
    return " / ".join(f"{h}: {_num(v)}" for h, v in sorted((run.get("worker_busy_share") or {}).items())) or "-"


def _terms(run: Mapping[str, Any]) -> str:
    t = run.get("objective_terms") or {}
    return f"{_num(t.get('response_term'), 3)} + {_num(t.get('cost_term'), 3)} + {_num(t.get('downtime_term'), 3)}"


# (row title, how a run's value is shown)
ROWS: list[tuple[str, Callable[[Mapping[str, Any]], str]]] = [
    ("worker load imbalance (max/mean of the mean busy shares)", lambda r: _num(r.get("worker_load_imbalance"))),
    ("… time-mean of each second's max/mean", lambda r: _num(r.get("worker_load_imbalance_per_sample"))),
    ("mean busy share per worker", _shares),
    ("remote shuffle read (MB)", lambda r: _mb(r.get("remote_shuffle_bytes"))),
    ("local shuffle read (MB)", lambda r: _mb(r.get("local_shuffle_bytes"))),
    ("remote share of shuffle read", lambda r: _num(r.get("remote_shuffle_share"), 3)),
    ("backlog SLO violated (s, summed over the apps)", lambda r: _num(r.get("slo_backlog_s"), 1)),
    ("downtime: stalled (s, summed) / longest stall (s)",
     lambda r: f"{_num(r.get('downtime_s'), 1)} / {_num(r.get('longest_stall_s'), 1)}"),
    ("mean executor cores held (all apps)", lambda r: _num(r.get("mean_executor_cores"))),
    ("R: worst app's mean end-to-end latency (s)", lambda r: _num((r.get("objective_terms") or {}).get("response_s"))),
    ("objective F (EDRP eq. 12, measured)", lambda r: _num(r.get("objective"), 3)),
    ("… = w_r R/R_max + w_c C/C_max + w_d T_D/T_D,max", _terms),
    ("moves / actions carried out", lambda r: f"{r.get('moves', '-')} / {r.get('actions', '-')}"),
    ("lost / duplicated", lambda r: f"{r.get('lost', '-')} / {r.get('duplicated', '-')}"),
]


# (row title, a run's number) for the medians over the repeats
MEDIAN_ROWS: list[tuple[str, Callable[[Mapping[str, Any]], Any], int]] = [
    ("worker load imbalance", lambda r: r.get("worker_load_imbalance"), 2),
    ("remote share of shuffle read", lambda r: r.get("remote_shuffle_share"), 3),
    ("backlog SLO violated (s)", lambda r: r.get("slo_backlog_s"), 1),
    ("longest stall T_D (s)", lambda r: r.get("longest_stall_s"), 1),
    ("mean executor cores held", lambda r: r.get("mean_executor_cores"), 2),
    ("R (s)", lambda r: (r.get("objective_terms") or {}).get("response_s"), 2),
    ("objective F (measured)", lambda r: r.get("objective"), 3),
    ("actions carried out", lambda r: r.get("actions"), 1),
]


def median_table(runs: Sequence[Mapping[str, Any]]) -> str:
    """The median of each figure over a placement's repeats ("" for one repeat each); lost and
    duplicated are summed, not medians: one record lost in any run is a failure."""
    placements = list(dict.fromkeys(r["placement"] for r in runs))
    by = {p: [r for r in runs if r["placement"] == p] for p in placements}
    if all(len(v) < 2 for v in by.values()):
        return ""

    def median(p: str, pick: Callable[[Mapping[str, Any]], Any], digits: int) -> str:
        values = [float(v) for v in map(pick, by[p]) if v is not None]
        return _num(statistics.median(values), digits) if values else "-"

    header = ["median of the repeats", *[f"{p} ({len(by[p])} runs)" for p in placements]]
    rows = [[title, *[median(p, pick, d) for p in placements]] for title, pick, d in MEDIAN_ROWS]

    def summed(p: str, key: str) -> int:
        return sum(r.get(key) or 0 for r in by[p])

    lost = [f"{summed(p, 'lost')} / {summed(p, 'duplicated')}" for p in placements]
    rows.append(["lost / duplicated (summed)", *lost])
    return markdown_table(header, rows)


def run_label(run: Mapping[str, Any], runs: Sequence[Mapping[str, Any]]) -> str:
    repeats = {r.get("repeat", 1) for r in runs}
    return run["placement"] if repeats == {1} else f"{run['placement']} #{run.get('repeat', 1)}"


def placement_table(results: Mapping[str, Any]) -> str:
    runs = results.get("runs", [])
    header = ["figure", *[run_label(r, runs) for r in runs]]
    rows = [[title, *[show(r) for r in runs]] for title, show in ROWS]
    lines = [markdown_table(header, rows)]
    failed = results.get("failed_runs", [])
    if failed:
        lines += ["", "Failed runs:", ""]
        lines += [f"- **{f['placement']} #{f['repeat']}**: {f['error'][:300]}" for f in failed]
    return "\n".join(lines)


def method(spec: Mapping[str, Any], edrp: Mapping[str, Any] | None) -> str:
    cores = " and ".join(map(str, spec["worker_cores"]))
    w = edrp or {}
    return "\n".join([
        f"Each run on a fresh embedded environment: two standalone workers on 127.0.0.2 and 127.0.0.3 (shuffle "
        f"between them is remote to Spark), each launched under `taskset` on a CPU of its own "
        f"(`cluster.worker_cpus` {spec['worker_cpus']}), advertising {cores} cores (`cluster.worker_cores`): "
        f"more than its one CPU, unevenly, so that the master, which puts a new executor on the worker with the "
        f"most free cores (CORES_FREE_DESC), keeps crowding the worker that advertises more whatever its CPU "
        f"carries. {spec['apps']} `wordcount` apps (executors of 1 core, min {spec['min_executors']} / initial "
        f"{spec['initial_executors']} / max {spec['max_executors']}), each under {spec['rate']} lines/s from its own "
        f"load generator; the daemon with DS2 and the run's `placement.name`, the spread rule off "
        f"(`guards.spread_executors: false`: `spark-default` is the master's placement alone). After "
        f"{spec['warmup_s']:g} s of load, {spec['duration_s']:g} s are measured (the shaded window of the plot); "
        f"then the load stops, the apps drain, and the verifier counts lost and duplicated words.",
        "",
        "- **busy share** of a worker: the CPU time (user + system, psutil) of its whole process tree — the worker "
        f"JVM, the executors it forked, their Python workers — over each {spec['sample_s']:g} s sample, as a delta, "
        "/ the wall time / the CPUs it is pinned to. A process that starts counts from 0; the last part of one "
        "that ends is lost.",
        "- **worker load imbalance**: max / mean over the two workers of their busy shares **averaged over the "
        "window** (the ratio of the means: sustained imbalance; a micro-batch's one-second bursts average out). "
        "The time-mean of each sample's max / mean is the row below it.",
        "- **shuffle read**: `shuffleRemoteBytesRead` and `shuffleLocalBytesRead` of every stage attempt of the "
        f"apps completed in the window (the drivers' `/applications/{{id}}/stages?status=complete`, polled every "
        f"{spec['stage_poll_s']:g} s and kept by attempt). Remote = fetched from an executor on the other host.",
        "- **backlog SLO**: as `bench scaling` counts it (`bench.measures`): seconds with more than "
        f"{spec['slo_backlog_s']:g} s of input waiting, per app, summed over the apps.",
        "- **downtime**: per app, each stretch in which records were waiting and the app finished none, from the "
        "last sample at which its finished count advanced to the next, counted when at least "
        f"{spec['min_stall_s']:g} s long (between two batches' ends a healthy app finishes nothing for a batch's "
        "duration); summed over the apps. The longest one is T_D below.",
        "- **objective**: EDRP's F = w_r R/R_max + w_c C/C_max + w_d T_D/T_D,max (eq. 12) on what was measured, "
        f"with `placement.edrp`'s weights and bounds (w_r {w.get('w_r')}, w_c {w.get('w_c')}, w_d {w.get('w_d')}, "
        f"R_max {w.get('r_max_s')} s, T_D,max {w.get('td_max_s')} s, "
        f"C_max {w.get('c_max') or 'every core of the cluster'} at {w.get('price_per_core_hour')}/core-hour): "
        "R = the worst app's mean end-to-end latency (batch end "
        "minus the arrival of the oldest record it read, `bench.probes`), as EDRP's R is its slowest path's; C = "
        "the executor cores the apps held on average x price_per_core_hour; T_D = the longest single stall. "
        "R_max bounds one micro-batch's response (`placement.edrp.r_max_s`), not the paper's 0.15 s per tuple; "
        "the terms are shown apart.",
        "- **moves / actions**: the daemon's actions carried out from the load's start to the window's end "
        "(the action log): a move is a `replace_executor`, actions are every executed action but warnings.",
    ])


def render_placement(results_dir: Path, results: Mapping[str, Any]) -> str:
    """results.md and workers.png; returns the table."""
    from sparkscale_lab.bench.plots import worker_loads

    runs = results.get("runs", [])
    table = placement_table(results)
    edrp = next((r.get("edrp_settings") for r in runs if r.get("edrp_settings")), None)
    parts = ["# Placement: Spark's own, OTD, EDRP", "", method(results["spec"], edrp), ""]
    medians = median_table(runs)
    parts += [medians, "", "Each run:", ""] if medians else []
    parts += [table, ""]
    if runs:
        worker_loads(runs, results_dir / "workers.png")
        parts += ["![each worker's busy share and executors over time](workers.png)", ""]
    for r in runs:
        if r.get("notes"):
            parts += [f"Notes, {run_label(r, runs)}:", "", *[f"- {n}" for n in r["notes"]], ""]
    parts.append(f"Command: `{results['command']}`")
    (results_dir / "results.md").write_text("\n".join(parts) + "\n")
    return table
