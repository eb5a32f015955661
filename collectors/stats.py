"""The statistics every report uses, with the method stated: nearest-rank percentiles and the
population coefficient of variation.

Percentile (nearest-rank, as in NIST's definition and Hyndman & Fan's type 1): the smallest
sample value such that at least p percent of the samples are less than or equal to it, i.e. the
sorted sample at 1-based rank ceil(p/100 * N); p = 0 gives the minimum. It always returns a value
that was measured, which matters for tails (p99.9 of FCTs is a real flow's FCT).
CV = population standard deviation (ddof = 0) / mean.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence


def percentile_nearest_rank(values: Iterable[float], p: float) -> float | None:
    """Nearest-rank percentile of `values` (p in 0..100); None for no values."""
    if not 0.0 <= p <= 100.0:
        raise ValueError(f"percentile p must be within 0..100, got {p}")
    ordered = sorted(values)
    if not ordered:
        return None
    return ordered[nearest_rank(p, len(ordered)) - 1]


def nearest_rank(p: float, n: int) -> int:
    """The 1-based rank of the nearest-rank p-th percentile among n >= 1 sorted values."""
    # Rounded before ceil so 99.9% of 1000 is rank 999, not 1000 (99.9/100*1000 = 999.0000000000001).
    return max(1, math.ceil(round(p * n / 100.0, 9)))


def mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def coefficient_of_variation(values: Sequence[float]) -> float | None:
    """Population standard deviation over mean; None for no values or a zero mean."""
    m = mean(values)
    if m is None or m == 0.0:
        return None
    variance = sum((v - m) ** 2 for v in values) / len(values)
    return math.sqrt(variance) / m
