"""A statistic with its bootstrap interval (Estimate), and two sides of a study compared
(Comparison: alone and mixed, mixed / alone and mixed - alone, each with its interval).

A mixed/alone ratio is bootstrapped by resampling alone and mixed independently (draws one after
the other from one generator) and dividing the two resampled statistics (0/0 is left out). The
ratio is given only when the alone interval's lower end lies above the alone statistic's floor
(0, or for a busbw CV what the runs' time stamps can resolve: timing_resolution_s): a denominator
whose interval reaches its floor may be 0, and the ratio's interval then spans orders of magnitude
of noise (the jobs study printed 471.6 [0.141, 1.9e10] over an All-Reduce CV of 0.000 alone: an
upper end only alone resamples near 4e-12, float rounding of the simulated time, can give).
Then the difference mixed - alone is given with its interval (the same resamples subtracted), and
the verdict is on it. Point estimates are the statistic on all units of all repeats, the same
definitions as collectors.summary for one run (population CV, nearest-rank percentiles).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from emulator.studies.stats.bootstrap import (
    BootstrapSpec,
    Interval,
    Sample,
    bootstrap,
    divide,
    finite_or_none,
    percentile_interval,
)


@dataclass(frozen=True)
class Estimate:
    """A statistic over every unit of every repeat, with its interval when there are 2+ units."""

    point: float | None
    interval: Interval | None
    repeats: int  # repeats with data
    units: int
    values: np.ndarray | None = None  # the bootstrap values the interval came from

    @property
    def measurable(self) -> bool:
        return self.units >= 2 and self.point is not None


def estimate(sample: Sample, spec: BootstrapSpec, rng: np.random.Generator) -> Estimate:
    point = sample.point() if sample.units else None
    if sample.units < 2 or point is None:
        return Estimate(point, None, sample.repeats, sample.units)
    values = bootstrap(sample, spec.resamples, rng)
    return Estimate(
        point,
        percentile_interval(values, spec.confidence),
        sample.repeats,
        sample.units,
        values,
    )


@dataclass(frozen=True)
class Comparison:
    """A statistic alone and mixed, mixed / alone and mixed - alone, each with its interval.

    ratio and ratio_interval are None, and ratio_undefined says why, when the alone statistic
    may be at its floor (ratio_floor_reason)."""

    alone: Estimate
    mixed: Estimate
    ratio: float | None
    ratio_interval: Interval | None
    difference: float | None = None  # mixed - alone
    difference_interval: Interval | None = None
    ratio_undefined: str | None = None


def ratio_floor_reason(alone: Estimate, floor: float) -> str | None:
    """Why mixed/alone is not given, or None when it is.

    The ratio is given only when the alone interval's lower end (the point, without an interval)
    lies above the floor, the least value of the statistic that is not indistinguishable from 0.
    A ratio's interval is bounded only if its denominator's is bounded away from 0 (the
    condition of Fieller's theorem for a ratio's confidence set): a resampled alone statistic at
    the floor divides a finite mixed one into anything up to infinity."""
    low = alone.point if alone.interval is None else alone.interval[0]
    if low is None or low > floor:
        return None
    where = "value is" if alone.interval is None else "interval reaches down to"
    return f"the alone {where} {low:.3g}, not above its floor {floor:.3g}: the ratio is unbounded"


def compare(alone: Sample, mixed: Sample, spec: BootstrapSpec, floor: float = 0.0) -> Comparison:
    """Both sides bootstrapped independently from one generator seeded with spec.seed; floor:
    the alone statistic's floor (ratio_floor_reason), 0 for a statistic that only 0 makes
    meaningless as a denominator."""
    rng = np.random.default_rng(spec.seed)
    a, m = estimate(alone, spec, rng), estimate(mixed, spec, rng)
    ratio = interval = difference = difference_interval = None
    if a.point is not None and m.point is not None:
        ratio = finite_or_none(divide(np.array(m.point), np.array(a.point)))
        difference = m.point - a.point
    if a.values is not None and m.values is not None:
        interval = percentile_interval(divide(m.values, a.values), spec.confidence)
        difference_interval = percentile_interval(m.values - a.values, spec.confidence)
    undefined = ratio_floor_reason(a, floor)
    if undefined is None and interval is not None and not all(map(math.isfinite, interval)):
        undefined = "the interval of the ratio is unbounded"
    if undefined is not None:
        ratio = interval = None
    return Comparison(a, m, ratio, interval, difference, difference_interval, undefined)


def estimate_alone(sample: Sample, spec: BootstrapSpec) -> Estimate:
    """One side only (the All-Reduce alone against its plan), from a generator seeded with
    spec.seed."""
    return estimate(sample, spec, np.random.default_rng(spec.seed))
