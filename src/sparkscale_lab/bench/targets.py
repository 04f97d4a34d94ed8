"""The targets a scaling benchmark holds DS2 to, judged on one case's runs: pure, no I/O.

For the target controller (ds2), each figure is the median over its repeats (lost and duplicated:
the sum, since a single loss is a miss):
- backlog-SLO seconds at most static's, and at most half of spark-dra's;
- over-provisioning at most 1.3x the calibrated need;
- after every load change: converged (executor count steady and backlog within the SLO to the
  step's end) with at most 2 actions in that step;
- no direction reversal at steady load (two actions of one step in opposite directions);
- fewer scaling actions than ds2-baseline's (DS2 without the stability settings, run alongside:
  bench.scaling_controllers);
- nothing lost or duplicated;
- on a memory case (bench.memory_state): no executor lost to an out-of-memory where ds2-baseline
  lost one (summed over the runs); a case where the baseline lost none did not test the guard and
  is not judged.
The step targets apply to piecewise-constant profiles only: a sine has no step to converge after
and no steady load, and says so. A target that cannot be judged (a controller not run, a figure
unknown) is `met=None`, never a pass.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from sparkscale_lab.bench.measures import Segment
from sparkscale_lab.bench.scaling_controllers import BASELINE_CONTROLLER

TARGET_CONTROLLER = "ds2"
OVER_PROVISIONING_MAX = 1.3
MAX_ACTIONS_PER_CHANGE = 2
DRA_FRACTION = 0.5


@dataclass(frozen=True)
class TargetCheck:
    key: str
    target: str
    measured: str
    met: bool | None  # None: not judged (see `measured`)
    missed_by: str = ""  # by how much, when missed

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _fmt(value: float | None, unit: str = "") -> str:
    if value is None:
        return "unknown"
    if math.isinf(value):
        return "never"
    return f"{round(value, 2):g}{unit}"


def median_of(runs: Sequence[Mapping[str, Any]], key: str) -> float | None:
    """The median of a measure over runs, unknown (None) values left out; None when none is known."""
    known = [r["measures"].get(key) for r in runs if r["measures"].get(key) is not None]
    return float(statistics.median(known)) if known else None


def _of(runs: Sequence[Mapping[str, Any]], controller: str) -> list[Mapping[str, Any]]:
    return [r for r in runs if r["controller"] == controller]


def _backlog_targets(mine: Sequence[Mapping[str, Any]], runs: Sequence[Mapping[str, Any]]) -> list[TargetCheck]:
    ours = median_of(mine, "slo_backlog_s")
    out = []
    for key, other, factor, text in (
            ("backlog_vs_static", "static", 1.0, "backlog-SLO seconds <= static's"),
            ("backlog_vs_spark_dra", "spark-dra", DRA_FRACTION, "backlog-SLO seconds <= half of spark-dra's")):
        theirs = median_of(_of(runs, other), "slo_backlog_s")
        if ours is None or theirs is None:
            missing = TARGET_CONTROLLER if ours is None else other
            out.append(TargetCheck(key, text, f"not judged: no {missing} run with this figure", None))
            continue
        limit = theirs * factor
        measured = f"{TARGET_CONTROLLER} {_fmt(ours, ' s')}, {other} {_fmt(theirs, ' s')}"
        if factor != 1.0:
            measured += f" (half: {_fmt(limit, ' s')})"
        met = ours <= limit + 1e-9
        out.append(TargetCheck(key, text, measured, met, "" if met else f"{_fmt(ours - limit, ' s')} over"))
    return out


def _over_provisioning(mine: Sequence[Mapping[str, Any]]) -> TargetCheck:
    text = f"over-provisioning <= {OVER_PROVISIONING_MAX:g}x the calibrated need"
    value = median_of(mine, "over_provisioning")
    if value is None:
        return TargetCheck("over_provisioning", text, "not judged: no calibrated need (not calibrated, or a "
                           "rate nothing kept up with)", None)
    met = value <= OVER_PROVISIONING_MAX + 1e-9
    return TargetCheck("over_provisioning", text, _fmt(value, "x"), met,
                       "" if met else f"{_fmt(value - OVER_PROVISIONING_MAX, 'x')} over")


def _median_with_never(values: Sequence[float | None]) -> float:
    """The median where None (never converged) counts as infinitely late."""
    return float(statistics.median([math.inf if v is None else float(v) for v in values]))


def _convergence(mine: Sequence[Mapping[str, Any]], segs: Sequence[Segment]) -> TargetCheck:
    text = f"converged after every load change, with at most {MAX_ACTIONS_PER_CHANGE} actions each"
    parts, misses = [], []
    judged = True
    for i, seg in enumerate(segs[1:], start=1):
        label = f"{seg.rate:g}/s @{seg.start_s:g}s"
        conv = [(r["measures"].get("convergence_s") or [None] * len(segs))[i] for r in mine]
        per_seg = [r["measures"].get("actions_per_segment") for r in mine]
        actions = [a[i] for a in per_seg if a and len(a) > i]
        when = _median_with_never(conv)
        never = sum(1 for c in conv if c is None)
        n_actions = float(statistics.median(actions)) if actions else None
        parts.append(f"{label}: {_fmt(when, ' s')}" + (f" ({never}/{len(conv)} never)" if never else "")
                     + f", {_fmt(n_actions)} actions")
        if math.isinf(when):
            misses.append(f"{label} not converged ({never}/{len(conv)} runs never)")
        if n_actions is None:
            judged = False
        elif n_actions > MAX_ACTIONS_PER_CHANGE:
            misses.append(f"{label}: {_fmt(n_actions - MAX_ACTIONS_PER_CHANGE)} actions too many")
    if not parts:
        return TargetCheck("converged_each_change", text, "not judged: the profile has no load change", None)
    met: bool | None = False if misses else (True if judged else None)
    return TargetCheck("converged_each_change", text, "; ".join(parts), met, "; ".join(misses))


def _reversals(mine: Sequence[Mapping[str, Any]]) -> TargetCheck:
    text = "no direction reversal at steady load"
    values = [r["measures"].get("steady_reversals") for r in mine]
    value = median_of(mine, "steady_reversals")
    if value is None:
        return TargetCheck("no_steady_reversal", text, "not judged: not measured in these runs", None)
    runs = ", ".join("?" if v is None else str(v) for v in values)
    return TargetCheck("no_steady_reversal", text, f"{_fmt(value)} (runs: {runs})", value == 0,
                       "" if value == 0 else f"{_fmt(value)} reversal(s)")


def _lost(mine: Sequence[Mapping[str, Any]]) -> TargetCheck:
    lost = sum(int(r.get("lost") or 0) for r in mine)
    dup = sum(int(r.get("duplicated") or 0) for r in mine)
    met = lost == 0 and dup == 0
    return TargetCheck("nothing_lost_or_duplicated", "nothing lost or duplicated",
                       f"{lost} lost, {dup} duplicated over {len(mine)} run(s)", met,
                       "" if met else f"{lost} lost, {dup} duplicated")


def _fewer_actions(mine: Sequence[Mapping[str, Any]], runs: Sequence[Mapping[str, Any]]) -> TargetCheck:
    text = f"fewer scaling actions than {BASELINE_CONTROLLER}"
    ours = median_of(mine, "scaling_actions")
    theirs = median_of(_of(runs, BASELINE_CONTROLLER), "scaling_actions")
    if ours is None or theirs is None:
        missing = TARGET_CONTROLLER if ours is None else BASELINE_CONTROLLER
        return TargetCheck("fewer_actions_than_baseline", text, f"not judged: no {missing} run with this figure",
                           None)
    met = ours < theirs
    return TargetCheck("fewer_actions_than_baseline", text,
                       f"{TARGET_CONTROLLER} {_fmt(ours)}, {BASELINE_CONTROLLER} {_fmt(theirs)}", met,
                       "" if met else ("as many" if ours == theirs else f"{_fmt(ours - theirs)} more"))


def oom_sum(runs: Sequence[Mapping[str, Any]]) -> int | None:
    """Executors lost to an out-of-memory over `runs`; None when no run counted them."""
    known = [int(r["executors_lost_oom"]) for r in runs if r.get("executors_lost_oom") is not None]
    return sum(known) if known else None


def _out_of_memory(mine: Sequence[Mapping[str, Any]], runs: Sequence[Mapping[str, Any]]) -> TargetCheck:
    text = f"no executor lost to an out-of-memory where {BASELINE_CONTROLLER} lost one"
    ours, theirs = oom_sum(mine), oom_sum(_of(runs, BASELINE_CONTROLLER))
    if ours is None or theirs is None:
        missing = TARGET_CONTROLLER if ours is None else BASELINE_CONTROLLER
        return TargetCheck("no_out_of_memory", text, f"not judged: no {missing} run counted them", None)
    measured = f"{TARGET_CONTROLLER} {ours}, {BASELINE_CONTROLLER} {theirs} over the runs"
    if ours > 0:
        return TargetCheck("no_out_of_memory", text, measured, False, f"{ours} executor(s) lost")
    if theirs == 0:
        return TargetCheck("no_out_of_memory", text, f"not judged: {measured} (the baseline hit no "
                           "out-of-memory, so the case did not test the guard)", None)
    return TargetCheck("no_out_of_memory", text, measured, True)


def evaluate_targets(runs: Sequence[Mapping[str, Any]], segs: Sequence[Segment], piecewise_constant: bool,
                     controller: str = TARGET_CONTROLLER, judges_out_of_memory: bool = False) -> list[TargetCheck]:
    """Every target for `controller` over one case's runs (results.json `runs` entries); the
    out-of-memory one on a memory case (`judges_out_of_memory`)."""
    mine = _of(runs, controller)
    if not mine:
        return [TargetCheck("runs", f"{controller} judged on this case", f"not judged: no {controller} run", None)]
    checks = [*_backlog_targets(mine, runs), _over_provisioning(mine)]
    if piecewise_constant:
        checks += [_convergence(mine, segs), _reversals(mine)]
    else:
        why = "not judged: the load changes continuously (no step to converge after, no steady load)"
        checks += [TargetCheck("converged_each_change", "converged after every load change, with at most "
                               f"{MAX_ACTIONS_PER_CHANGE} actions each", why, None),
                   TargetCheck("no_steady_reversal", "no direction reversal at steady load", why, None)]
    checks += [_fewer_actions(mine, runs), _lost(mine)]
    if judges_out_of_memory:
        checks.append(_out_of_memory(mine, runs))
    return checks


def summary(checks: Sequence[TargetCheck]) -> str:
    met = sum(1 for c in checks if c.met is True)
    missed = sum(1 for c in checks if c.met is False)
    return f"{met} met, {missed} missed, {len(checks) - met - missed} not judged"
