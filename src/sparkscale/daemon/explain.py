"""`sparkscale explain DECISION_ID`: one logged decision with every figure behind it.

The daemon's console shows one line per cycle ending in the decision id; this renders what the
action log holds for that id: the decision (app, time, policy, diagnosis, mode, leader, epoch), the
plan's actions with their reasons, the whole explanation (policy, guards, blocklist, Spark mapping),
the typed observation, the expected outcome and its judgement, what executing it did, and the
snapshot behind it when the log kept one. Rendering is pure; `find_decision` is the one read.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from pydantic import JsonValue

from sparkscale.daemon.action_log import ActionLog, LoggedDecision
from sparkscale.daemon.operator_view import follow_up_lines
from sparkscale.model.plan import table_lines
from sparkscale.model.snapshot import Snapshot, SnapshotError
from sparkscale.model.snapshot_merge import QUERY_SEPARATOR, query_names, split_operator
from sparkscale.redisconn import stream_entries
from sparkscale.store.base import ActionLogStore

_ID = re.compile(r"^(\d+)-(\d+)$")


def parse_decision_id(text: str) -> str:
    """A decision id as the log shows it (`1795348805123-0`, brackets tolerated); ValueError if not one."""
    wanted = text.strip().strip("[]").strip()
    if not _ID.match(wanted):
        raise ValueError(f"{text!r} is not a decision id: expected the id the daemon logs, such as "
                         f"1795348805123-0 (`sparkscale actions --json` lists them)")
    return wanted


def find_decision(log: ActionLog, decision_id: str) -> LoggedDecision | None:
    """The decision logged under `decision_id`, joined with its results and outcome; None if the log
    has no such decision (never written, or trimmed since)."""
    entries = stream_entries(log.client.xrange(log.key, min=decision_id, max=decision_id))
    if not entries or entries[0][1].get("kind") != "decision":
        return None
    app = entries[0][1].get("app")
    since = int(_ID.match(decision_id).group(1)) / 1000  # type: ignore[union-attr]
    for logged in log.read(app, since):
        if logged.id == decision_id:
            return logged
    return None


def kept_snapshot(log: ActionLogStore, logged: LoggedDecision) -> Snapshot | str | None:
    """The snapshot the decision saw, if the log kept it (decisions with actions, `snapshots_kept`);
    a string says why it cannot be read."""
    if not logged.decision.snapshot_id:
        return None
    text = log.snapshot(logged.decision.app, logged.decision.snapshot_id)
    if text is None:
        return None
    try:
        return Snapshot.from_json(text)
    except SnapshotError as exc:
        return f"kept, but unreadable: {exc}"


def explain_dict(logged: LoggedDecision, snapshot: Snapshot | str | None,
                 follow_ups: Mapping[str, JsonValue] | None = None) -> dict[str, JsonValue]:
    """The whole record (`sparkscale actions --json`'s shape), the kept snapshot and the follow-up
    figures of its migrations that were pending when logged (`daemon.followup.follow_ups`), for `--json`."""
    out = logged.to_dict()
    if follow_ups:
        out["follow_ups"] = dict(follow_ups)
    out["snapshot"] = snapshot.to_dict() if isinstance(snapshot, Snapshot) else None
    if isinstance(snapshot, str):
        out["snapshot_error"] = snapshot
    return out


def explain_json(logged: LoggedDecision, snapshot: Snapshot | str | None,
                 follow_ups: Mapping[str, JsonValue] | None = None) -> str:
    return json.dumps(explain_dict(logged, snapshot, follow_ups), indent=2, default=str)


def explain_text(logged: LoggedDecision, snapshot: Snapshot | str | None = None,
                 follow_ups: Mapping[str, JsonValue] | None = None) -> str:
    """Everything behind one decision, for people: sections separated by a blank line. `follow_ups`:
    migration id -> its follow-up figures found since (a dict) or why they are not known."""
    rec = logged.decision
    plan = rec.plan
    leader = rec.daemon or "-"
    if rec.epoch is not None:
        leader += f" (epoch {rec.epoch})"
    sections = [[
        f"decision {logged.id}",
        *_pairs([("app", rec.app), ("decided at", _when(rec.decided_at)), ("policy", rec.policy),
                 ("diagnosis", rec.diagnosis or "-"), ("mode", rec.mode), ("leader", leader),
                 ("snapshot", rec.snapshot_id or "-")]),
    ]]

    actions = ["actions:"]
    for action in plan.actions:
        actions.append(f"  {action.summary()}")
        if action.reason:
            actions.append(f"    why: {action.reason}")
    if not plan.actions:
        actions.append("  none (nothing should change)")
    if plan.parallelism:
        actions.append("  target parallelism: " + ", ".join(f"{op}={n}" for op, n in plan.parallelism.items()))
    sections.append(actions)

    sections.append(["explanation:", *(f"  {line}" for line in plan.explanation or ("-",))])
    sections.append(_observation(logged))
    sections.append(_expectation(logged))
    sections.append(_results(logged, follow_ups or {}))
    sections.append(_snapshot(snapshot))
    return "\n\n".join("\n".join(section) for section in sections)


def _observation(logged: LoggedDecision) -> list[str]:
    obs = logged.decision.plan.observation
    lines = ["observation:"]
    lines += _pairs([(label, value) for label, value in (
        ("query", obs.query), ("diagnosis", obs.diagnosis),
        ("recommended executors", obs.recommended_executors),
    ) if value is not None], indent=2)
    if obs.expected is not None:
        e = obs.expected
        lines.append(f"  policy's expectation: {e.action_type} for {e.diagnosis}: {e.metric} "
                     f"{_num(e.before)} -> {_num(e.after)}")
    if obs.figures:
        lines.append("  figures:")
        lines += _pairs([(key, _num(value)) for key, value in obs.figures.items()], indent=4)
    if len(lines) == 1:
        lines.append("  - (the policy recorded no figures)")
    return lines


def _expectation(logged: LoggedDecision) -> list[str]:
    e, o = logged.decision.expected, logged.outcome
    if e is None:
        return ["expected outcome: none (the decision changed nothing, or its policy expects nothing)"]
    goal = ("the app keeps up" if e.metric == "keeps_up"
            else f"{e.metric} {_num(e.before)} -> {_num(e.after)}")
    lines = [f"expected outcome: {goal}",
             f"  for {e.action_type} on diagnosis {e.diagnosis}, backlog before {_num(e.backlog_before)}"]
    if o is None:
        done = logged.results is not None and any(r.status == "done" for r in logged.results)
        lines.append("outcome: " + ("not judged yet" if done else "not judged (no action was done)"))
        return lines
    lines.append(f"outcome: {'met' if o.met else 'NOT met'} (judged at {_when(o.evaluated_at)})")
    lines += _pairs([("metric", o.metric), ("before", _num(o.before)), ("expected", _num(o.expected)),
                     ("observed", _num(o.observed)), ("detail", o.detail or "-")], indent=2)
    if o.blocked_until is not None:
        lines.append(f"  blocked until {_when(o.blocked_until)} for this diagnosis (`sparkscale blocklist`)")
    return lines


def _results(logged: LoggedDecision, follow_ups: Mapping[str, JsonValue]) -> list[str]:
    rec = logged.decision
    if logged.results is None:
        if rec.mode in ("acted", "manual") and rec.plan.changes:
            return ["results: none logged (in progress, or the daemon stopped while acting)"]
        return [f"results: nothing executed ({rec.mode})"]
    lines = ["results" + (f" (logged at {_when(logged.done_at)}):" if logged.done_at else ":")]
    for r in logged.results:
        lines.append(f"  {r.action.summary()}: {r.status}")
        timing = [(label, value) for label, value in (
            ("command", r.command), ("acknowledged after", _secs(r.ack_s)), ("confirmed after", _secs(r.confirm_s)),
            ("executors after", r.executors_after)) if value is not None]
        lines += _pairs([*timing, ("detail", r.detail or "-")], indent=4)
        if r.figures:
            lines.append("    figures:")
            lines += _pairs([(k, _num(v) if isinstance(v, (int, float)) else json.dumps(v, default=str))
                             for k, v in r.figures.items()], indent=6)
            follow_up = follow_ups.get(str(r.figures.get("migration")))
            if isinstance(follow_up, Mapping):
                lines += ["    follow-up (seconds from the request):",
                          *(f"    {line}" for line in follow_up_lines(str(r.figures["migration"]), dict(follow_up),
                                                                       lambda t: f"at {_when(t)}"))]
            elif follow_up is not None:
                lines.append(f"    follow-up: {follow_up}")
    if not logged.results:
        lines.append("  (no action was carried out)")
    return lines


def _snapshot(snapshot: Snapshot | str | None) -> list[str]:
    if snapshot is None:
        return ["snapshot: not kept (only decisions with actions keep theirs, `action_log.snapshots_kept`)"]
    if isinstance(snapshot, str):
        return [f"snapshot: {snapshot}"]
    lines = ["snapshot:"]
    lines += _pairs([
        ("taken at", _when(snapshot.taken_at)), ("window", f"{_num(snapshot.window_s)} s"),
        ("executors", f"{len(snapshot.executors)} ({snapshot.cores} cores)"),
        ("trigger interval", _secs(snapshot.trigger_interval_s) or "-"),
        ("last batch", _secs(snapshot.batch_duration_s) or "-"),
    ], indent=2)
    rows = []
    for query, figures in query_figures(snapshot).items():
        backlog = "unknown" if figures["backlog"] is None else _num(figures["backlog"])
        rows.append([query, _num(figures["arrival_rate"]), backlog,
                     str(figures["operators"]), figures["parallelism"]])
    lines += ["", *(f"  {row}" for row in table_lines(
        ["QUERY", "ARRIVAL (rec/s)", "BACKLOG", "OPERATORS", "PARALLELISM"], rows))]
    return lines


def query_figures(snapshot: Snapshot) -> dict[str, dict[str, Any]]:
    """Per query of a (possibly merged) snapshot: arrival rate and backlog of its sources (backlog
    None when a source cannot tell), its operator count and the parallelism of each operator."""
    names = query_names(snapshot)
    out: dict[str, dict[str, Any]] = {
        q: {"arrival_rate": None, "backlog": 0.0, "operators": 0, "parallelism": []} for q in names}
    for op in snapshot.operators:
        try:
            query, local = split_operator(names, op.id)
        except KeyError:
            query, local = op.id.split(QUERY_SEPARATOR, 1)[0], op.id
            out.setdefault(query, {"arrival_rate": None, "backlog": 0.0, "operators": 0, "parallelism": []})
        figures = out[query]
        figures["operators"] += 1
        figures["parallelism"].append(f"{local}={op.parallelism}")
        if op.source:
            figures["arrival_rate"] = (figures["arrival_rate"] or 0.0) + (op.arrival_rate or 0.0)
            figures["backlog"] = None if op.backlog is None or figures["backlog"] is None \
                else figures["backlog"] + op.backlog
    for figures in out.values():
        if figures["arrival_rate"] is None:
            figures["backlog"] = None  # no source: nothing known of its input
        figures["parallelism"] = ", ".join(figures["parallelism"]) or "-"
    return out


def _pairs(pairs: list[tuple[str, object]], indent: int = 2) -> list[str]:
    if not pairs:
        return []
    width = max(len(label) for label, _v in pairs)
    return [f"{' ' * indent}{label.ljust(width)}  {value}" for label, value in pairs]


def _when(t: float | None) -> str:
    """UTC, as the daemon's log lines stamp their events."""
    if t is None:
        return "-"
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _secs(s: float | None) -> str | None:
    return None if s is None else f"{_num(s)} s"


def _num(x: object) -> str:
    if x is None:
        return "-"
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return str(x) if not isinstance(x, Mapping) else json.dumps(x, default=str)
    return str(x) if isinstance(x, int) else f"{x:.6g}"
