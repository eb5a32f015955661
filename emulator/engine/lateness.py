"""How late a worker's ticks fire, as a small log-bucket histogram (sans-I/O: the worker feeds it
wall-clock lateness; the run's fidelity verdict reads p99 and max, divided by the TDF, against
DCQCN's own timers).

A tick is late by `fired - scheduled` wall seconds. Buckets are 10 per decade from 10 us to
100 s (quantiles within 26%); lateness below 10 us counts in the first bucket, and the maximum
is kept exactly.
"""

from __future__ import annotations

import math
from typing import Any

_FIRST_S = 1e-5
_PER_DECADE = 10
_BUCKETS = 7 * _PER_DECADE + 1  # 10 us .. 100 s, and one for anything later


class TickLateness:
    def __init__(self) -> None:
        self.counts = [0] * _BUCKETS
        self.ticks = 0
        self.max_s = 0.0

    def add(self, late_s: float) -> None:
        self.ticks += 1
        if late_s > self.max_s:
            self.max_s = late_s
        if late_s <= _FIRST_S:
            self.counts[0] += 1
            return
        index = int(math.log10(late_s / _FIRST_S) * _PER_DECADE) + 1
        self.counts[min(index, _BUCKETS - 1)] += 1

    def quantile_s(self, q: float) -> float:
        """The upper edge of the bucket holding the q-quantile (never above the maximum)."""
        if not self.ticks:
            return 0.0
        rank = math.ceil(q * self.ticks)
        seen = 0
        for index, count in enumerate(self.counts):
            seen += count
            if seen >= rank:
                edge = _FIRST_S * 10 ** (index / _PER_DECADE)
                return min(edge, self.max_s)
        return self.max_s

    def to_json(self) -> dict[str, Any]:
        return {"ticks": self.ticks, "p99_s": self.quantile_s(0.99), "max_s": self.max_s}
