"""The two-level percentile bootstrap of every study: statistics, samples and resampling.

A study runs each condition (the interference study's All-Reduce alone, All-to-All alone and
mixed; the jobs study's each job alone and all together; a series of seeds' one scenario) several
times (repeats, one seed each: another draw of the source ports, so of the ECMP paths) and judges
statistics of units pooled over the repeats: the busbw CV over complete All-Reduce instances, the
mean over process groups of each group's busbw CV across iterations, the FCT p99/p50 over
finished All-to-All flows, busbw / ideal busbw. The units of one run are not independent of each
other (they share the run's machine load, ECMP paths and timing), so resampling units alone would
leave out the run-to-run variation, which on this emulator is large.

Method, for a statistic of the units of R repeats (repeats without units left out):

1. Draw R repeats with replacement from the R (the upper level).
2. Within each drawn repeat, draw as many units as it has, with replacement (the lower level).
   Busbw CV and FCT percentiles resample instances or finished flows of the repeat; the
   within-group CV resamples the instances of each process group separately (a group is a fixed
   stratum, one instance per iteration), and the repeat's statistic is its groups' CVs.
3. Compute the statistic on the pooled resample (every drawn repeat's units together; for the
   within-group CV, the mean over every drawn repeat's groups).

Repeated B times (2000 by default) from numpy.random.default_rng(seed), so a study is
reproducible. The 95% interval is the percentile interval: the 2.5th and 97.5th percentiles of
the B values (nearest-rank, collectors.stats; the 50th and 1950th of 2000 sorted), Efron &
Tibshirani, "An Introduction to the Bootstrap" (1993), chapter 13. Resampling the clusters (repeats)
and then the units within them is the two-stage bootstrap of Davison & Hinkley, "Bootstrap Methods
and their Application" (1997), section 3.8; the upper level carries the between-repeat variation,
so two repeats that disagree give a wider interval than two that agree. With one repeat the upper
level draws it every time and the interval covers only the variation among its units.

Point estimates, the ratio of two sides and its floor: emulator.studies.stats.estimates.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from collectors.stats import nearest_rank
from emulator.config import param

BOOTSTRAP_METHOD = (
    "two-level percentile bootstrap: repeats with replacement, then units within each drawn "
    "repeat (Efron & Tibshirani 1993 ch. 13; Davison & Hinkley 1997 sec. 3.8)"
)
BATCH_ELEMENTS = 1 << 21  # resampled values held at once (x 8 bytes), whatever B and the units

Interval = tuple[float, float]
Statistic = Callable[[np.ndarray], np.ndarray]  # (rows, units[, columns]) -> (rows,)


@dataclass(frozen=True)
class BootstrapSpec:
    """How the study's confidence intervals are computed."""

    resamples: int = param(2000, doc="bootstrap resamples (B) per interval", min=100)
    confidence: float = param(0.95, doc="coverage of the percentile interval", min=0.5, max=0.999)
    seed: int = param(0, doc="seed of numpy.random.default_rng (each check starts from it)", min=0)


DEFAULT_BOOTSTRAP = BootstrapSpec()


def mean(batch: np.ndarray) -> np.ndarray:
    """The mean of each row (a busbw mean, a job's time over repeats)."""
    return np.asarray(batch.mean(axis=1), dtype=float)


