"""State partition counts with many divisors: the two-tier scaling rule.

A query's state partitions are fixed between migrations while its executors come and go. With a
count that many core counts divide (12: 1, 2, 3, 4, 6, 12), executor changes alone keep the
partitions per core even, and a state migration is needed only when partitions per core leave a
band (`guards.partitions_per_core_min` .. `_max`). Pure arithmetic.
"""

from __future__ import annotations

import math


def divisor_count(n: int) -> int:
    """How many positive integers divide `n`."""
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    count = 0
    for d in range(1, math.isqrt(n) + 1):
        if n % d == 0:
            count += 1 if d * d == n else 2
    return count


def many_divisor_count(at_least: int, at_most: int | None = None) -> int:
    """The smallest count >= `at_least` with more divisors than every smaller count (a highly
    composite number: 1, 2, 4, 6, 12, 24, 36, 48, 60, 120, ...), or `at_least` itself when there is
    none up to `at_most`. For the cores an app may reach, so that each core count in its range gets
    an even share of partitions."""
    at_least = max(1, at_least)
    if at_most is not None and at_least > at_most:
        return at_least  # none in range; without counting the divisors of every number up to a huge ask
    limit = max(at_least, at_most if at_most is not None else 2 * at_least + 12)
    best = 0
    for n in range(1, limit + 1):
        d = divisor_count(n)
        if d > best:
            best = d
            if n >= at_least:
                return n
    return at_least


def partitions_per_core(partitions: int, cores: int) -> float:
    return partitions / max(1, cores)


def in_band(partitions: int, cores: int, low: float, high: float) -> bool:
    """Whether `partitions` over `cores` lies within [low, high] partitions per core."""
    return low <= partitions_per_core(partitions, cores) <= high
