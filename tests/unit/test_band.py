"""The utilisation band (policies/band.py) and DS2 applying it."""

from __future__ import annotations

import pytest

from sparkscale.config import ConfigError
from sparkscale.config.loading import load_config
from sparkscale.policies.band import UtilizationBand

BAND = UtilizationBand(0.5, 0.9)


def test_inside_the_band_nothing_changes_even_when_the_target_differs():
    # 1.4 busy cores on 2: 0.7, inside [0.5, 0.9]; the target at 0.8 would ask ceil(1.75) = 2 anyway,
    # and at 0.6 busy on 2 it asks 1: held.
    assert BAND.cores(2, 2, 1.4)[0] == 2
    assert BAND.cores(1, 2, 1.2)[0] == 2


def test_above_the_band_the_target_holds():
    cores, why = BAND.cores(4, 2, 2.5)
    assert cores == 4 and "above" in why


def test_below_the_band_steps_down_to_the_fewest_cores_under_its_top():
    # The measured low-load edge: 1.04 cores needed at 0.8 (0.83 busy) on 2 cores; the target rounds
    # up to 2, the band's top gives 1.
    cores, why = BAND.cores(2, 2, 1.04 * 0.8)
    assert cores == 1 and "ceil(0.83 / 0.9) = 1" in why
    # From far above: 8 cores, 1.5 busy -> ceil(1.5 / 0.9) = 2.
    assert BAND.cores(2, 8, 1.5)[0] == 2


def test_a_step_down_is_never_a_step_up():
    assert BAND.cores(1, 1, 0.1)[0] == 1


@pytest.mark.parametrize(("lo", "target", "hi"), [(0.8, 0.8, 0.9), (0.5, 0.8, 0.7), (0.9, 0.8, "null")])
def test_the_config_refuses_a_band_that_does_not_hold_the_target(lo, target, hi):
    sets = [f"policy.target_utilization={target}", f"policy.utilization_min={lo}",
            f"policy.utilization_max={hi}"]
    with pytest.raises(ConfigError, match="utilization"):
        load_config(None, sets)


def test_the_band_is_on_by_default_with_bounds_derived_from_the_target():
    assert load_config(None, []).policy.band() == (0.5, 0.9)
    assert load_config(None, ["policy.target_utilization=1.0"]).policy.band() == (0.7, 1.0)
    assert load_config(None, ["policy.utilization_max=0.95"]).policy.band() == (0.5, 0.95)
    assert load_config(None, ["policy.utilization_band=false"]).policy.band() is None


def _low_load(executors: int):
    from tests.unit.test_ds2 import LECTURE_EDGES, inst, op, snapshot
    # 10 rec/s; o1 takes 12 records per second of useful time, o2 is nearly free: at u = 0.8 they need
    # 10 / (0.8 x 12) + a little = just over one core, on 4 and 2 partitions.
    return snapshot([op("src", 1, [inst(10, 10, 1)], arrival=10),
                     op("o1", 4, [inst(3, 3, 0.25)] * 4),
                     op("o2", 2, [inst(5, 0, 0.001)] * 2)], LECTURE_EDGES, executors=executors)


def _decide(snap, **band):
    from sparkscale.config import AppConfig, PolicyConfig
    from sparkscale.policies.ds2 import Ds2Policy
    from sparkscale.policies.history import DecisionHistory
    cfg = PolicyConfig(target_utilization=0.8, **(band or {"utilization_band": False}))
    return Ds2Policy().decide(snap, DecisionHistory.empty(), cfg, AppConfig(name="app", max_executors=8))


def test_ds2_without_a_band_keeps_two_executors_at_the_low_load_edge():
    plan = _decide(_low_load(2))
    assert not [a for a in plan.actions if a.type == "scale_executors"]


def test_ds2_with_a_band_steps_down_at_the_low_load_edge_and_then_holds():
    band = {"utilization_min": 0.5, "utilization_max": 0.9}
    plan = _decide(_low_load(2), **band)
    [scale] = [a for a in plan.actions if a.type == "scale_executors"]
    assert (scale.from_, scale.to) == (2, 1)
    assert any("below it" in line for line in plan.explanation)
    # On 1 executor the same load is inside the band (0.84): no bounce back up.
    held = _decide(_low_load(1), **band)
    assert not [a for a in held.actions if a.type == "scale_executors"]
    assert any("inside it" in line for line in held.explanation)
