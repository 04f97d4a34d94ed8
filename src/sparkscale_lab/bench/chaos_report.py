"""The pure side of `sparkscale bench chaos`: the pre-fault throughput and the recovery time from a
run's samples, the daemon's JSON log condensed into what it did around the fault, and results.md
with a timeline per run and, per fault, its variants' recovery breakdowns side by side (also what
`sparkscale report DIR` re-renders from results.json, older ones without variants too).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from sparkscale.bounded import clip
from sparkscale_lab.bench.chaos_variants import DEFAULT, VARIANTS, run_label
from sparkscale_lab.bench.markdown import markdown_table
from sparkscale_lab.bench.timeline import RatePoint, Sample

RECOVERY_FRACTION = 0.9
MAX_ACTION_LINES = 40


# -- throughput -------------------------------------------------------------------------------------


def pre_fault_rate(samples: Sequence[Sample], fault_at_s: float, span_s: float,
                   arrived: bool = False) -> float | None:
    """Records/s the query finished (or, with `arrived`, that arrived) on average over the `span_s`
    seconds before the fault (from the first sample in that span to the last before the fault)."""
    before = [s for s in samples if s.t_s <= fault_at_s]
    if len(before) < 2:
        return None
    end = before[-1]
    start = next(s for s in before if s.t_s >= end.t_s - span_s)
    dt = end.t_s - start.t_s
    if dt <= 0:
        return None
    count = (end.arrived_records - start.arrived_records) if arrived else (
        end.processed_records - start.processed_records)
    return count / dt


def reference_rate(pre_fault_rps: float | None, input_rps: float | None) -> float | None:
    """The throughput a recovery must regain: the pre-fault output rate, but not above the offered
    rate (an app still draining a start-up backlog before the fault finishes more than arrives,
    which it can never do again once the backlog is gone)."""
    if pre_fault_rps is None or input_rps is None:
        return pre_fault_rps
    return min(pre_fault_rps, input_rps)


def recovery_time_s(points: Sequence[RatePoint], fault_at_s: float, pre_fault_rps: float | None,
                    sustain_s: float, fraction: float = RECOVERY_FRACTION) -> float | None:
    """Seconds from the fault to the first rate point after it from which the output rate stays at
    or above `fraction` of the pre-fault rate for `sustain_s` (the whole stretch observed); None
    while (or if) it has not. The sustain keeps a window that still holds pre-fault batches from
    passing for a recovery."""
    # E-Storm (Liu et al., §VI-C, Table III): fault -> 90 % of the mean pre-failure throughput (10 s averages).
    if pre_fault_rps is None or pre_fault_rps <= 0:
        return None
    threshold = fraction * pre_fault_rps
    after = [p for p in points if p.t_s > fault_at_s]
    for i, p in enumerate(after):
        if p.output_rate < threshold:
            continue
        if after[-1].t_s < p.t_s + sustain_s:
            return None  # not observed long enough yet
        if all(q.output_rate >= threshold for q in after[i:] if q.t_s <= p.t_s + sustain_s):
            return round(p.t_s - fault_at_s, 1)
    return None


# -- the daemon's log -------------------------------------------------------------------------------


def event_time(event: Mapping[str, Any]) -> float | None:
    """An event's timestamp (structlog's ISO, UTC) in epoch seconds."""
    stamp = event.get("timestamp")
    if not isinstance(stamp, str):
        return None
    try:
        return datetime.fromisoformat(stamp).timestamp()
    except ValueError:
        return None


def _clip(value: Any, width: int = 70) -> str:
    return clip(str(value or ""), width)


def _cycle(e: Mapping[str, Any]) -> str:
    if e.get("mode") == "acted":
        return "cycle acted: " + "; ".join(e.get("actions") or [])
    return f"cycle {e.get('mode')}"


DESCRIBE: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "daemon.start": lambda e: "daemon started",
    "daemon.stop": lambda e: "daemon stopped",
    "zookeeper.state": lambda e: f"zookeeper {e.get('state')}",
    "leader.acquired": lambda e: f"leader lock acquired (epoch {e.get('epoch')})",
    "leader.lost": lambda e: f"leader lock lost ({e.get('reason', 'session lost')}): stops acting",
    "leader.suspended": lambda e: "leader suspended (connection lost): not acting",
    "leader.resumed": lambda e: f"leader resumed (epoch {e.get('epoch')})",
    "leader.released": lambda e: "leader lock released",
    "cycle": _cycle,
    "cycle.unreachable": lambda e: f"cycle unreachable ({_clip(e.get('error'), 50)}): no action",
    "cycle.app_absent": lambda e: "app absent: no action",
    "cycle.no_queries": lambda e: "no queries yet: no action",
    "cycle.error": lambda e: f"cycle error ({_clip(e.get('error'), 50)})",
    "action.started": lambda e: f"action started: {e.get('actions')}",
    "action.done": lambda e: "action done: " + ", ".join(
        f"{r.get('action')} {r.get('status')}" for r in e.get("results") or []),
    "migration.phase": lambda e: f"migration phase {e.get('phase')}",
    "migration.fault_hold": lambda e: f"migration held after {e.get('phase')} (fault injection)",
    "migration.resume": lambda e: f"resumes migration {e.get('id')} at {e.get('phase')} (left by epoch "
                                  f"{e.get('previous_epoch')})",
    "migration.done": lambda e: "migration done",
    "migration.rolled_back": lambda e: f"migration rolled back at {e.get('phase')}",
    "migration.step_failed": lambda e: f"migration step {e.get('phase')} failed ({_clip(e.get('reason'), 50)})",
    "migration.fenced": lambda e: "migration journal write fenced",
    "migration.resumed": lambda e: f"resumed migration ended: {e.get('status')}",
}


def daemon_actions(events: Mapping[str, Sequence[Mapping[str, Any]]], start: float, end: float,
                   fault_at: float) -> list[str]:
    """What the daemons (name -> their logged events) did from `start` to `end` (epoch seconds): one
    line per event that tells (leadership, cycles and their mode, actions, migrations, unreachable
    services), `+S s name: what`, seconds from the fault; a daemon's consecutive repeats as one line
    with `×N`, its consecutive migration phases as one line."""
    timed = sorted((t, name, e) for name, evs in events.items() for e in evs
                   if e.get("event") in DESCRIBE and (t := event_time(e)) is not None and start <= t <= end)
    lines: list[list[Any]] = []  # [t, daemon, text, repeats]
    last: dict[str, int] = {}  # daemon -> index of its last line
    for t, name, e in timed:
        text = DESCRIBE[e["event"]](e)
        i = last.get(name)
        if i is not None and lines[i][2] == text:
            lines[i][3] += 1
            continue
        if i is not None and text.startswith("migration phase ") and lines[i][2].startswith("migration phase"):
            lines[i][2] = lines[i][2].replace("migration phase ", "migration phases ") + ", " + text.split()[-1]
            continue
        last[name] = len(lines)
        lines.append([t, name, text, 1])
    out = [f"{t - fault_at:+.0f} s {name}: {text}" + (f" ×{n}" if n > 1 else "") for t, name, text, n in lines]
    if len(out) > MAX_ACTION_LINES:
        out = [*out[:MAX_ACTION_LINES], f"... {len(out) - MAX_ACTION_LINES} more (the daemon logs)"]
    return out


def acted_without_lead(events: Sequence[Mapping[str, Any]]) -> list[str]:
    """Actions a daemon started while it did not hold its lock (between a lost, suspended or
    released lock and the next acquired or resumed one, or before its first): there must be none."""
    leading = False
    found = []
    for e in sorted(events, key=lambda e: event_time(e) or 0.0):
        name = e.get("event")
        if name in ("leader.acquired", "leader.resumed"):
            leading = True
        elif name in ("leader.lost", "leader.suspended", "leader.released"):
            leading = False
        elif not leading and (name == "action.started" or (name == "cycle" and e.get("mode") == "acted")):
            found.append(f"{e.get('timestamp')}: {DESCRIBE[name](e)}")
    return found


# -- results.md and the plots -----------------------------------------------------------------------


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{round(value, digits):g}"


def highlights(actions: Sequence[str], width: int = 240) -> str:
    """The daemon's lines that are more than routine cycles, for the table (the full list follows)."""
    told = [a for a in actions if ": cycle no_change" not in a and ": cycle standby" not in a]
    return _clip("; ".join(told) or "cycles only (no_change / standby)", width).replace("|", "/")


