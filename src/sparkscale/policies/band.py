"""A utilisation band around the target (the stability idea of Flink's autoscaler, its
`utilization.min` / `utilization.max`): inside it nothing changes; above it the policy's target
holds; below it the app steps down to the fewest cores still under the band's top.

Why the top and not the target on the way down: at low load a micro-batch's fixed costs (task
launch, shuffle fetch) keep cores busy whatever the rate, so DS2's need at utilisation u hovers
around a whole core count (1.0 to 1.06 cores measured for the dag pipeline at 5 records/s on 2
executors) and rounds up to the count the app already has; the band's top gives the step down that
one executor carrying the load shows is safe, and the band keeps it from bouncing back up.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class UtilizationBand:
    """[minimum, maximum] projected utilisation of the app's cores within which no change is made."""

    minimum: float
    maximum: float

    def cores(self, target_cores: int, current_cores: int, busy_cores: float) -> tuple[int, str]:
        """The cores to plan given the policy's `target_cores` (at its target utilisation), the
        app's `current_cores` and `busy_cores` (the cores the load keeps fully busy), with a line
        saying why."""
        current = max(1, current_cores)
        now = busy_cores / current
        if now > self.maximum:
            return target_cores, (f"utilisation band [{self.minimum:g}, {self.maximum:g}]: {now:.2f} on "
                                  f"{current} cores is above it -> the target, {target_cores} cores")
        if now < self.minimum:
            # The fewest cores that keep the projected utilisation at or under the band's top.
            fewest = max(1, math.ceil(busy_cores / self.maximum - 1e-9))
            cores = min(current_cores, fewest)
            return cores, (f"utilisation band [{self.minimum:g}, {self.maximum:g}]: {now:.2f} on {current} "
                           f"cores is below it -> the fewest cores at most {self.maximum:g} busy: "
                           f"ceil({busy_cores:.2f} / {self.maximum:g}) = {fewest}, so {cores}")
        return current_cores, (f"utilisation band [{self.minimum:g}, {self.maximum:g}]: {now:.2f} on "
                               f"{current} cores is inside it -> no change")
