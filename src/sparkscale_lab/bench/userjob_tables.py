"""The pure side of `sparkscale bench userjob` (bench/userjob.py): which migrations to run in which
order, what one migration and one timed cycle left behind, and the tables and markdown made of
them. No Spark, no Redis, no ZooKeeper here, so that all of it is unit-tested."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sparkscale.actuators.migration import get_strategy
from sparkscale_lab.bench.markdown import markdown_table

LOW_PARTITIONS, HIGH_PARTITIONS = 4, 8
# ~0 s by construction, not worth a column: the journal's creation, and the step after the last one.
SKIPPED_PHASES = ("requested", "done")


# -- the schedule ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class MigrationStep:
    """One planned migration: `query` from `from_partitions` to `to_partitions` with `strategy`, the
    `round`-th (0-based) of that strategy on that query."""

    strategy: str
    query: str
    round: int
    from_partitions: int
    to_partitions: int


def alternate(current: int, low: int = LOW_PARTITIONS, high: int = HIGH_PARTITIONS) -> int:
    """The next target of a 4 -> 8 -> 4 ... alternation: `high` unless the query is there already
    (a query left elsewhere by a failed migration goes back into the alternation, to `high`)."""
    return low if current == high else high


def schedule(strategies: Sequence[str], queries: Sequence[str], repeat: int,
             start: Mapping[str, int] | None = None) -> list[MigrationStep]:
    """Every strategy in turn, `repeat` rounds each; a round migrates each query once, queries
    interleaved so that one rests while the other migrates; each query alternates 4 -> 8 -> 4 ...
    carrying on from where the previous strategy left it (`start`: partitions at first, default 4)."""
    current = {q: (start or {}).get(q, LOW_PARTITIONS) for q in queries}
    steps = []
    for strategy in strategies:
        for r in range(repeat):
            for q in queries:
                to = alternate(current[q])
                steps.append(MigrationStep(strategy, q, r, current[q], to))
                current[q] = to
    return steps


# -- what was measured ----------------------------------------------------------------------------

@dataclass
class MigrationRecord:
    """One migration as it went: `status` done | failed | refused (the runner said no before
    starting anything); `phases_s` from its journal (`Journal.phase_durations()`)."""

    strategy: str
    query: str
    round: int
    from_partitions: int
    to_partitions: int
    status: str
    detail: str = ""
    migration_id: str | None = None
    phases_s: dict[str, float] = field(default_factory=dict)
    total_s: float | None = None  # request to done, from the journal
    settled_s: float | None = None  # done to the first progress on the new partitions; None: not seen

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MigrationRecord:
        return cls(**data)


@dataclass(frozen=True)
class CycleSample:
    """One timed monitor + decide for one app: collect_snapshots, then decide_app (empty history)."""

    app: str
    queries: int
    collect_s: float
    decide_s: float
    host_sample_s: float  # the host sample's own wait, inside collect_s (snapshot extensions.host)
    error: str | None = None

    @property
    def cycle_s(self) -> float:
        return self.collect_s + self.decide_s

    @property
    def without_host_s(self) -> float:
        return self.cycle_s - self.host_sample_s

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CycleSample:
        return cls(**data)


# -- statistics -----------------------------------------------------------------------------------

def median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest rank: the smallest value with at least a fraction `q` of the values at or below it
    (p90 of 20 values is the 18th smallest); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


# -- tables ---------------------------------------------------------------------------------------

def phase_columns(strategies: Sequence[str]) -> list[str]:
    """One column per phase of the strategies' phase tables; a phase one strategy has and an earlier
    one has not goes right after its predecessor in its own table (ccr's `captured` after `stopped`)."""
    columns: list[str] = []
    for s in strategies:
        previous: str | None = None
        for phase in get_strategy(s).phases:
            if phase in SKIPPED_PHASES:
                continue
            if phase not in columns:
                columns.insert(columns.index(previous) + 1 if previous in columns else len(columns), phase)
            previous = phase
    return columns


def phase_orders(strategies: Sequence[str]) -> list[str]:
    """Each strategy's own phase order (the table's columns are shared, not a sequence)."""
    return [f"{s}: {' -> '.join(p for p in get_strategy(s).phases if p not in SKIPPED_PHASES)}" for s in strategies]


def phase_table(records: Sequence[MigrationRecord], strategies: Sequence[str], queries: Sequence[str]) -> str:
    """Strategy x phase: the median seconds of each phase over the strategy's done migrations, per
    query and pooled over the queries; n counts them, failed those not done (not in the medians).
    "n/a": not a phase of that strategy; "-": no figure."""
    columns = phase_columns(strategies)
    header = ["strategy", "query", "n", *[f"{p} (s)" for p in columns], "total (s)", "failed"]
    rows = []
    for s in strategies:
        own = get_strategy(s).phases
        for q in [*queries, "pooled"]:
            mine = [r for r in records
                    if r.strategy == s and r.status != "refused" and (q in ("pooled", r.query))]
            done = [r for r in mine if r.status == "done"]
            cells = [_fmt(median([r.phases_s[p] for r in done if p in r.phases_s])) if p in own else "n/a"
                     for p in columns]
            total = _fmt(median([r.total_s for r in done if r.total_s is not None]))
            rows.append([s, q, str(len(done)), *cells, total, str(len(mine) - len(done))])
    return markdown_table(header, rows)


def refusals(records: Sequence[MigrationRecord]) -> list[str]:
    """One line per refused strategy: the queries it was refused for and the runner's reason."""
    by_strategy: dict[str, list[MigrationRecord]] = {}
    for r in records:
        if r.status == "refused":
            by_strategy.setdefault(r.strategy, []).append(r)
    return [f"{s}: refused for {', '.join(r.query for r in rs)}: {rs[0].detail}" for s, rs in by_strategy.items()]


def failures(records: Sequence[MigrationRecord]) -> list[str]:
    return [f"{r.strategy} {r.query} {r.from_partitions} -> {r.to_partitions} (round {r.round + 1}): "
            f"{r.status}: {r.detail}" for r in records if r.status not in ("done", "refused")]


@dataclass(frozen=True)
class CycleStats:
    app: str
    queries: int
    n: int
    errors: int
    cycle_median_s: float | None
    cycle_p90_s: float | None
    without_host_median_s: float | None
    without_host_p90_s: float | None
    host_sample_median_s: float | None
    collect_median_s: float | None
    decide_median_s: float | None


def cycle_stats(samples: Sequence[CycleSample], app: str) -> CycleStats:
    ok = [s for s in samples if s.app == app and s.error is None]
    cycle = [s.cycle_s for s in ok]
    bare = [s.without_host_s for s in ok]
    return CycleStats(app, max((s.queries for s in ok), default=0), len(ok),
                      sum(1 for s in samples if s.app == app and s.error is not None),
                      median(cycle), percentile(cycle, 0.9), median(bare), percentile(bare, 0.9),
                      median([s.host_sample_s for s in ok]), median([s.collect_s for s in ok]),
                      median([s.decide_s for s in ok]))


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or not b else f"{a / b:.2f}"


def cycle_table(samples: Sequence[CycleSample], apps: Sequence[str]) -> str:
    """Per app: median and p90 of monitor + decide, with and without the host sample's wait; then
    the ratio of the first app's figures to the second's (2 queries over 1)."""
    stats = [cycle_stats(samples, a) for a in apps]
    header = ["app", "queries", "n", "cycle median (s)", "cycle p90 (s)", "without host sample: median (s)",
              "p90 (s)", "host sample median (s)", "collect median (s)", "decide median (ms)", "errors"]
    rows = [[c.app, str(c.queries), str(c.n), _fmt(c.cycle_median_s, 3), _fmt(c.cycle_p90_s, 3),
             _fmt(c.without_host_median_s, 3), _fmt(c.without_host_p90_s, 3), _fmt(c.host_sample_median_s, 3),
             _fmt(c.collect_median_s, 3), _fmt(None if c.decide_median_s is None else c.decide_median_s * 1000, 1),
             str(c.errors)] for c in stats]
    if len(stats) == 2:
        a, b = stats
        rows.append([f"ratio {a.app} / {b.app}", "", "", _ratio(a.cycle_median_s, b.cycle_median_s),
                     _ratio(a.cycle_p90_s, b.cycle_p90_s), _ratio(a.without_host_median_s, b.without_host_median_s),
                     _ratio(a.without_host_p90_s, b.without_host_p90_s), "", _ratio(a.collect_median_s,
                     b.collect_median_s), _ratio(a.decide_median_s, b.decide_median_s), ""])
    return markdown_table(header, rows)


# -- the oracle's verdict, and the whole run ------------------------------------------------------

@dataclass(frozen=True)
class OutputCheck:
    """What clickcheck found at the end of the run, by key (a window of page_windows, a user of
    user_totals), not by record: a record lost or counted twice shows as a wrong count."""

    ok: bool
    summary: str
    input_records: int = 0
    windows_lost: int = 0
    windows_duplicated: int = 0
    windows_wrong: int = 0
    windows_extra: int = 0
    users_lost: int = 0
    users_duplicated: int = 0
    users_wrong: int = 0
    users_extra: int = 0
    users_regressed: int = 0
    input_problems: int = 0

    @property
    def lost(self) -> int:
        return self.windows_lost + self.users_lost

    @property
    def duplicated(self) -> int:
        return self.windows_duplicated + self.users_duplicated

    @property
    def wrong(self) -> int:
        return self.windows_wrong + self.windows_extra + self.users_wrong + self.users_extra + self.users_regressed

    def line(self) -> str:
        head = "output verified" if self.ok else "**DATA LOST OR DUPLICATED: THE OUTPUT DOES NOT MATCH THE INPUT**"
        return (f"{head}: lost {self.lost} ({self.windows_lost} windows, {self.users_lost} users), duplicated "
                f"{self.duplicated} ({self.windows_duplicated} windows, {self.users_duplicated} users), wrong or "
                f"extra {self.wrong}, over {self.input_records} input records. {self.summary}")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> OutputCheck:
        return cls(**data)


@dataclass
class UserJobResults:
    """Everything one run of the benchmark measured; JSON as `dataclasses.asdict` of it."""

    command: str
    measured_at: str  # ISO 8601, UTC, when the run started
    machine: str
    spec: dict[str, Any]
    queries: list[str]
    strategies: list[str]  # those run (they can migrate a file-source query)
    refused_strategies: list[str]
    cycle_apps: list[str]  # [the 2-query app, the 1-query app]
    migrations: list[MigrationRecord] = field(default_factory=list)
    cycles: list[CycleSample] = field(default_factory=list)
    check: OutputCheck | None = None
    notes: list[str] = field(default_factory=list)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> UserJobResults:
        body = dict(data)
        body["migrations"] = [MigrationRecord.from_dict(m) for m in body.get("migrations", [])]
        body["cycles"] = [CycleSample.from_dict(c) for c in body.get("cycles", [])]
        body["check"] = OutputCheck.from_dict(body["check"]) if body.get("check") else None
        return cls(**body)


def render_markdown(results: UserJobResults) -> str:
    """The results page (docs/results/userjob.md): a loud line first if the output is wrong, the
    migration table, the cycle table, their method notes, the command and the machine."""
    spec = results.spec
    check = results.check
    lines: list[str] = []
    if check is None:
        lines += ["**The output was not verified (the run ended before the check).**", ""]
    elif not check.ok:
        lines += [check.line(), ""]
    lines += [f"Migration phases of the user-style script (`{spec['script_name']}`, app `{spec['app']}`), "
              "seconds, median over each strategy's done migrations, per query and pooled over both:", "",
              phase_table(results.migrations, results.strategies, results.queries), ""]
    lines += [f"- Refused (not counted): {line}" for line in refusals(results.migrations)]
    lines += [f"- Not done (not in the medians): {line}" for line in failures(results.migrations)]
    lines += [f"- Each query migrated {spec['repeat']} times per strategy, alternating "
              f"{LOW_PARTITIONS} -> {HIGH_PARTITIONS} -> {LOW_PARTITIONS} state partitions, queries interleaved, "
              "strategies in turn, under a steady load of "
              f"{spec['rate']} records/s in {spec['files_per_s']:g} files/s; through `daemon.manual.run_migration` "
              "under the app's leader lock, as `sparkscale migrate` does with no daemon leading. A phase's time runs "
              "from the previous phase's completion (journal `phase_durations()`); total: request to done; n/a: not "
              "a phase of that strategy. Phase "
              f"order: {'; '.join(phase_orders(results.strategies))}.",
              f"- Output: {check.line() if check else 'not verified'}", ""]
    lines += [f"Monitor + decide per cycle, {spec['cycles']} cycles per app, interleaved, same environment, "
              "same time:", "", cycle_table(results.cycles, results.cycle_apps), ""]
    lines += [f"- A cycle here: `collect_snapshots` (Spark REST, Redis, one host sample of "
              f"{spec['host_sample_s']:g} s, the same for both apps) then `decide_app` with an empty "
              f"`DecisionHistory` (policy `{spec['policy']}`); not the daemon's action log, status or metrics. "
              "\"Without host sample\" subtracts the sample's own wait as the snapshot records it. "
              f"`{results.cycle_apps[0]}` runs the script's 2 queries; `{results.cycle_apps[-1]}` the shipped "
              f"wordcount (1 query) under a constant {spec['wordcount_rate']} records/s; both trigger every "
              f"{spec['trigger_s']:g} s. p90: nearest rank.", *[f"- {note}" for note in results.notes], ""]
    lines += [f"Command: `{results.command}`", "", f"Measured {results.measured_at} on {results.machine}."]
    return "\n".join(lines) + "\n"
