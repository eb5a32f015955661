"""The one rule of every study (judge), its thresholds (StudyThresholds) and the checks it gives.

A check (Check) compares a statistic alone and mixed with a threshold; judge gives the verdict
from the point estimates and the bootstrap intervals (emulator.studies.stats.estimates): shown,
not shown, or not measurable.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from emulator.config import param
from emulator.studies.stats.bootstrap import BootstrapSpec, Interval, Sample
from emulator.studies.stats.estimates import Comparison, compare
from emulator.studies.stats.formatting import fmt_interval, json_finite

Verdict = Literal["shown", "not shown", "not measurable"]
Worse = Literal["higher", "lower"]  # the direction of a statistic that an effect makes worse


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