def variant_of(run: Mapping[str, Any]) -> str:
    return str(run.get("variant") or DEFAULT)


def label(run: Mapping[str, Any]) -> str:
    """The run in tables and headings: its fault, with the variant unless the default."""
    variant = variant_of(run)
    return run["fault"] if variant == DEFAULT else f"{run['fault']} ({variant})"


def _rates(r: Mapping[str, Any]) -> str:
    """The pre-fault output rate and the rate the recovery was judged against (reference_rate)."""
    return f"{_num(r.get('pre_fault_rps'), 0)} / {_num(r.get('reference_rps', r.get('pre_fault_rps')), 0)}"


def chaos_table(results: Mapping[str, Any]) -> str:
    header = ["fault", "recovered", "recovery (s)", "pre-fault / reference (records/s)", "lost", "duplicated",
              "what the daemon did"]
    rows = [[label(r), "yes" if r["recovered"] else "**no**", _num(r["recovery_s"]), _rates(r),
             str(r["lost"]), str(r["duplicated"]), highlights(r["daemon_actions"])] for r in results.get("runs", [])]
    rows += [[label(r), "**failed**", "-", "-", "-", "-", _clip(r["error"], 120).replace("|", "/")]
             for r in results.get("failed_runs", [])]
    return markdown_table(header, rows)


