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
the other from one generator) and dividing the two resampled statistics (0/0 is left out). The
ratio is given only when the alone interval's lower end lies above the alone statistic's floor
(0, or for a busbw CV what the runs' time stamps can resolve: timing_resolution_s): a denominator
whose interval reaches its floor may be 0, and the ratio's interval then spans orders of magnitude
of noise (the jobs study printed 471.6 [0.141, 1.9e10] over an All-Reduce CV of 0.000 alone: an
upper end only alone resamples near 4e-12, float rounding of the simulated time, can give).
Then the difference mixed - alone is given with its interval (the same resamples subtracted), and
the verdict is on it. Point estimates are the statistic on all units of all repeats, the same
definitions as collectors.summary for one run (population CV, nearest-rank percentiles).

Runs the project itself flagged (partial, or a fidelity verdict other than ok: run_flags) are
left out of every statistic unless the study is asked to include them (--include-flagged).
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
Worse = Literal["higher", "lower"]  # the direction of a statistic that an effect makes worse
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
        ratio = _finite_or_none(divide(np.array(m.point), np.array(a.point)))
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


@dataclass(frozen=True)
class CollectiveUnits:
    """What the bootstrap resamples of one collective type in one run."""

    busbw: np.ndarray  # complete instances with a busbw, bytes/s
    groups: tuple[np.ndarray, ...]  # the same, per process group
    paired: np.ndarray  # (n, 2): busbw and ideal busbw of the complete instances that have both
    fct: np.ndarray  # finished flows, s
    cv_floor: float = 0.0  # the busbw CV the run's time stamps cannot tell from 0 (busbw_cv_floor)

    @classmethod
    def empty(cls) -> CollectiveUnits:
        return cls(np.empty(0), (), np.empty((0, 2)), np.empty(0))


def collective_units(tables: Any, collective: str, resolution_s: float = 0.0) -> CollectiveUnits:
    """The units of one collective type in a run's tables (collectors.tables.RunTables), chosen as
    collectors.summary chooses them; resolution_s: the run's timing_resolution_s."""
    import pyarrow.compute as pc

    from collectors.tables import rows

    busbw: list[float] = []
    durations_s: list[float] = []
    by_group: dict[str, list[float]] = {}
    paired: list[tuple[float, float]] = []
    columns = ("collective_type", "process_group", "busbw_bytes_per_s", "ideal_busbw_bytes_per_s")
    for ctype, group, value, ideal, complete, duration_s in rows(
        tables.collectives, (*columns, "complete", "bandwidth_time_s")
    ):
        if ctype == collective and complete and value is not None:
            busbw.append(value)
            durations_s.append(duration_s)
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
        busbw_cv_floor(durations_s, resolution_s),
    )


# The emulated engine stamps flow starts and ends with time.perf_counter (CLOCK_MONOTONIC,
# nanoseconds on Linux) in wall time and divides by the TDF into target time
# (emulator.engine.clock), so two stamps closer than 1 ns / TDF are one reading.
CLOCK_RESOLUTION_S = 1e-9


def timing_resolution_s(summary: Mapping[str, Any]) -> float:
    """How far a run's time stamps may be from the times they stand for by their rounding alone,
    in target time, from its summary.json.

    The emulated engine: its clock's resolution / TDF. The simulator: its clock is a float of
    simulated seconds advanced event by event (emulator.sim.engine), each event's time one
    rounding (at most an ulp of the time) after the event that scheduled it, so a stamp can carry
    up to `events` ulps of the run's end time (summary.json engine.events, engine.simulated_s).
    Measured: two instances of a simulated two_tenant All-Reduce alone that took the same
    2.406 ms were stamped 2.5e-14 s apart, within the 4e-12 s (2.4e6 events x 1.7e-18 s) this
    gives."""
    engine = summary.get("engine") or {}
    if summary.get("backend") == "sim":
        events, end_s = engine.get("events"), engine.get("simulated_s")
        if events and end_s:
            return float(events) * float(np.spacing(float(end_s)))
    return CLOCK_RESOLUTION_S / float(summary.get("tdf") or 1.0)


def busbw_cv_floor(durations_s: Sequence[float | None], resolution_s: float) -> float:
    """The busbw CV that the rounding of the stamps alone can produce: a busbw is bytes over a
    duration between two stamps (all members entered -> last byte), each off by up to
    resolution_s, so instances that took the same time can differ by up to 2 x resolution_s /
    duration relative, and so can their CV. A CV at or below it is indistinguishable from 0."""
    durations = [d for d in durations_s if d]
    return 2.0 * resolution_s / min(durations) if durations else 0.0


def units_cv_floor(units: Sequence[CollectiveUnits]) -> float:
    """The CV floor of a side's runs pooled: the largest of theirs."""
    return max((u.cv_floor for u in units), default=0.0)


# -- runs the project flagged ------------------------------------------------------------------

