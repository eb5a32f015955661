"""The interference study's numbers: each check's units, bootstrap intervals and verdict rule.

A check (Check) compares a statistic alone and mixed with a threshold (StudyThresholds); judge
gives the verdict from the point estimates and a two-level (stratified) percentile bootstrap
interval, computed here.

The study runs each condition (All-Reduce alone, All-to-All alone, mixed) several times (repeats,
one seed each: another draw of the source ports, so of the ECMP paths) and judges statistics of units pooled over the repeats: the busbw CV over complete
All-Reduce instances, the mean over process groups of each group's busbw CV across iterations, the
FCT p99/p50 over finished All-to-All flows, busbw / ideal busbw. The units of one run are not
independent of each other (they share the run's machine load, ECMP paths and timing), so
resampling units alone would leave out the run-to-run variation, which on this emulator is large.

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

A mixed/alone ratio is bootstrapped by resampling alone and mixed independently (draws one after
the other from one generator) and dividing the two resampled statistics; a resample whose alone
statistic is 0 gives an infinite ratio (0/0 is left out). Point estimates are the statistic on all
units of all repeats, the same definitions as collectors.summary for one run (population CV,
nearest-rank percentiles).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol

import numpy as np

from collectors.stats import nearest_rank
from emulator.config import param

BOOTSTRAP_METHOD = (
    "two-level percentile bootstrap: repeats with replacement, then units within each drawn "
    "repeat (Efron & Tibshirani 1993 ch. 13; Davison & Hinkley 1997 sec. 3.8)"
)
BATCH_ELEMENTS = 1 << 21  # resampled values held at once (x 8 bytes), whatever B and the units

Interval = tuple[float, float]
Verdict = Literal["shown", "not shown", "not measurable"]
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


def _finite_or_none(value: Any) -> float | None:
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
        return _finite_or_none(self.statistic(np.concatenate(self.parts)[None])[0])

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
        return _finite_or_none(np.mean(values)) if values else None

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
    """A statistic alone and mixed, and mixed / alone, each with its interval."""

    alone: Estimate
    mixed: Estimate
    ratio: float | None  # +inf when the alone statistic is 0 and the mixed one is not
    ratio_interval: Interval | None


def compare(alone: Sample, mixed: Sample, spec: BootstrapSpec) -> Comparison:
    """Both sides bootstrapped independently from one generator seeded with spec.seed."""
    rng = np.random.default_rng(spec.seed)
    a, m = estimate(alone, spec, rng), estimate(mixed, spec, rng)
    ratio = interval = None
    if a.point is not None and m.point is not None:
        ratio = _finite_or_none(divide(np.array(m.point), np.array(a.point)))
    if a.values is not None and m.values is not None:
        interval = percentile_interval(divide(m.values, a.values), spec.confidence)
    return Comparison(a, m, ratio, interval)


def estimate_alone(sample: Sample, spec: BootstrapSpec) -> Estimate:
    """One side only (the All-Reduce alone against its plan), from a generator seeded with
    spec.seed."""
    return estimate(sample, spec, np.random.default_rng(spec.seed))


@dataclass(frozen=True)
class CollectiveUnits:
    """What the bootstrap resamples of one collective type in one run."""

    busbw: np.ndarray  # complete instances with a busbw, bytes/s
    groups: tuple[np.ndarray, ...]  # the same, per process group
    paired: np.ndarray  # (n, 2): busbw and ideal busbw of the complete instances that have both
    fct: np.ndarray  # finished flows, s

    @classmethod
    def empty(cls) -> CollectiveUnits:
        return cls(np.empty(0), (), np.empty((0, 2)), np.empty(0))


def collective_units(tables: Any, collective: str) -> CollectiveUnits:
    """The units of one collective type in a run's tables (collectors.tables.RunTables), chosen as
    collectors.summary chooses them."""
    import pyarrow.compute as pc

    from collectors.tables import rows

    busbw: list[float] = []
    by_group: dict[str, list[float]] = {}
    paired: list[tuple[float, float]] = []
    columns = ("collective_type", "process_group", "busbw_bytes_per_s", "ideal_busbw_bytes_per_s")
    for ctype, group, value, ideal, complete in rows(tables.collectives, (*columns, "complete")):
        if ctype == collective and complete and value is not None:
            busbw.append(value)
            by_group.setdefault(group, []).append(value)
            if ideal:
                paired.append((value, ideal))
    flows = tables.flows
    finished = pc.and_(pc.equal(flows["collective_type"], collective), pc.is_valid(flows["fct_s"]))
    fct = flows.filter(finished)["fct_s"].to_numpy(zero_copy_only=False)
    return CollectiveUnits(
        np.asarray(busbw, dtype=float),
        tuple(np.asarray(v, dtype=float) for v in by_group.values()),
        np.asarray(paired, dtype=float).reshape(-1, 2),
        np.asarray(fct, dtype=float),
    )


@dataclass(frozen=True)
class StudyThresholds:
    """How large an effect must be to count as shown (a smaller one is within run-to-run noise)."""

    cv_ratio_min: float = param(
        1.25,
        doc="All-Reduce busbw CV mixed / alone at or above which the variability is shown",
        min=1.0,
    )
    cv_min: float = param(
        0.02,
        doc="All-Reduce busbw CV mixed below which it counts as steady whatever the ratio (a "
        "ratio of two tiny CVs is noise)",
        min=0.0,
    )
    tail_ratio_min: float = param(
        1.25,
        doc="All-to-All FCT p99/p50 mixed over the same alone at or above which the tail is shown",
        min=1.0,
    )
    busbw_ratio_max: float = param(
        0.9,
        doc="All-Reduce busbw mean mixed / alone at or below which the loss of bandwidth is "
        "shown (with the interval below 1)",
        min=0.0,
        max=1.0,
    )
    line_rate_ratio_min: float = param(
        0.8,
        doc="All-Reduce alone busbw / ideal (congestion-free plan) busbw at or above which it "
        "counts as near line rate",
        min=0.0,
        max=1.0,
    )
    repeats_min: int = param(
        2,
        doc="repeats with data on each side below which a check is not measurable (the interval "
        "of one run leaves out run-to-run variation)",
        min=1,
    )


DEFAULT_THRESHOLDS = StudyThresholds()


@dataclass(frozen=True)
class Check:
    """One of the issue's expectations, with the numbers it was judged on.

    alone, mixed and ratio are point estimates over every repeat pooled; the *_ci fields their
    bootstrap percentile intervals (None where not measurable)."""

    name: str
    question: str
    expected: str
    verdict: Verdict
    alone: float | None
    mixed: float | None
    ratio: float | None
    threshold: float
    detail: str
    numbers: Mapping[str, float | None] = field(default_factory=dict)
    alone_ci: Interval | None = None
    mixed_ci: Interval | None = None
    ratio_ci: Interval | None = None

    @property
    def shown(self) -> bool:
        return self.verdict == "shown"

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["numbers"] = dict(self.numbers)
        out["shown"] = self.shown
        return json_finite(out)


def json_finite(value: Any) -> Any:
    """JSON has no infinity: an unbounded number (a ratio over an alone statistic of 0) is null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_finite(v) for v in value]
    return value


