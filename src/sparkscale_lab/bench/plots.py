"""Timelines with matplotlib (Agg, no display): input and output rate, backlog (in records, or in
seconds of input against the SLO) with the batch duration and the latency, executors and partitions
over time, actions marked, load changes (or migration phases) shaded."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only: the daemon's host has no display
import matplotlib.pyplot as plt

from sparkscale_lab.bench.measures import SloLimits, backlog_seconds, input_rates, segments
from sparkscale_lab.bench.scaling_results import case_runs, scaling_cases
from sparkscale_lab.bench.timeline import Sample, rates
from sparkscale_lab.pipelines.profiles import parse_profile


def timeline(samples: list[Sample], actions: list[dict], title: str, path: Path, profile: str | None = None,
             shaded: Sequence[tuple[float, float, str]] = (), rate_window_s: float = 10.0,
             limits: SloLimits | None = None) -> None:
    """Three stacked panels sharing the time axis; `shaded` spans are (start_s, end_s, label). With
    `limits` (and a profile), the backlog is drawn as the SLO measures it, in seconds of input."""
    fig, (ax_rate, ax_backlog, ax_exec) = plt.subplots(3, 1, figsize=(11, 7.5), sharex=True,
                                                       gridspec_kw={"height_ratios": [3, 2, 2]})
    points = rates(samples, rate_window_s)
    ax_rate.plot([p.t_s for p in points], [p.input_rate for p in points], label="input rate", color="tab:blue")
    ax_rate.plot([p.t_s for p in points], [p.output_rate for p in points], label="output (processed) rate",
                 color="tab:green")
    if profile:
        segs = segments(parse_profile(profile))
        xs = [x for g in segs for x in (g.start_s, g.end_s)]
        ys = [g.rate for g in segs for _ in range(2)]
        ax_rate.plot(xs, ys, "--", color="grey", linewidth=1, label="target load")
        for g in segs[1:]:
            for ax in (ax_rate, ax_backlog, ax_exec):
                ax.axvline(g.start_s, color="grey", linestyle=":", linewidth=1)
    ax_rate.set_ylabel(f"records/s ({rate_window_s:g} s window)")
    ax_rate.legend(loc="upper right", fontsize=8)
    ax_rate.set_title(title)

    ts = [s.t_s for s in samples]
    if limits is not None and profile:
        load = parse_profile(profile)
        rates_in = input_rates(samples, load.rate_at, rate_window_s)
        seconds = [backlog_seconds(limits.backlog_of(s), r) for s, r in zip(samples, rates_in, strict=True)]
        ax_backlog.plot(ts, [0 if v is None else v for v in seconds], color="tab:red", label="backlog")
        ax_backlog.axhline(limits.backlog_s, color="tab:red", linestyle="--", linewidth=0.8, label="SLO")
        ax_backlog.set_ylabel(f"backlog (s of input, {limits.backlog_basis})", color="tab:red")
    else:
        ax_backlog.plot(ts, [s.backlog_records for s in samples], color="tab:red", label="backlog")
        ax_backlog.set_ylabel("backlog (records)", color="tab:red")
    ax_batch = ax_backlog.twinx()
    ax_batch.plot(ts, [(s.batch_duration_ms or 0) / 1000 for s in samples], color="tab:purple", linewidth=0.8,
                  label="batch duration")
    latency = [(s.t_s, s.latency_ms / 1000) for s in samples if s.latency_ms is not None]
    if latency:
        ax_batch.plot([t for t, _ in latency], [v for _, v in latency], color="tab:brown", linewidth=1,
                      label="end-to-end latency")
        ax_batch.legend(loc="upper right", fontsize=7)
    ax_batch.set_ylabel("batch duration, latency (s)" if latency else "batch duration (s)", color="tab:purple")

    known = [(s.t_s, s.executors) for s in samples if s.executors is not None]
    ax_exec.step([t for t, _ in known], [n for _, n in known], where="post", color="black", label="executors")
    parts = [(s.t_s, s.partitions) for s in samples if s.partitions is not None]
    if parts and len({p for _, p in parts}) > 1:
        ax_parts = ax_exec.twinx()
        ax_parts.step([t for t, _ in parts], [p for _, p in parts], where="post", color="tab:orange",
                      label="state partitions")
        ax_parts.set_ylabel("state partitions", color="tab:orange")
    top = max([n for _, n in known] + [1])
    for a in actions:
        up = a["to"] > a["from_"]
        marker = "^" if up else "v"
        color = "tab:green" if a.get("done", True) else "tab:red"
        if a["kind"] == "scale_executors":
            ax_exec.plot(a["t_s"], a["to"], marker=marker, color=color, markersize=9, linestyle="none")
        else:
            ax_exec.annotate(f"{a['from_']}→{a['to']} partitions", (a["t_s"], top), fontsize=7, rotation=90,
                             va="top")
    ax_exec.set_ylim(0, top + 1)
    ax_exec.set_ylabel("executors (▲▼ actions)")
    ax_exec.set_xlabel("time since the load started (s)")
    for start, end, label in shaded:
        for ax in (ax_rate, ax_backlog, ax_exec):
            ax.axvspan(start, end, alpha=0.15, color="tab:orange")
        ax_rate.text((start + end) / 2, ax_rate.get_ylim()[1] * 0.95, label, fontsize=7, ha="center", va="top",
                     rotation=90)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_scaling(results_dir: Path, results: dict[str, Any]) -> list[Path]:
    """Per case: a timeline per run, and `executors-<case>.png`, every controller's executor count in
    its first run (older single-case results: without the case in the names)."""
    spec = results["spec"]
    written = []
    for case in scaling_cases(results):
        prefix = f"{case['name']}-" if case["name"] else ""
        limits = SloLimits(batch_limit_ms=1000 * (case.get("trigger_s") or 1.0),
                           backlog_s=spec.get("slo_backlog_s", 10.0),
                           backlog_floor_records=spec.get("slo_backlog_floor_records", 50),
                           backlog_basis=case.get("backlog_basis", "counted"))
        runs = case_runs(results, case)
        for run in runs:
            samples = [Sample.from_dict(s) for s in run["samples"]]
            path = results_dir / f"timeline-{prefix}{run['controller']}-{run['repeat']}.png"
            m = run["measures"]
            latency = m.get("slo_latency_s")
            title = (f"{case['name'] or case['workload']}, {run['controller']} (run {run['repeat']}): "
                     f"{m['scaling_actions']} actions, backlog SLO {m['slo_backlog_s']:g} s"
                     + (f", latency SLO {latency:g} s" if latency is not None else "")
                     + f", {m['executor_core_s']:g} executor-core-s, lost {run['lost']}, "
                     f"duplicated {run['duplicated']}")
            timeline(samples, run["actions"], title, path, case["profile"], limits=limits)
            written.append(path)
        written.append(_executors_plot(results_dir / f"executors{'-' + case['name'] if case['name'] else ''}.png",
                                       spec["controllers"], runs, case))
    return written


def _executors_plot(path: Path, controllers: list[str], runs: list[dict[str, Any]], case: dict[str, Any]) -> Path:
    fig, ax = plt.subplots(figsize=(11, 4))
    for controller in controllers:
        run = next((r for r in runs if r["controller"] == controller), None)
        if run is None:
            continue
        known = [(s["t_s"], s["executors"]) for s in run["samples"] if s["executors"] is not None]
        ax.step([t for t, _ in known], [n for _, n in known], where="post", label=controller)
    for g in segments(parse_profile(case["profile"]))[1:]:
        ax.axvline(g.start_s, color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("time since the load started (s)")
    ax.set_ylabel("executors")
    ax.set_title(f"Executors over time, first run of each controller ({case['workload']}, {case['profile']})")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def worker_loads(runs: list[dict[str, Any]], path: Path) -> Path:
    """`bench placement`: a column per run, each worker's busy share over time above, the executors
    on each worker below; the measured window shaded."""
    fig, axes = plt.subplots(2, max(len(runs), 1), figsize=(5.5 * max(len(runs), 1), 6.5), sharex="col",
                             sharey="row", squeeze=False)
    for col, run in enumerate(runs):
        ax_busy, ax_exec = axes[0][col], axes[1][col]
        samples = run.get("worker_samples") or []
        hosts = sorted({h for s in samples for h in s.get("busy_share", {})})
        for host in hosts:
            busy = [(s["t_s"], s["busy_share"].get(host)) for s in samples if s["busy_share"].get(host) is not None]
            line, = ax_busy.plot([t for t, _ in busy], [v for _, v in busy], linewidth=0.5, alpha=0.35)
            ax_busy.plot([t for t, _ in busy], _rolling_mean([v for _, v in busy], 10), color=line.get_color(),
                         linewidth=1.2, label=f"{host} (10-sample mean)")
            known = [(s["t_s"], s["executors"].get(host)) for s in samples if s["executors"].get(host) is not None]
            ax_exec.step([t for t, _ in known], [n for _, n in known], where="post", label=host)
        start, end = run.get("window_s") or (0.0, 0.0)
        for ax in (ax_busy, ax_exec):
            ax.axvspan(start, end, alpha=0.08, color="tab:green")
        imbalance = run.get("worker_load_imbalance")
        ax_busy.set_title(f"{run['placement']} (run {run.get('repeat', 1)}): imbalance "
                          f"{'-' if imbalance is None else f'{imbalance:.2f}'}", fontsize=10)
        ax_busy.set_ylim(0, 1.05)  # of the pinned CPUs: 1 is all of them
        ax_exec.set_ylim(0, max([n for s in samples for n in s["executors"].values() if n is not None] + [1]) + 1)
        ax_exec.yaxis.get_major_locator().set_params(integer=True)
        ax_exec.set_xlabel("time since the load started (s)")
        if col == 0:
            ax_busy.set_ylabel("worker busy share (its pinned CPU)")
            ax_exec.set_ylabel("executors on the worker")
        ax_busy.legend(loc="upper right", fontsize=7)
        ax_exec.legend(loc="upper right", fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _rolling_mean(values: list[float], n: int) -> list[float]:
    """The mean of each value with up to n - 1 before it."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v - (values[i - n] if i >= n else 0.0)
        out.append(total / min(i + 1, n))
    return out