# A study leaves out of every statistic the runs the project itself flagged, unless asked to
# include them (--include-flagged): a partial run measured part of its workload, and a fidelity
# verdict other than "ok" (degraded, or unknown: a check had no data) says the numbers may be
# this machine's limits rather than the fabric's. Every summary.json the run pipeline writes has
# a fidelity section, a simulated run's too (emulator.run.execute assesses every backend; the
# simulator leaves out the machine's checks as not applicable, emulator.backends.sim, so its
# verdict is ok unless a check that does apply to it failed or had no data): "ok" means the same
# there. A summary.json without the section was not written by a run of this emulator, or by one
# older than the verdict, and nothing in it vouches for the run: it is flagged too.
NO_FIDELITY = "no fidelity verdict in its summary.json: nothing says the run kept up"


def flags_of(partial: bool, verdict: str | None, reasons: Sequence[str] = ()) -> tuple[str, ...]:
    """Why a run is flagged (empty: it is not): partial, and a fidelity verdict other than ok
    (None: no fidelity section) with its reasons."""
    flags = []
    if partial:
        flags.append("partial: the run did not finish (interrupted or failed)")
    if verdict is None:
        flags.append(NO_FIDELITY)
    elif verdict != "ok":
        flags.append(f"fidelity {verdict}: {'; '.join(reasons) or 'no reason given'}")
    return tuple(flags)


def run_flags(summary: Mapping[str, Any]) -> tuple[str, ...]:
    """flags_of a run's summary.json as written (not one recomputed with a default verdict)."""
    fidelity = summary.get("fidelity")
    if not isinstance(fidelity, Mapping) or fidelity.get("verdict") is None:
        return flags_of(bool(summary.get("partial")), None)
    reasons = [str(r) for r in fidelity.get("reasons") or ()]
    return flags_of(bool(summary.get("partial")), str(fidelity["verdict"]), reasons)


def judged_runs(runs: Sequence[Any], include_flagged: bool) -> list[Any]:
    """The runs a study's statistics are of: those not flagged (each has .flags), or all."""
    return list(runs) if include_flagged else [r for r in runs if not r.flags]


def with_flagged(
    verdict: Verdict, detail: str, sides: Sequence[tuple[str, Sequence[Any], Sequence[Any]]]
) -> tuple[Verdict, str, tuple[str, ...]]:
    """A verdict and its detail given which runs were judged: sides are (label, every run of
    the side, the runs judged), each run with .name and .flags. Not measurable when every run of
    a side is flagged and left out (the detail says which, and why); else the detail says which
    flagged runs the verdict was judged on (--include-flagged), and those are returned too."""
    for label, every, kept in sides:
        if every and not kept:
            why = flagged_text([(r.name, r.flags) for r in every])
            return (
                "not measurable",
                f"every {label} run is flagged and left out: {why}; --include-flagged judges them",
                (),
            )
    used = list({id(r): r for _, _, kept in sides for r in kept if r.flags}.values())
    if not used:
        return verdict, detail, ()
    named = [(r.name, r.flags) for r in used]
    flagged = tuple(flagged_text([one]) for one in named)
    return verdict, f"{detail}; {INCLUDED_FLAGGED}: {flagged_text(named)}", flagged


def flagged_text(names_and_flags: Sequence[tuple[str, Sequence[str]]]) -> str:
    """'mixed repeat 2 (fidelity degraded: ...); ...': flagged runs with their reasons."""
    return "; ".join(f"{name} ({'; '.join(flags)})" for name, flags in names_and_flags)


INCLUDED_FLAGGED = "includes runs flagged by the project (--include-flagged)"


def flagged_notes(
    names_and_flags: Sequence[tuple[str, Sequence[str]]], included: bool
) -> list[str]:
    """A note per flagged run, with its reasons: left out of every statistic, or (included)
    judged although its numbers may be of a part of the run or of this machine's limits."""
    if included:
        what = (
            "flagged, and judged (--include-flagged): its numbers may be of a part of the run or "
            "of this machine's limits rather than the fabric's"
        )
    else:
        what = "flagged, and left out of every statistic (--include-flagged judges it)"
    return [f"{name}: {what}: {'; '.join(flags)}" for name, flags in names_and_flags]


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

    alone, mixed, ratio and difference (mixed - alone) are point estimates over every repeat
    pooled; the *_ci fields their bootstrap percentile intervals (None where not measurable);
    ratio_undefined says why ratio is None where the alone value may be at its floor
    (ratio_floor_reason). flagged: runs the project flagged that the check was judged on
    (--include-flagged), each with its reasons."""

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
    difference: float | None = None
    difference_ci: Interval | None = None
    ratio_undefined: str | None = None
    flagged: tuple[str, ...] = ()

    @property
    def shown(self) -> bool:
        return self.verdict == "shown"

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["numbers"] = dict(self.numbers)
        out["shown"] = self.shown
        return json_finite(out)


def json_finite(value: Any) -> Any:
    """JSON has no infinity: an unbounded number is null."""
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


RATIO_UNDEFINED = "ratio undefined"


def fmt_ratio(
    ratio: float | None,
    interval: Interval | None,
    undefined: str | None,
    difference: float | None,
    difference_interval: Interval | None,
    spec: str = ".3g",
) -> str:
    """A ratio with its interval, or where it is undefined the difference with its interval:
    'ratio undefined; difference +0.1 [0.08, 0.12]'."""
    if undefined is None:
        return fmt_interval(ratio, interval, spec)
    text = fmt_interval(difference, difference_interval, spec)
    sign = "+" if difference is not None and difference >= 0 else ""
    return f"{RATIO_UNDEFINED}; difference {sign}{text}"


def _measurable(
    c: Comparison, what: str, units: str, repeats_min: int, confidence: float
) -> tuple[str, str]:
    """("not measurable", why) when a side has fewer than 2 units or fewer than repeats_min
    repeats; else the ratio's text (or the difference's, where the ratio is undefined) and the
    pooled units' text, for the judge to finish."""
    for side, e in (("alone", c.alone), ("mixed", c.mixed)):
        if not e.measurable:
            return "not measurable", f"fewer than 2 {units} in the {side} runs ({e.units})"
    if c.ratio_undefined is None:
        ratio = f"mixed/alone {what} {fmt_interval(c.ratio, c.ratio_interval)}"
    else:
        ratio = (
            f"mixed/alone {what} undefined ({c.ratio_undefined}); mixed - alone "
            f"{fmt_interval(c.difference, c.difference_interval)}"
        )
    ratio += f" ({confidence:.0%} CI)"
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


