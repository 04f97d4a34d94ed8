"""`guards`: the limits every policy's plan passes before it is carried out (policies/guards.py).
Apart from config/sections.py so that the guard settings can grow without that module passing
400 lines; `sparkscale.config` and `config.sections` re-export it."""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from sparkscale.config.memory import MemoryGuardsConfig
from sparkscale.config.periods import Period, PeriodError, parse_period


class GuardsConfig(MemoryGuardsConfig):  # its memory settings: config/memory.py
    """Limits on every policy's plan (sparkscale.policies.guards). The cooldown after an action and
    the stabilisation after a migration are `loop.cooldown_s` and `loop.stabilization_s`."""

    # Scale down only after every recommendation for this long was below the current count, and then
    # to the largest of them (0 = scale down at once).
    scale_down_delay_s: float = Field(120.0, ge=0)
    # One step changes the executor count by at most these factors (x up, / down), and by at least 1.
    # Up: none by default (null): a policy's computed target is reached in one step.
    max_scale_up_factor: float | None = Field(None, ge=1)
    max_scale_down_factor: float = Field(2.0, ge=1)
    # Two-tier scaling: a query's state partitions are migrated only when its partitions per core
    # on the planned executors would leave [min, max] (policies/two_tier.py).
    partitions_per_core_min: float = Field(1.0, gt=0)
    partitions_per_core_max: float = Field(12.0, gt=0)
    # Spread a stateful app's executors over the workers (policies/spread.py): one replace_executor
    # off a worker holding more than ceil(n / w) of them, in a cycle that changes nothing else ...
    spread_executors: bool = True
    # ... and, after a move that left the counts as they were (the master placed the replacement on
    # the crowded worker again), no further move for this long, in seconds.
    spread_hold_s: float = Field(600.0, ge=0)
    # Start-up grace (policies/startup_grace.py): no scaling decision rests on the first this many
    # batches of a new or restarted query's run (they pay for the start: state loading, code
    # generation, the input that waited; the demo's first 20 s went 1 -> 2 -> 1 -> 3 -> 5 -> 1
    # executors on them). 0: off.
    startup_grace_batches: int = Field(3, ge=0, le=10_000)
    # No scale-down while the source backlog is above backlog_slo_s seconds of input, or above zero
    # and falling (draining: the spare cores are what drains it; policies/draining.py). Off by
    # default, as before.
    no_scale_down_while_draining: bool = False
    # The backlog SLO that guard holds to, in seconds of input waiting (the default is `sparkscale
    # bench scaling`'s --slo-backlog-s); read only while no_scale_down_while_draining is on.
    backlog_slo_s: float = Field(10.0, gt=0)
    # At most this many reversals of the executor count's direction within the last hour; at the
    # cap, a change that would reverse it again is held (policies/direction_cap.py). Null, the
    # default: no cap, as before.
    max_direction_changes_per_hour: int | None = Field(None, ge=0)
    # Windows in which no scaling action is taken (warnings still pass), in UTC, such as
    # "Sat 00:00-06:00", "daily 23:30-00:30" or "Mon-Fri 12:00-13:00" (config/periods.py;
    # policies/excluded_periods.py). Empty, the default: none, as before.
    excluded_periods: list[str] = Field(default_factory=list)
    # Ineffective scaling (policies/ineffective.py): when a query's last judged scale-up brought
    # less than this fraction of the capacity gain expected of it, further scale-ups of that query
    # are held (with a warning) until the arrival rate has moved by more than
    # ineffective_load_change (a share: 0.2 = 20 %) or ineffective_hold_s have passed since that
    # scale-up was judged. Null, the default: off, as before.
    ineffective_scale_up_fraction: float | None = Field(None, gt=0, le=1)
    ineffective_hold_s: float = Field(600.0, ge=0)
    ineffective_load_change: float = Field(0.2, gt=0)

    @field_validator("excluded_periods")
    @classmethod
    def _periods(cls, value: list[str]) -> list[str]:
        for i, text in enumerate(value):
            try:
                parse_period(text)
            except PeriodError as exc:
                raise ValueError(f"excluded_periods[{i}] = {text!r}: {exc}") from None
        return value

    @property
    def periods(self) -> tuple[Period, ...]:
        """`excluded_periods` read (each was checked when the config was validated)."""
        return tuple(parse_period(text) for text in self.excluded_periods)

    @model_validator(mode="after")
    def _band(self) -> GuardsConfig:
        # An empty band would migrate on every plan.
        if self.partitions_per_core_min > self.partitions_per_core_max:
            raise ValueError(f"partitions_per_core_min ({self.partitions_per_core_min:g}) is above "
                             f"partitions_per_core_max ({self.partitions_per_core_max:g})")
        return self