def cv(batch: np.ndarray) -> np.ndarray:
    """Population CV (ddof 0) of each row; NaN for a zero mean."""
    mean = batch.mean(axis=1)
    std = batch.std(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(mean != 0, std / np.where(mean != 0, mean, 1.0), np.nan)


def percentile(q: float) -> Statistic:
    """Nearest-rank p_q of each row (collectors.stats, as the run summary's percentiles)."""

    def statistic(batch: np.ndarray) -> np.ndarray:
        k = nearest_rank(q, batch.shape[1]) - 1
        return np.asarray(np.partition(batch, k, axis=1)[:, k], dtype=float)

    return statistic


def percentile_ratio(high: float, low: float) -> Statistic:
    """Nearest-rank p_high / p_low of each row (e.g. FCT p99/p50)."""

    def statistic(batch: np.ndarray) -> np.ndarray:
        n = batch.shape[1]
        k_high, k_low = nearest_rank(high, n) - 1, nearest_rank(low, n) - 1
        part = np.partition(batch, sorted({k_high, k_low}), axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.asarray(part[:, k_high] / part[:, k_low], dtype=float)

    return statistic


def ratio_of_sums(batch: np.ndarray) -> np.ndarray:
    """Sum of column 0 over sum of column 1 of each row (mean busbw / mean ideal busbw)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(batch[..., 0].sum(axis=1) / batch[..., 1].sum(axis=1), dtype=float)


class Sample(Protocol):
    """The units of a statistic, per repeat with data, and how to resample them."""

    @property
    def repeats(self) -> int: ...

    @property
    def units(self) -> int: ...

    def point(self) -> float | None: ...

    def width(self, counts: np.ndarray) -> int: ...

    def resample(self, counts: np.ndarray, rows: int, rng: np.random.Generator) -> np.ndarray: ...


def finite_or_none(value: Any) -> float | None:
    """A float, or None for NaN (a statistic with nothing to say, such as 0/0)."""
    value = float(value)
    return None if np.isnan(value) else value


@dataclass(frozen=True)
class PooledSample:
    """Per repeat, its units along the first axis; the statistic is of all units pooled."""

    parts: tuple[np.ndarray, ...]
    statistic: Statistic

    @classmethod
    def of(cls, parts: Sequence[np.ndarray], statistic: Statistic) -> PooledSample:
        return cls(tuple(np.asarray(p, dtype=float) for p in parts if len(p)), statistic)

    @property
    def repeats(self) -> int:
        return len(self.parts)

    @property
    def units(self) -> int:
        return sum(len(p) for p in self.parts)

    def point(self) -> float | None:
        if not self.parts:
            return None
        return finite_or_none(self.statistic(np.concatenate(self.parts)[None])[0])

    def width(self, counts: np.ndarray) -> int:
        return int(sum(int(c) * p.size for c, p in zip(counts, self.parts, strict=True)))

    def resample(self, counts: np.ndarray, rows: int, rng: np.random.Generator) -> np.ndarray:
        # A repeat drawn c times contributes c x its size draws from its own units.
        batch = np.concatenate(
            [
                part[rng.integers(0, len(part), size=(rows, int(c) * len(part)))]
                for c, part in zip(counts, self.parts, strict=True)
                if c
            ],
            axis=1,
        )
        return self.statistic(batch)


@dataclass(frozen=True)
class CellSample:
    """Per repeat, its cells (process groups, 2 or more units each); the statistic is the mean
    over every cell of every repeat of the cell statistic."""

    parts: tuple[tuple[np.ndarray, ...], ...]
    statistic: Statistic

    @classmethod
    def of(cls, parts: Sequence[Sequence[np.ndarray]], statistic: Statistic) -> CellSample:
        kept = (tuple(np.asarray(c, dtype=float) for c in cells if len(c) >= 2) for cells in parts)
        return cls(tuple(cells for cells in kept if cells), statistic)

    @property
    def repeats(self) -> int:
        return len(self.parts)

    @property
    def units(self) -> int:
        return sum(len(c) for cells in self.parts for c in cells)

    def point(self) -> float | None:
        values = [self.statistic(c[None])[0] for cells in self.parts for c in cells]
        return finite_or_none(np.mean(values)) if values else None

    def width(self, counts: np.ndarray) -> int:
        return int(
            sum(
                int(n) * sum(c.size for c in cells)
                for n, cells in zip(counts, self.parts, strict=True)
            )
        )

    def resample(self, counts: np.ndarray, rows: int, rng: np.random.Generator) -> np.ndarray:
        total, cells_drawn = np.zeros(rows), 0
        for n, cells in zip(counts, self.parts, strict=True):
            n = int(n)
            if not n:
                continue
            for cell in cells:
                draws = cell[rng.integers(0, len(cell), size=(rows * n, len(cell)))]
                total += self.statistic(draws).reshape(rows, n).sum(axis=1)
            cells_drawn += n * len(cells)
        return total / cells_drawn


def bootstrap(sample: Sample, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """B values of the statistic, each on a two-level resample (see the module docstring)."""
    r = sample.repeats
    if r == 0:
        raise ValueError("bootstrap: the sample has no repeat with data")
    picks = rng.integers(0, r, size=(resamples, r))
    counts = (picks[:, :, None] == np.arange(r)).sum(axis=1)  # (B, R): times each repeat drawn
    # Resamples drawing the same repeats the same number of times have the same shape: batch them.
    compositions, inverse = np.unique(counts, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    out = np.empty(resamples)
    for j, composition in enumerate(compositions):
        rows = np.flatnonzero(inverse == j)
        step = max(1, BATCH_ELEMENTS // max(1, sample.width(composition)))
        for start in range(0, len(rows), step):
            chunk = rows[start : start + step]
            out[chunk] = sample.resample(composition, len(chunk), rng)
    return out


def percentile_interval(values: np.ndarray, confidence: float) -> Interval | None:
    """The percentile interval of bootstrap values (NaN left out; None when none is left)."""
    kept = np.sort(values[~np.isnan(values)])
    if not len(kept):
        return None
    tail = 100.0 * (1.0 - confidence) / 2.0
    low = kept[nearest_rank(tail, len(kept)) - 1]
    high = kept[nearest_rank(100.0 - tail, len(kept)) - 1]
    return float(low), float(high)


def divide(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """Elementwise ratio: x/0 is +inf for x > 0, 0/0 is NaN."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(numerator / denominator, dtype=float)