def fmt_interval(value: float | None, interval: Interval | None, spec: str = ".3g") -> str:
    """'0.16 [0.12, 0.21]': a point estimate and its interval ('-' for none)."""

    def one(x: float | None) -> str:
        return "-" if x is None or np.isnan(x) else format(x, spec)

    if value is None or interval is None:
        return one(value)
    return f"{one(value)} [{one(interval[0])}, {one(interval[1])}]"


def _measurable(
    c: Comparison, what: str, units: str, repeats_min: int, confidence: float
) -> tuple[str, str]:
    """("not measurable", why) when a side has fewer than 2 units or fewer than repeats_min
    repeats; else the ratio's text and the pooled units' text, for the judge to finish."""
    for side, e in (("alone", c.alone), ("mixed", c.mixed)):
        if not e.measurable:
            return "not measurable", f"fewer than 2 {units} in the {side} runs ({e.units})"
    ratio = f"mixed/alone {what} {fmt_interval(c.ratio, c.ratio_interval)} ({confidence:.0%} CI)"
    pooled = (
        f"; over {c.alone.repeats} repeats alone ({c.alone.units} {units}) and "
        f"{c.mixed.repeats} mixed ({c.mixed.units})"
    )
    repeats = min(c.alone.repeats, c.mixed.repeats)
    if repeats < 2:
        pooled += (
            f"; with one repeat on a side the interval is from that run's {units} only and does "
            "not include run-to-run variation"
        )
    if repeats < repeats_min:
        return "not measurable", f"{ratio}{pooled}; {repeats_min} repeats a side needed to judge"
    return ratio, pooled


