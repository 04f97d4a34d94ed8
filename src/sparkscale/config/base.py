"""What every config section shares: unknown keys are errors, values frozen; registered names checked."""

from __future__ import annotations

import typing

from pydantic import BaseModel, ConfigDict


class ConfigSection(BaseModel):
    """A section of the config file: unknown keys are errors, values are frozen, numbers finite
    (YAML's .inf and an overflowing 1e400 are refused, not taken as "never"). Policies, actuators
    and strategies that bring settings of their own derive their section models from it."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


_Section = ConfigSection


def _one_of(value: str, known: typing.Iterable[str]) -> str:
    """`value` if it is one of the registered names `known`, else a ValueError listing them."""
    names = tuple(known)
    if value not in names:
        raise ValueError(f"expected one of {', '.join(repr(n) for n in names)}")
    return value
