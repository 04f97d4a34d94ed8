"""`guards`: the limits every policy's plan passes before it is carried out (policies/guards.py).
Apart from config/sections.py so that the guard settings can grow without that module passing
400 lines; `sparkscale.config` and `config.sections` re-export it."""

from __future__ import annotations

from pydantic import Field, model_validator

from sparkscale.config.memory import MemoryGuardsConfig
from sparkscale.config.periods import ExcludedPeriods


class GuardsConfig(MemoryGuardsConfig):  # its memory settings: config/memory.py
    """Limits on every policy's plan (sparkscale.policies.guards). The cooldown after an action and
    the stabilisation after a migration are `loop.cooldown_s` and `loop.stabilization_s`."""

    scale_down_delay_s: float = Field(120.0, ge=0, description=(
        "Scale down only after every recommendation for this many seconds was below the current count, and "
        "then to the largest of them (0 = at once)."))
    max_scale_up_factor: float | None = Field(None, ge=1, examples=[2.0], description=(
        "One step multiplies the executor count by at most this factor (and adds at least 1); null = no cap, "
        "a policy's computed target is reached in one step."))
    max_scale_down_factor: float = Field(2.0, ge=1, description=(
        "One step divides the executor count by at most this factor (and removes at least 1)."))
    # policies/two_tier.py
    partitions_per_core_min: float = Field(1.0, gt=0, description=(
        "Two-tier scaling: a query's state partitions are migrated only when its partitions per core on the "
        "planned executors would leave [partitions_per_core_min, partitions_per_core_max]."))
    partitions_per_core_max: float = Field(12.0, gt=0, description=(
        "The upper edge of that band (at least partitions_per_core_min)."))
    # policies/spread.py; the standalone master picks the new executor's worker (spreadOutApps).
    spread_executors: bool = Field(True, description=(
        "Spread a stateful app's executors over the workers: when a worker holds more than ceil(n / w) of the "
        "app's n executors and another has room, replace the newest one on the crowded worker (one a cycle, "
        "only in a cycle whose plan changes nothing else). Needs loop.cluster_view."))
    spread_hold_s: float = Field(600.0, ge=0, description=(
        "After a move that left the counts as they were (the master placed the replacement on the crowded "
        "worker again), no further move for this many seconds."))
    # policies/startup_grace.py; the demo's first 20 s went 1 -> 2 -> 1 -> 3 -> 5 -> 1 executors on them.
    startup_grace_batches: int = Field(3, ge=0, le=10_000, description=(
        "No scaling decision rests on the first this many batches of a new or restarted query's run (they "
        "pay for the start: state loading, code generation, the input that waited); 0 = off."))
    # policies/draining.py
    no_scale_down_while_draining: bool = Field(False, description=(
        "No scale-down while the source backlog is above backlog_slo_s seconds of input, or falling while above "
        "the few batches' worth of arrivals a healthy source always has waiting (draining: the spare cores are "
        "what drains it)."))
    backlog_slo_s: float = Field(10.0, gt=0, description=(  # `sparkscale bench scaling`'s --slo-backlog-s
        "The backlog SLO no_scale_down_while_draining and idle_executors_task_time_fraction hold to, in seconds "
        "of input waiting."))
    # policies/idle_executors.py
    idle_executors_task_time_fraction: float | None = Field(None, gt=0, le=1, examples=[0.5], description=(
        "Hold a scale-up while the app's executors ran tasks under this fraction of the window and the backlog "
        "is within backlog_slo_s seconds of input: the query then waits on something more executors do not "
        "speed up (its driver between batches, a per-task fixed cost, one long task); null = off."))
    # policies/direction_cap.py
    max_direction_changes_per_hour: int | None = Field(None, ge=0, examples=[4], description=(
        "At most this many reversals of the executor count's direction within the last hour; at the cap, a "
        "change that would reverse it again is held. null = no cap."))
    # config/periods.py; policies/excluded_periods.py
    excluded_periods: ExcludedPeriods = Field(default_factory=list, examples=[["Sat 00:00-06:00", "daily 23:30-00:30"]],
                                        description=(
        "Windows in which no scaling action is taken for any app (warnings still pass): `<days> HH:MM-HH:MM "
        "[ZONE]` with days daily, a day (Sat), a range (Mon-Fri) or a comma list, and ZONE an IANA time zone "
        "(UTC when left out); [] = none. An app's own apps[].excluded_periods add to these."))
    # policies/ineffective.py
    ineffective_scale_up_fraction: float | None = Field(None, gt=0, le=1, examples=[0.3], description=(
        "When a query's last judged scale-up brought less than this fraction of the capacity gain expected "
        "of it, hold further scale-ups of that query (with a warning) until the arrival rate moves by more "
        "than ineffective_load_change or ineffective_hold_s passed; null = off."))
    ineffective_hold_s: float = Field(600.0, ge=0, description=(
        "How long, in seconds after the scale-up was judged, ineffective scaling holds further scale-ups."))
    ineffective_load_change: float = Field(0.2, gt=0, description=(
        "A change of the arrival rate by more than this share (0.2 = 20 %) ends the hold of ineffective scaling."))

    @model_validator(mode="after")
    def _band(self) -> GuardsConfig:
        # An empty band would migrate on every plan.
        if self.partitions_per_core_min > self.partitions_per_core_max:
            raise ValueError(f"partitions_per_core_min ({self.partitions_per_core_min:g}) is above "
                             f"partitions_per_core_max ({self.partitions_per_core_max:g})")
        return self
