"""One-way latency of data packets: a log-bucketed histogram per QP, merged per traffic class.

Every data packet carries its send time (CLOCK_REALTIME nanoseconds, stamped by the sender
when its burst leaves; emulator.transport.burst_wire) and the receiver's kernel stamps its
arrival (SO_TIMESTAMPNS): their difference divided by the TDF is the packet's one-way latency in
the target timescale. Both clocks are the same one: every rank of a run is on this machine.

Buckets are 20 per decade from 100 ns to 10 s (each 12% wider than the last), so percentiles
read from the histogram are within 6% of the exact value; the mean and the maximum are exact.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

PER_DECADE = 20
LOWEST_S = 1e-7
DECADES = 8
# upper bounds of the buckets, seconds; one more bucket above the last for anything slower
# (rounded to 12 digits, so the decades are exact: 1e-5 is a bound, not 9.999999999999999e-06)
BOUNDS_S: npt.NDArray[np.float64] = np.array(
    [
        float(f"{LOWEST_S * 10.0 ** (k / PER_DECADE):.12g}")
        for k in range(1, PER_DECADE * DECADES + 1)
    ]
)
BUCKETS = len(BOUNDS_S) + 1


_BOUNDS_LIST = BOUNDS_S.tolist()


class LatencyHistogram:
    """Counts per bucket, the sum and the maximum (seconds, target timescale). `observe` is
    on the receive path: plain Python, no numpy call per sample."""

    __slots__ = ("counts", "max_s", "sum_s")

    def __init__(self) -> None:
        self.counts = [0] * BUCKETS
        self.sum_s = 0.0
        self.max_s = 0.0

    def observe(self, value_s: float) -> None:
        self.counts[bisect_left(_BOUNDS_LIST, value_s)] += 1
        self.sum_s += value_s
        if value_s > self.max_s:
            self.max_s = value_s

    def add(self, latencies_s: npt.NDArray[np.float64]) -> None:
        for value in latencies_s.tolist():
            self.observe(value)

    def to_wire(self) -> tuple[list[int], float, float]:
        return list(self.counts), self.sum_s, self.max_s

    @classmethod
    def from_wire(cls, wire: tuple[Sequence[int], float, float]) -> LatencyHistogram:
        h = cls()
        h.counts = list(wire[0])
        h.sum_s, h.max_s = wire[1], wire[2]
        return h

    def merge(self, other: LatencyHistogram) -> None:
        self.counts = [a + b for a, b in zip(self.counts, other.counts, strict=True)]
        self.sum_s += other.sum_s
        self.max_s = max(self.max_s, other.max_s)

    @property
    def count(self) -> int:
        return sum(self.counts)

    def percentile_s(self, q: float) -> float | None:
        """The q-th percentile (0..100): the geometric middle of the bucket it falls in, capped
        at the maximum seen."""
        n = self.count
        if n == 0:
            return None
        rank = max(1, int(np.ceil(q / 100.0 * n)))
        index = int(np.searchsorted(np.cumsum(self.counts), rank))
        upper = BOUNDS_S[index] if index < len(BOUNDS_S) else self.max_s
        lower = BOUNDS_S[index - 1] if index > 0 else LOWEST_S
        return min(float(np.sqrt(lower * upper)), self.max_s)

    def summary_us(self) -> LatencySummary:
        n = self.count
        if n == 0:
            return LatencySummary(0, None, None, None, None)
        p50, p99 = self.percentile_s(50.0), self.percentile_s(99.0)
        assert p50 is not None and p99 is not None
        return LatencySummary(n, self.sum_s / n * 1e6, p50 * 1e6, p99 * 1e6, self.max_s * 1e6)

    def cumulative(self, bounds_s: Sequence[float]) -> list[tuple[str, float]]:
        """Prometheus buckets at the given bounds (each one of BOUNDS_S)."""
        cumsum = np.cumsum(self.counts)
        out = []
        for bound in bounds_s:
            # the last of our buckets whose upper bound is this one (up to float rounding)
            index = int(np.searchsorted(BOUNDS_S, bound * (1 + 1e-9))) - 1
            out.append((f"{bound:.3g}", float(cumsum[index]) if index >= 0 else 0.0))
        out.append(("+Inf", float(cumsum[-1])))
        return out


@dataclass(frozen=True)
class LatencySummary:
    packets: int
    avg_us: float | None
    p50_us: float | None
    p99_us: float | None
    max_us: float | None

    def to_json(self) -> dict[str, float | int | None]:
        return {
            "packets": self.packets,
            "avg_us": self.avg_us,
            "p50_us": self.p50_us,
            "p99_us": self.p99_us,
            "max_us": self.max_us,
        }


def merged(histograms: Iterable[LatencyHistogram]) -> LatencyHistogram:
    total = LatencyHistogram()
    for h in histograms:
        total.merge(h)
    return total
