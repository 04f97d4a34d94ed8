"""The configurations `sparkscale bench chaos --variants` runs the state-loss faults under, side by side.

Spark keeps one live copy of each state partition and reloads a lost one from the checkpoint; it
has no replica and no way to keep a warm standby of state without changing Spark
(notes: estorm-spark-facts.md, Q1 and Q3). So the variants are the levers that do exist: how the
checkpoint is written (what a reload copies and replays), and spare executor capacity (which takes
an executor's launch off the critical path, not the reload).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

DEFAULT = "default"
CHANGELOG_CONF = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"


@dataclass(frozen=True)
class Variant:
    """A configuration of the fault's app: `spark_conf` added to its own, and `extra_executors`
    added to its min, initial and max executors."""

    name: str
    what: str  # one line for results.md
    spark_conf: Mapping[str, str] = field(default_factory=dict)
    extra_executors: int = 0


VARIANTS: dict[str, Variant] = {v.name: v for v in (
    Variant(DEFAULT, "Spark 4.3.0's defaults: RocksDB state, changelog checkpointing off (every commit uploads a "
                     "snapshot, so a reload copies the latest snapshot and replays nothing)"),
    Variant("changelog", f"`{CHANGELOG_CONF}=true` in the app's spark_conf: a commit writes only a changelog "
                         "file and snapshots are uploaded in the background (minDeltasForSnapshot 10, maintenance "
                         "every 60 s), so a reload copies an older snapshot and replays the changelogs after it",
            spark_conf={CHANGELOG_CONF: "true"}),
    Variant("spare", "one executor more than the daemon's target: min_executors (and initial, max) raised by one "
                     "(3, 3, 4), so the target DS2 clamps to the range is one above the default run's. Why this "
                     "lever: Spark gives a lost partition's task to any live executor with a free slot once delay "
                     "scheduling (spark.locality.wait, 3 s per level) lets it through, so a running spare takes the "
                     "replacement executor's launch off the critical path; it does not remove the reload. It is a "
                     "standby executor, not standby state: Spark spreads the state partitions over every executor, "
                     "the spare included, and each lost one is still reloaded from the checkpoint. On this 2-core "
                     "machine the spare shares the cores with the others",
            extra_executors=1),
)}
VARIANT_NAMES: tuple[str, ...] = tuple(VARIANTS)


def get_variant(name: str) -> Variant:
    try:
        return VARIANTS[name]
    except KeyError:
        raise KeyError(f"unknown variant {name!r} (expected one of {', '.join(VARIANTS)})") from None


def run_label(fault: str, variant: str = DEFAULT) -> str:
    """A run's name in paths and file names: the fault, with its variant unless the default."""
    return fault if variant == DEFAULT else f"{fault}-{variant}"


def plan_runs(faults: tuple[str, ...], variants: tuple[str, ...],
              loses_executors: Mapping[str, bool]) -> list[tuple[str, str]]:
    """(fault, variant) per run, fault by fault: a fault that kills executors under each variant, any
    other fault once under the default (the variants change nothing it measures)."""
    runs: list[tuple[str, str]] = []
    for fault in faults:
        for variant in (variants if loses_executors.get(fault) else (DEFAULT,)):
            if (fault, variant) not in runs:
                runs.append((fault, variant))
    return runs