# (row title, how a run's value is shown): the breakdown rows of `breakdown_table`.
BREAKDOWN_ROWS: list[tuple[str, Callable[[Mapping[str, Any]], str]]] = [
    ("detected (s after the fault)", lambda r: _num(r.get("detected_s"), 2)),
    ("replacement registered (s)", lambda r: _num(r.get("replaced_s"), 2)),
    ("state loaded from the checkpoint (store instances)", lambda r: _num(r.get("loaded_from_dfs"), 0)),
    ("reload: load time summed over tasks (ms)", lambda r: _num(r.get("reload_ms"), 0)),
    ("of which changelog replay, summed (ms) / files",
     lambda r: f"{_num(r.get('replay_ms'), 0)} / {_num(r.get('replayed_files'), 0)}"),
    ("reload batches (ids) / longest, wall (ms)",
     lambda r: f"{', '.join(map(str, r.get('reload_batches') or [])) or '-'} / {_num(r.get('reload_batch_ms'), 0)}"),
    ("batch before the fault, median wall (ms)", lambda r: _num(r.get("pre_fault_batch_ms"), 0)),
    ("recovery to 90 % (s)", lambda r: _num(r.get("recovery_s"))),
    ("executors before the fault", lambda r: _num(r.get("executors_before"), 0)),
    ("pre-fault / reference (records/s)", _rates),
    ("lost / duplicated", lambda r: f"{r['lost']} / {r['duplicated']}"),
    ("detected by", lambda r: _clip(r.get("detected_by"), 60).replace("|", "/") or "-"),
]


def breakdown_table(runs: Sequence[Mapping[str, Any]]) -> str:
    """One fault's runs side by side, a column per variant: the recovery breakdown (chaos_breakdown)."""
    header = ["", *[variant_of(r) for r in runs]]
    return markdown_table(header, [[title, *[show(r) for r in runs]] for title, show in BREAKDOWN_ROWS])


def breakdown_tables(results: Mapping[str, Any]) -> list[str]:
    """results.md's breakdown section: per fault (in run order), its variants side by side."""
    by_fault: dict[str, list[Mapping[str, Any]]] = {}
    for r in results.get("runs", []):
        by_fault.setdefault(r["fault"], []).append(r)
    parts: list[str] = []
    for fault, runs in by_fault.items():
        parts += [f"### {fault}", "", breakdown_table(runs), ""]
    return parts


BREAKDOWN_METHOD = (
    "Each run's recovery is split into what can be measured, so that the reload from the checkpoint is never "
    "folded into detection. Spark keeps one live copy of each state partition and no replica: a partition "
    "whose executor died is reloaded from the checkpoint by whichever executor runs its task next (there is "
    "no warm standby of state to build without changing Spark).\n\n"
    "- **detected**: from the fault to the driver removing the lost executor (`removeTime` in the driver's "
    "`/allexecutors`, its own clock; `detected by` is its `removeReason`). When the driver did not answer, "
    "for a fault that kills executors: the first sample (one a second) whose active executor count dropped.\n"
    "- **replacement registered**: from the fault to the first executor added after it (`addTime`), counted "
    "only once a loss was detected; `-` when none came within the watch.\n"
    "- **reload**: the progress reports of the batches that ended after the fault, up to the recovery (else "
    "the end of the watch), that loaded state from the checkpoint (`rocksdbNumLoadedFromDfs` > 0, the store "
    "instances loaded): their `rocksdbLoadLatencyMs` (the whole `RocksDB.load`: copying the snapshot, opening "
    "it, replaying changelogs), and of it `rocksdbReplayChangeLogLatencyMs` and `rocksdbNumReplayChangelogFiles`. "
    "Spark sums these over the batch's tasks: they are **task time summed, not wall time** (two partitions "
    "loading in parallel for 1 s each show 2000 ms). The wall time those batches took (`triggerExecution`, "
    "which also holds their processing and commits) is the `longest, wall` figure. 0: nothing was reloaded. "
    "Spark 4.3.0 wipes these figures for a streaming aggregation (the shipped wordcount's `stateStoreSave`): "
    "its save step loads the store a second time in the task, and `RocksDB.load` clears the load metrics on "
    "every call, so they read 0 even after a reload from the checkpoint (checked on a restart: "
    "docs/internals.md, \"State reload figures\"). The agent does not publish them for such operators; "
    "the reload is then measured as the wall time of the first batch that ended after the fault "
    "(`longest, wall`; it also holds the retried tasks), next to the median batch of the minute before.\n"
    "- **recovery**: as in the table above (E-Storm's 90 % rule).")


