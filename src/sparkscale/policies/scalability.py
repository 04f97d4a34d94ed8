"""The observed scalability coefficient of a query: how much of the capacity a scale-up was
expected to add actually came (FLINK-30571, ContTune): learnt from judged scale-ups and used in the
next decision, so that a query that scales sub-linearly is given the cores it really needs.

Pure: the daemon records a `ScalingObservation` when it judges a scale-up; the policy reads them
from the decision history.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from sparkscale.policies.history import DecisionHistory

MIN_OBSERVATIONS = 3  # FLINK-30571's default: no coefficient from fewer judged scale-ups
RECENT = 5  # the newest observations the coefficient is taken from


@dataclass(frozen=True)
class Coefficient:
    value: float  # in [minimum, 1]
    observations: int
    raw: float  # the median gain ratio before the bounds

    def explain(self) -> str:
        return (f"observed scalability coefficient {self.value:.2f} (median gain ratio {self.raw:.2f} of the last "
                f"{self.observations} judged scale-ups, bounded to [.., 1])")


def coefficient(history: DecisionHistory, query: str | None, minimum: float = 0.5,
                min_observations: int = MIN_OBSERVATIONS) -> Coefficient | None:
    """The query's coefficient, or None with fewer than `min_observations` judged scale-ups."""
    ratios = [o.gain_ratio for o in history.scalability
              if (query is None or o.query in (None, query)) and o.gain_ratio is not None]
    if len(ratios) < min_observations:
        return None
    recent = ratios[-RECENT:]
    raw = statistics.median(recent)
    # Bounded: a noisy window must neither make a scale-up huge nor promise more than linear scaling.
    return Coefficient(min(1.0, max(minimum, raw)), len(recent), raw)


def scaled_cores(needed: int, current: int, coeff: Coefficient | None) -> int:
    """Cores to ask for when `needed` assumes linear scaling: the added cores divided by the
    coefficient (a query that got 0.5 of each added core's capacity needs twice as many)."""
    if coeff is None or needed <= current:
        return needed
    added = needed - current
    return current + max(added, math.ceil(added / coeff.value - 1e-9))