def judge(
    c: Comparison,
    what: str,
    units: str,
    threshold: float,
    repeats_min: int,
    confidence: float,
    steady_below: float | None = None,
) -> tuple[Verdict, str]:
    """The verdict on a mixed/alone comparison, and why.

    not measurable: fewer than 2 units on a side, or fewer than repeats_min repeats with data
    (the interval is still given, and with one repeat said to leave out run-to-run variation);
    not shown: the mixed statistic below steady_below, the ratio below the threshold, or its
    interval reaching down to 1 (no change); shown otherwise."""
    ratio, pooled = _measurable(c, what, units, repeats_min, confidence)
    if ratio == "not measurable":
        return "not measurable", pooled
    assert c.mixed.point is not None  # measurable
    if steady_below is not None and c.mixed.point < steady_below:
        return "not shown", f"mixed {what} {c.mixed.point:.4f} is below {steady_below:g}: steady"
    if c.ratio is None or c.ratio < threshold:
        return "not shown", f"{ratio}: below {threshold:g}{pooled}"
    if c.ratio_interval is None or c.ratio_interval[0] <= 1.0:
        return "not shown", (
            f"{ratio}: at or above {threshold:g}, but the interval reaches down to 1 (no "
            f"change){pooled}"
        )
    return "shown", f"{ratio}: at or above {threshold:g} and the interval above 1{pooled}"


def judge_lower(
    c: Comparison, what: str, units: str, threshold: float, repeats_min: int, confidence: float
) -> tuple[Verdict, str]:
    """judge() for an effect that lowers the statistic (busbw): shown when mixed/alone is at or
    below the threshold and its interval lies below 1."""
    ratio, pooled = _measurable(c, what, units, repeats_min, confidence)
    if ratio == "not measurable":
        return "not measurable", pooled
    if c.ratio is None or c.ratio > threshold:
        return "not shown", f"{ratio}: above {threshold:g}{pooled}"
    if c.ratio_interval is None or c.ratio_interval[1] >= 1.0:
        return "not shown", (
            f"{ratio}: at or below {threshold:g}, but the interval reaches up to 1 (no "
            f"change){pooled}"
        )
    return "shown", f"{ratio}: at or below {threshold:g} and the interval below 1{pooled}"


def comparison_check(
    name: str,
    question: str,
    expected: str,
    c: Comparison,
    verdict: tuple[Verdict, str],
    threshold: float,
    numbers: Mapping[str, float | None],
) -> Check:
    """A Check from a comparison and its verdict (the repeats of each side added to numbers)."""
    counts = {"repeats_alone": c.alone.repeats, "repeats_mixed": c.mixed.repeats, **numbers}
    return Check(
        name,
        question,
        expected,
        verdict[0],
        c.alone.point,
        c.mixed.point,
        c.ratio,
        threshold,
        verdict[1],
        counts,
        c.alone.interval,
        c.mixed.interval,
        c.ratio_interval,
    )


def cv_check(
    name: str,
    question: str,
    alone: Sample,
    mixed: Sample,
    units: str,
    thresholds: StudyThresholds,
    spec: BootstrapSpec,
    numbers: Mapping[str, float | None],
) -> Check:
    """A busbw CV mixed vs alone: shown at cv_ratio_min, steady below cv_min."""
    c = compare(alone, mixed, spec)
    minimum = thresholds.cv_ratio_min
    verdict = judge(
        c, "CV", units, minimum, thresholds.repeats_min, spec.confidence, thresholds.cv_min
    )
    return comparison_check(name, question, "higher CV mixed", c, verdict, minimum, numbers)