def variants_method(results: Mapping[str, Any]) -> str:
    """What the variants of this run were; '' when only the default ran."""
    used = list(dict.fromkeys(variant_of(r) for r in [*results.get("runs", []), *results.get("failed_runs", [])]))
    if used == [DEFAULT] or not used:
        return ""
    lines = [f"- `{v}`: {VARIANTS[v].what}." if v in VARIANTS else f"- `{v}`" for v in used]
    return ("The faults that kill executors (executor_kill, worker_kill) ran once per variant, each on its own "
            "fresh app; the other faults once, under the default. The variants are the levers Spark has "
            "without a change to Spark; `spare` is a standby executor, not standby state:\n\n" + "\n".join(lines))


def method(spec: Mapping[str, Any]) -> str:
    return (f"Each fault on a fresh `wordcount` app under a constant {spec['rate']} lines/s, with the daemon "
            f"(DS2) running as its own process; the fault comes after {spec['warmup_s']:g} s of warm-up and "
            f"{spec['pre_fault_s']:g} s of pre-fault load. Throughput: input records the query finished per "
            f"second, over {spec['rate_window_s']:g} s windows (sampled every {spec['sample_s']:g} s). Recovery "
            f"time as E-Storm measures it (Liu et al., §VI-C, Table III): from the fault until the throughput is "
            f"back at {RECOVERY_FRACTION:.0%} of its pre-fault average (capped at the offered rate: an app still "
            f"draining its start-up backlog finishes more than arrives, which it cannot do once it has caught "
            f"up), and stays there for {spec['sustain_s']:g} "
            f"s; not recovered (`recovery_s: null`) when that did not happen within "
            f"{spec['recovery_timeout_s']:g} s. Then the load stops, the app drains, and the verifier counts "
            f"lost and duplicated words (per-word count deficits and surpluses). "
            + ("Every fault ran on one embedded environment (its own app, `cluster up` after each run)."
               if spec.get("shared_environment") else "Every fault ran on a fresh embedded environment."))


def render_chaos(results_dir: Path, results: Mapping[str, Any]) -> str:
    """results.md (the table, the method, each fault's notes and daemon log) and a timeline per fault."""
    from sparkscale_lab.bench.plots import timeline

    table = chaos_table(results)
    variants = variants_method(results)
    parts = ["# Chaos run", "", method(results["spec"]), "", *([variants, ""] if variants else []), table, ""]
    if results.get("runs"):
        parts += ["## Recovery breakdown", "", BREAKDOWN_METHOD, "", *breakdown_tables(results)]
    for r in results.get("runs", []):
        samples = [Sample.from_dict(s) for s in r["samples"]]
        end = r["recovered_at_s"] if r["recovered_at_s"] is not None else (samples[-1].t_s if samples else 0.0)
        verdict = f"recovered in {r['recovery_s']:g} s" if r["recovered"] else "NOT recovered"
        title = (f"{label(r)}: {verdict} (pre-fault / reference {_rates(r)} records/s); "
                 f"lost {r['lost']}, duplicated {r['duplicated']}")
        plot = f"timeline-{run_label(r['fault'], variant_of(r))}.png"
        timeline(samples, r.get("actions", []), title, results_dir / plot,
                 shaded=[(r["fault_at_s"], max(end, r["fault_at_s"]), "fault → recovered")])
        parts += [f"## {label(r)}", "", f"Injected: {r['what']}.", "",
                  *[f"- {n}" for n in r["notes"]], "", "What the daemon did (seconds from the fault):", "",
                  *[f"    {a}" for a in r["daemon_actions"] or ["(nothing logged)"]], "",
                  f"![{label(r)}]({plot})", ""]
    parts.append(f"Command: `{results['command']}`")
    (results_dir / "results.md").write_text("\n".join(parts) + "\n")
    return table
