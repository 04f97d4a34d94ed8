"""Renderings for the operator's commands (`status`, `actions`, `blocklist`): text tables and JSON.

Pure: the CLI reads Redis and ZooKeeper and hands the records here.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import JsonValue

from sparkscale.actuators.migration import operator_commands
from sparkscale.bounded import clip
from sparkscale.daemon.action_log import BlocklistEntry, LoggedDecision
from sparkscale.daemon.status import AppStatus, age
from sparkscale.model.journal import Journal
from sparkscale.model.plan import table_lines
from sparkscale.monitors.migration_followup import FIGURES, MEASURED, PENDING

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*(s|m|h|d)$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_since(text: str, now: float) -> float:
    """`30s`, `15m`, `2h`, `1d` (ago) or an ISO 8601 time -> seconds since the epoch."""
    match = _DURATION.match(text.strip())
    if match:
        return now - float(match.group(1)) * _UNIT_S[match.group(2)]
    try:
        return datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        raise ValueError(f"--since {text!r}: expected a duration such as 30s, 15m, 2h, 1d or an ISO time "
                         f"such as 2026-11-22T10:00") from None


@dataclass(frozen=True)
class AppLine:
    """One managed app in `sparkscale status`."""

    app: str
    leader: str | None
    view: AppStatus | None  # the leader's own report if there is one, else the freshest
    attention: str | None = None  # its migration needs the operator: where, why, the commands that go on

    def to_dict(self) -> dict[str, JsonValue]:
        return {"app": self.app, "leader": self.leader, "view": self.view.to_dict() if self.view else None,
                "migration_needs_attention": self.attention}


def pick_view(leader: str | None, views: Sequence[AppStatus]) -> AppStatus | None:
    for view in views:
        if view.daemon == leader:
            return view
    return views[0] if views else None


def status_table(lines: Sequence[AppLine], now: float) -> str:
    rows = []
    for line in lines:
        v = line.view
        parallelism = "-"
        if v and v.parallelism:
            parallelism = ",".join(f"{op}={n}" for op, n in v.parallelism.items())
        rows.append([
            line.app,
            line.leader or "none",
            "-" if v is None else f"{v.result} ({age(v.cycle_at, now)})",
            "-" if v is None or v.executors is None else str(v.executors),
            parallelism,
            "-" if v is None or not v.last_decision else f"{v.last_decision} ({age(v.last_decision_at, now)})",
        ])
    table = table_lines(["APP", "LEADER", "LAST CYCLE", "EXECUTORS", "PARALLELISM", "LAST DECISION"], rows)
    # Each query's own figures under the table: arrival and its estimate, backlog (or unknown), partitions.
    queries = [f"  {line.app}/{q.summary()}" for line in lines if line.view for q in line.view.queries]
    attention = [f"  {line.attention}" for line in lines if line.attention]
    warnings = [f"  {line.app}: {w}" for line in lines if line.view for w in line.view.warnings]
    return "\n".join([*table, *(["", "queries:", *queries] if queries else []),
                      *(["", "migrations needing attention:", *attention] if attention else []),
                      *(["", "warnings:", *warnings] if warnings else [])])


def decision_row(d: LoggedDecision) -> list[str]:
    rec = d.decision
    when = datetime.fromtimestamp(rec.decided_at).strftime("%Y-%m-%d %H:%M:%S")
    actions = "; ".join(a.summary() for a in rec.plan.actions) or "none"
    if rec.mode in ("acted", "manual"):
        if d.results is None:
            done = "in progress (or interrupted)"
        else:
            done = "; ".join(r.status + (f" in {r.confirm_s:g} s" if r.confirm_s is not None else "")
                             for r in d.results)
    else:
        done = rec.mode
    why = rec.plan.actions[0].reason if rec.plan.actions else ""
    expected = "-"
    if rec.expected is not None:
        e = rec.expected
        expected = ("keeps up" if e.metric == "keeps_up" else f"{e.metric} {e.before:.3g} -> {e.after:.3g}")
    actual = "-"
    if d.outcome is not None:
        o = d.outcome
        observed = "" if o.observed is None else f" ({o.observed:.3g})"
        actual = ("met" if o.met else "NOT met, blocked") + observed
    elif rec.expected is not None and d.results and any(r.status == "done" for r in d.results):
        actual = "pending"
    return [when, rec.app, rec.policy, rec.diagnosis or "-", actions, done, clip(why, 60), expected, actual]


def actions_table(decisions: Sequence[LoggedDecision]) -> str:
    if not decisions:
        return "no decisions logged in that span"
    return "\n".join(table_lines(["WHEN", "APP", "POLICY", "DIAGNOSIS", "ACTION", "DONE", "WHY", "EXPECTED",
                                  "ACTUAL"], [decision_row(d) for d in decisions]))


def blocklist_table(entries: Sequence[BlocklistEntry], now: float) -> str:
    if not entries:
        return "the blocklist is empty"
    rows = [[e.blocked.app, e.blocked.diagnosis, e.blocked.action_type,
             f"{max(e.blocked.until - now, 0):.0f} s", e.decision_id, clip(e.reason, 70)] for e in entries]
    return "\n".join(table_lines(["APP", "DIAGNOSIS", "ACTION", "EXPIRES IN", "DECISION", "REASON"], rows))


def migration_dict(journal: Journal, follow_up: dict[str, Any] | None = None) -> dict[str, JsonValue]:
    """One journaled migration for `migrate --list --json`: where it is, if open how to go on, and
    its follow-up figures (`migration_followup.shown`) if it has them."""
    resume, abort = operator_commands(journal)
    return {"app": journal.app, "id": journal.id, "query": journal.query, "strategy": journal.strategy,
            "from_partitions": journal.from_partitions, "to_partitions": journal.to_partitions,
            "status": journal.status, "phase_reached": journal.phase_reached, "next": journal.next,
            "requested_at": journal.requested_at, "detail": journal.detail,
            "commands": {"resume": resume, "abort": abort} if journal.open else None,
            **({"follow_up": follow_up} if follow_up is not None else {})}


def migrations_table(journals: Sequence[Journal], now: float,
                     follow_ups: dict[str, dict[str, Any] | None] | None = None) -> str:
    """`sparkscale migrate --list`: journaled migrations that are not done (and done ones with
    follow-up figures), how to go on, and the follow-up figures."""
    if not journals:
        return "no journaled migration that is not done"
    rows = [[j.app, j.id, j.query, f"{j.from_partitions} -> {j.to_partitions}", j.strategy, j.status,
             j.phase_reached or "-", j.next, age(j.requested_at, now), clip(j.detail or "-", 60)] for j in journals]
    table = table_lines(["APP", "MIGRATION", "QUERY", "PARTITIONS", "STRATEGY", "STATUS", "REACHED", "AT",
                         "REQUESTED", "DETAIL"], rows)
    hints = [f"  {j.id}: {' | '.join(operator_commands(j))}" for j in journals if j.open]
    figures = [line for migration, f in (follow_ups or {}).items() if f
               for line in follow_up_lines(migration, f, lambda t: age(t, now))]
    return "\n".join([*table, *(["", "to go on:", *hints] if hints else []),
                      *(["", "follow-up figures (seconds from the request):", *figures] if figures else [])])


def follow_up_lines(migration: str, follow_up: dict[str, Any],
                    when: Callable[[float | None], str]) -> list[str]:
    """A migration's follow-up figures: recorded (`when(measured_at)`: "12 s ago", "at <UTC>"), or
    measured now (provisional: more may come)."""
    status = follow_up.get("status")
    if status == MEASURED:
        how = f"measured {when(follow_up.get('measured_at'))}"
    elif status == PENDING:
        how = f"pending ({follow_up.get('error', 'not measured yet')})"
    elif status == "provisional":
        how = "provisional, measured now from the progress history (more may come; not recorded yet)"
    else:
        how = f"{status} from the progress history (final, not recorded yet)"
    values = ", ".join(f"{k} {'-' if follow_up[k] is None else follow_up[k]}" for k in FIGURES if k in follow_up)
    lines = [f"  {migration} {how}" + (f": {values}" if values else "")]
    if follow_up.get("not_measured"):
        lines.append(f"    not measured: {follow_up['not_measured']}")
    return lines


