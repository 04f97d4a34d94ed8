"""`policy`: which policy decides, its target utilisation and the band around it (policies/band.py),
and every policy's own section (config/sectioned.py)."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field, field_validator, model_validator

from sparkscale.config.base import _one_of
from sparkscale.config.memory import MemoryPolicyConfig
from sparkscale.config.sectioned import SectionedConfig
from sparkscale.registry import POLICIES, Registry

# The utilisation band's default edges around policy.target_utilization: [0.5, 0.9] around 0.8.
BAND_BELOW_TARGET = 0.3
BAND_ABOVE_TARGET = 0.1


class PolicyConfig(SectionedConfig):
    """`name` is a registered policy (sparkscale.policies); every policy's own settings are the
    section `policy.<its name>`, validated by the model the policy declares (`config_model`), so a
    new policy brings its settings with it. A section left out has its model's defaults."""

    registry: ClassVar[Registry[Any]] = POLICIES

    name: str = Field("ds2", description=(
        "Which policy decides: a registered policy (ds2, dhalion and threshold are built in)."))
    target_utilization: float = Field(0.8, ge=0.01, le=1, description=(  # below 1 %, every need overflows
        "Target utilisation of each operator instance, in (0, 1]; 1.0 gives DS2's formula exactly."))
    # policies/band.py; DS2 applies it. On by default so that an app one executor carried before a
    # load step goes back to one after it; a null edge is derived from the target.
    utilization_band: bool = Field(True, description=(
        "Keep a utilisation band around target_utilization: no change while the projected utilisation of "
        "the current cores is inside [utilization_min, utilization_max]; above it, scale to the target; "
        "below it, down to the fewest cores at most utilization_max busy. false = no band (every change of "
        "the target is acted on)."))
    utilization_min: float | None = Field(None, ge=0, le=1, examples=[0.5], description=(
        "Lower edge of the utilisation band, below target_utilization; null = the target minus 0.3 (0.5 "
        "around 0.8)."))
    utilization_max: float | None = Field(None, gt=0, le=1, examples=[0.9], description=(
        "Upper edge of the utilisation band, at least target_utilization; null = the target plus 0.1, at "
        "most 1 (0.9 around 0.8)."))
    memory: MemoryPolicyConfig = Field(default_factory=MemoryPolicyConfig, description=(  # config/memory.py
        "The executor memory recommendation (`policy.memory`)."))

    @field_validator("name")
    @classmethod
    def _registered(cls, value: str) -> str:
        return _one_of(value, sorted(POLICIES.names()))

    @model_validator(mode="after")
    def _band(self) -> PolicyConfig:
        band = self.band()
        if band is not None and not band[0] < self.target_utilization <= band[1]:
            raise ValueError(f"expected utilization_min < target_utilization <= utilization_max (got "
                             f"{band[0]:g}, {self.target_utilization:g}, {band[1]:g}); leave a bound null to "
                             f"derive it from the target, or utilization_band: false for no band")
        return self

    def band(self) -> tuple[float, float] | None:
        """[minimum, maximum] of the utilisation band, a null bound derived from the target (Flink's
        autoscaler keeps a band the same way: utilization.min/max around utilization.target); None
        when `utilization_band` is off."""
        if not self.utilization_band:
            return None
        target = self.target_utilization
        lo = self.utilization_min if self.utilization_min is not None else max(0.0, target - BAND_BELOW_TARGET)
        hi = self.utilization_max if self.utilization_max is not None else min(1.0, target + BAND_ABOVE_TARGET)
        return round(lo, 6), round(hi, 6)