# How judge words each outcome for an effect that raises the statistic (higher) or lowers it
# (lower): (short of the threshold, at it but the interval reaches 1, at it and beyond 1).
_WORDING: dict[Worse, tuple[str, str, str]] = {
    "higher": (
        "below {t:g}",
        "at or above {t:g}, but the interval reaches down to 1 (no change)",
        "at or above {t:g} and the interval above 1",
    ),
    "lower": (
        "above {t:g}",
        "at or below {t:g}, but the interval reaches up to 1 (no change)",
        "at or below {t:g} and the interval below 1",
    ),
}


def judge(
    c: Comparison,
    what: str,
    units: str,
    threshold: float,
    repeats_min: int,
    confidence: float,
    steady_below: float | None = None,
    worse: Worse = "higher",
) -> tuple[Verdict, str]:
    """The verdict on a mixed/alone comparison, and why: the one rule of every study.

    not measurable: fewer than 2 units on a side, or fewer than repeats_min repeats with data
    (the interval is still given, and with one repeat said to leave out run-to-run variation);
    not shown: the mixed statistic below steady_below, the ratio short of the threshold (below
    it for an effect that raises the statistic, worse "higher"; above it for one that lowers it),
    or its interval reaching 1 (no change); shown otherwise. Where the ratio is undefined (the
    alone value at its floor), on mixed - alone: shown when its interval lies beyond 0 on the
    worse side (from nothing to something is a ratio past any threshold)."""
    ratio, pooled = _measurable(c, what, units, repeats_min, confidence)
    if ratio == "not measurable":
        return "not measurable", pooled
    assert c.mixed.point is not None  # measurable
    if steady_below is not None and c.mixed.point < steady_below:
        return "not shown", f"mixed {what} {c.mixed.point:.4f} is below {steady_below:g}: steady"
    if c.ratio_undefined is not None:
        return _judge_difference(c, what, worse, ratio, pooled)
    short, reaches_one, beyond_one = (w.format(t=threshold) for w in _WORDING[worse])
    higher = worse == "higher"
    if c.ratio is None or (c.ratio < threshold if higher else c.ratio > threshold):
        return "not shown", f"{ratio}: {short}{pooled}"
    interval = c.ratio_interval
    if interval is None or (interval[0] <= 1.0 if higher else interval[1] >= 1.0):
        return "not shown", f"{ratio}: {reaches_one}{pooled}"
    return "shown", f"{ratio}: {beyond_one}{pooled}"


def _judge_difference(
    c: Comparison, what: str, worse: Worse, ratio: str, pooled: str
) -> tuple[Verdict, str]:
    """judge() where the alone value is at its floor: only a rise can be told from it."""
    if worse == "lower":
        return "not shown", f"{ratio}: the alone {what} is at its floor, it cannot fall{pooled}"
    interval = c.difference_interval
    if interval is None or interval[0] <= 0.0:
        return "not shown", (
            f"{ratio}: the interval of mixed - alone reaches down to 0 (no change){pooled}"
        )
    return "shown", f"{ratio}: from the floor alone, the interval of mixed - alone above 0{pooled}"


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
        c.difference,
        c.difference_interval,
        c.ratio_undefined,
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
    floor: float = 0.0,
) -> Check:
    """A busbw CV mixed vs alone: shown at cv_ratio_min, steady below cv_min; floor: the alone
    runs' CV floor (busbw_cv_floor)."""
    c = compare(alone, mixed, spec, floor)
    minimum = thresholds.cv_ratio_min
    verdict = judge(
        c, "CV", units, minimum, thresholds.repeats_min, spec.confidence, thresholds.cv_min
    )
    return comparison_check(
        name, question, "higher CV mixed", c, verdict, minimum, {**numbers, "alone_cv_floor": floor}
    )
