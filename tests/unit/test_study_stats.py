"""The study's numbers without results folders: every check is not measurable with 0 or 1 unit
on a side; the two-level bootstrap intervals contain the point estimate, narrow with more data,
widen when the repeats disagree (the repeat level), and are reproducible from their seed; the
verdict needs both the ratio at the threshold and its interval above 1."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from collectors.stats import percentile_nearest_rank
from emulator.studies.interference.checks import (
    ALL_REDUCE,
    ALL_TO_ALL,
    StudyRun,
    check_allreduce_busbw,
    check_allreduce_cv,
    check_allreduce_cv_within_groups,
    check_allreduce_line_rate,
    check_alltoall_p99,
    check_alltoall_tail,
)
from emulator.studies.stats.bootstrap import (
    BootstrapSpec,
    CellSample,
    PooledSample,
    cv,
    percentile_interval,
    percentile_ratio,
)
from emulator.studies.stats.estimates import compare, estimate_alone
from emulator.studies.stats.units import CollectiveUnits
from emulator.studies.stats.verdict import StudyThresholds

THRESHOLDS = StudyThresholds()
SPEC = BootstrapSpec()


def with_cv(target: float, n: int, seed: int, mean: float = 40e9) -> np.ndarray:
    """n busbw values whose population CV is exactly `target` (one value: CV 0)."""
    if n < 2:
        return np.full(n, mean)
    z = np.random.default_rng(seed).standard_normal(n)
    z = (z - z.mean()) / z.std()
    return mean * (1 + target * z)


def fcts(tail: float, n: int, seed: int) -> np.ndarray:
    """n flow completion times around 100 us, the slowest 2% `tail` times longer."""
    values = 100e-6 * (1 + 0.05 * np.random.default_rng(seed).random(n))
    values[: max(1, n // 50)] *= tail
    return values


def ar_units(busbw: np.ndarray, groups: int = 1) -> CollectiveUnits:
    """All-Reduce instances in iteration order, instance i in group i mod groups; the plan's
    busbw is 10% above each."""
    busbw = np.asarray(busbw, dtype=float)
    return CollectiveUnits(
        busbw,
        tuple(busbw[g::groups] for g in range(groups) if len(busbw[g::groups])),
        np.column_stack([busbw, busbw * 1.1]),
        np.empty(0),
    )


def runs(role: str, units: Sequence[CollectiveUnits], collective: str) -> list[StudyRun]:
    return [
        StudyRun(role, Path(f"{role}-seed{k}"), {}, 50e9, k, k, {collective: u})
        for k, u in enumerate(units)
    ]


def ar_runs(role: str, *repeats: np.ndarray, groups: int = 1) -> list[StudyRun]:
    return runs(role, [ar_units(b, groups) for b in repeats], ALL_REDUCE)


def a2a_runs(role: str, *repeats: np.ndarray) -> list[StudyRun]:
    units = [CollectiveUnits(np.empty(0), (), np.empty((0, 2)), f) for f in repeats]
    return runs(role, units, ALL_TO_ALL)


def width(interval: tuple[float, float] | None) -> float:
    assert interval is not None
    return interval[1] - interval[0]


Check = Callable[[list[StudyRun], list[StudyRun]], Any]
CHECKS: dict[str, tuple[Check, Callable[[str, int], list[StudyRun]]]] = {
    "allreduce_busbw_cv": (
        lambda a, m: check_allreduce_cv(a, m, THRESHOLDS),
        lambda role, n: ar_runs(role, with_cv(0.1, n, 1), with_cv(0.1, n, 2)),
    ),
    "allreduce_busbw_cv_within_groups": (
        lambda a, m: check_allreduce_cv_within_groups(a, m, THRESHOLDS),
        lambda role, n: ar_runs(role, with_cv(0.1, n, 1), with_cv(0.1, n, 2)),
    ),
    "alltoall_fct_tail": (
        lambda a, m: check_alltoall_tail(a, m, THRESHOLDS),
        lambda role, n: a2a_runs(role, fcts(2.0, n, 1), fcts(2.0, n, 2)),
    ),
    "allreduce_busbw_mean": (
        lambda a, m: check_allreduce_busbw(a, m, THRESHOLDS),
        lambda role, n: ar_runs(role, with_cv(0.1, n, 1), with_cv(0.1, n, 2)),
    ),
    "alltoall_fct_p99": (
        lambda a, m: check_alltoall_p99(a, m, THRESHOLDS),
        lambda role, n: a2a_runs(role, fcts(2.0, n, 1), fcts(2.0, n, 2)),
    ),
}


@pytest.mark.parametrize(
    ("factor", "verdict"), [(0.6, "shown"), (0.95, "not shown"), (1.2, "not shown")]
)
def test_the_busbw_mean_check_is_shown_for_a_material_loss_with_its_interval_below_1(
    factor: float, verdict: str
) -> None:
    alone = ar_runs("a", *(with_cv(0.05, 80, s) for s in (1, 2, 3)))
    mixed = ar_runs("m", *(with_cv(0.05, 80, s, mean=40e9 * factor) for s in (4, 5, 6)))
    check = check_allreduce_busbw(alone, mixed, THRESHOLDS)
    assert check.verdict == verdict
    assert check.alone == pytest.approx(40.0, rel=1e-9)  # GB/s: the pooled mean
    assert check.ratio == pytest.approx(factor, rel=1e-9)
    assert check.ratio_ci is not None and check.ratio_ci[0] <= check.ratio <= check.ratio_ci[1]


def test_the_p99_check_reads_microseconds_and_needs_the_threshold() -> None:
    alone = a2a_runs("a", *(fcts(1.0, 2000, s) for s in (1, 2, 3)))
    slow = a2a_runs("m", *(fcts(3.0, 2000, s) for s in (4, 5, 6)))
    check = check_alltoall_p99(alone, slow, THRESHOLDS)
    pooled = np.concatenate([fcts(1.0, 2000, s) for s in (1, 2, 3)]) * 1e6
    assert check.alone == pytest.approx(percentile_nearest_rank(list(pooled), 99))
    assert check.verdict == "shown" and check.ratio > 2
    same = check_alltoall_p99(
        alone, a2a_runs("m", *(fcts(1.0, 2000, s) for s in (4, 5, 6))), THRESHOLDS
    )
    assert same.verdict == "not shown"


@pytest.mark.parametrize("name", list(CHECKS))
@pytest.mark.parametrize("units", [0, 1])
@pytest.mark.parametrize("side", ["alone", "mixed"])
def test_fewer_than_two_units_on_a_side_is_not_measurable(name: str, units: int, side: str) -> None:
    check, make = CHECKS[name]
    few = make(side, units)[:1]  # one repeat with 0 or 1 unit (a group of 1 is left out)
    plenty = make("other", 40)
    alone, mixed = (few, plenty) if side == "alone" else (plenty, few)
    result = check(alone, mixed)
    assert result.verdict == "not measurable" and not result.shown
    assert "fewer than 2 " in result.detail and f"in the {side} runs" in result.detail
    assert result.ratio_ci is None and getattr(result, f"{side}_ci") is None
    # with 2 units on that side it is measured
    enough = make(side, 2)
    result = check(*((enough, plenty) if side == "alone" else (plenty, enough)))
    assert result.verdict != "not measurable"


@pytest.mark.parametrize("units", [0, 1])
def test_line_rate_with_fewer_than_two_instances_is_not_measurable(units: int) -> None:
    result = check_allreduce_line_rate(ar_runs("a", with_cv(0.1, 40, 1)[:units]), THRESHOLDS)
    assert result.verdict == "not measurable" and result.alone_ci is None
    assert "fewer than 2 complete All-Reduce instances with an ideal busbw" in result.detail
    two = check_allreduce_line_rate(
        ar_runs("a", with_cv(0.1, 2, 1), with_cv(0.1, 2, 2)), THRESHOLDS
    )
    assert two.verdict == "shown" and two.alone == pytest.approx(1 / 1.1)


SAMPLES: dict[str, Callable[[int], Any]] = {
    "busbw CV": lambda n: PooledSample.of([with_cv(0.1, n, s) for s in (1, 2, 3)], cv),
    "FCT p99/p50": lambda n: PooledSample.of(
        [fcts(3.0, 10 * n, s) for s in (1, 2, 3)], percentile_ratio(99, 50)
    ),
    "within-group CV": lambda n: CellSample.of(
        [[with_cv(0.1, n, s), with_cv(0.2, n, s + 10)] for s in (1, 2, 3)], cv
    ),
}


@pytest.mark.parametrize("name", list(SAMPLES))
def test_intervals_contain_the_point_and_narrow_with_more_data(name: str) -> None:
    widths = []
    for n in (10, 40, 160):
        e = estimate_alone(SAMPLES[name](n), SPEC)
        assert e.interval is not None and e.point is not None
        assert e.interval[0] <= e.point <= e.interval[1], (n, e)
        widths.append(width(e.interval))
    assert widths[1] < 0.75 * widths[0] and widths[2] < 0.75 * widths[1], widths


def test_point_estimates_pool_the_repeats_as_the_summary_does() -> None:
    parts = [fcts(3.0, 101, 1), fcts(1.5, 37, 2)]
    pooled = np.concatenate(parts).tolist()
    tail = PooledSample.of(parts, percentile_ratio(99, 50)).point()
    expected = percentile_nearest_rank(pooled, 99) / percentile_nearest_rank(pooled, 50)
    assert tail == pytest.approx(expected)
    busbw = [with_cv(0.1, 7, 1), with_cv(0.3, 9, 2)]
    both = np.concatenate(busbw)
    assert PooledSample.of(busbw, cv).point() == pytest.approx(both.std() / both.mean())
    # within groups: the mean of every (repeat, group) cell's CV; cells of 1 are left out
    cells = CellSample.of(
        [[with_cv(0.1, 5, 1), with_cv(0.3, 5, 2)], [with_cv(0.2, 5, 3), [1.0]]], cv
    )
    assert cells.point() == pytest.approx(0.2) and cells.units == 15 and cells.repeats == 2


def test_the_percentile_interval_is_the_nearest_rank_2_5th_and_97_5th() -> None:
    values = np.random.default_rng(3).permutation(np.arange(1.0, 2001.0))
    assert percentile_interval(values, 0.95) == (50.0, 1950.0)
    assert percentile_interval(np.append(values, [np.nan] * 10), 0.95) == (50.0, 1950.0)
    assert percentile_interval(np.array([np.nan]), 0.95) is None


def clear_effect(mixed_cv: float) -> tuple[list[StudyRun], list[StudyRun]]:
    """3 repeats x 20 instances: CV 0.05 alone, mixed_cv mixed."""
    alone = ar_runs("allreduce_only", *(with_cv(0.05, 20, s) for s in (1, 2, 3)))
    mixed = ar_runs("mixed", *(with_cv(mixed_cv, 20, s) for s in (4, 5, 6)))
    return alone, mixed


def test_a_clear_effect_is_shown() -> None:
    check = check_allreduce_cv(*clear_effect(0.20), THRESHOLDS)
    assert check.verdict == "shown"
    assert check.alone == pytest.approx(0.05, rel=0.05) and check.mixed == pytest.approx(
        0.2, rel=0.05
    )
    assert check.ratio == pytest.approx(4.0, rel=0.1)
    assert check.ratio_ci[0] > 1.0 and check.ratio_ci[0] <= check.ratio <= check.ratio_ci[1]
    assert check.numbers["repeats_alone"] == check.numbers["repeats_mixed"] == 3
    assert "at or above 1.25 and the interval above 1; over 3 repeats" in check.detail


def test_a_ratio_at_the_threshold_whose_interval_reaches_1_is_not_shown() -> None:
    # Mixed is 1.6x alone pooled, but its repeats disagree (one calm, one noisy) and there are
    # few instances: the interval reaches below 1, so the effect may be run-to-run noise.
    alone = ar_runs("allreduce_only", with_cv(0.10, 5, 1), with_cv(0.12, 5, 2))
    mixed = ar_runs("mixed", with_cv(0.04, 5, 3), with_cv(0.26, 5, 4))
    check = check_allreduce_cv(alone, mixed, THRESHOLDS)
    assert check.ratio >= THRESHOLDS.cv_ratio_min and check.ratio_ci[0] <= 1.0
    assert check.verdict == "not shown"
    assert "but the interval reaches down to 1" in check.detail
    # The same ratio from many agreeing instances is shown.
    alone = ar_runs("allreduce_only", with_cv(0.11, 50, 1), with_cv(0.11, 50, 2))
    mixed = ar_runs("mixed", with_cv(check.ratio * 0.11, 50, 3), with_cv(check.ratio * 0.11, 50, 4))
    assert check_allreduce_cv(alone, mixed, THRESHOLDS).verdict == "shown"


def test_a_small_ratio_is_not_shown_whatever_its_interval() -> None:
    check = check_allreduce_cv(*clear_effect(0.06), THRESHOLDS)
    assert check.ratio < THRESHOLDS.cv_ratio_min and check.verdict == "not shown"
    assert ": below 1.25" in check.detail


def test_the_intervals_are_reproducible_from_their_seed() -> None:
    alone, mixed = clear_effect(0.2)
    first = check_allreduce_cv(alone, mixed, THRESHOLDS, BootstrapSpec(seed=11))
    again = check_allreduce_cv(alone, mixed, THRESHOLDS, BootstrapSpec(seed=11))
    other = check_allreduce_cv(alone, mixed, THRESHOLDS, BootstrapSpec(seed=12))
    assert (first.alone_ci, first.mixed_ci, first.ratio_ci) == (
        again.alone_ci,
        again.mixed_ci,
        again.ratio_ci,
    )
    assert first.ratio_ci != other.ratio_ci
    assert first.ratio_ci == pytest.approx(other.ratio_ci, rel=0.1)  # the seed moves it little


def test_the_repeat_level_widens_the_interval_when_repeats_disagree() -> None:
    """The same 40 instances, split two ways into 2 repeats: alike (each repeat a mix of calm
    and noisy instances) or disagreeing (the 20 nearest the mean in one repeat, the rest in the
    other: CVs far apart). Resampling units alone sees the same pool either way; resampling the
    repeats too makes the disagreeing split's interval much wider."""
    values = with_cv(0.15, 40, 7)
    order = np.argsort(np.abs(values - values.mean()))
    calm, noisy = values[order[:20]], values[order[20:]]
    assert cv(calm[None])[0] < 0.5 * cv(noisy[None])[0]
    alike = [values[order[0::2]], values[order[1::2]]]
    disagree = [calm, noisy]
    spec = BootstrapSpec()
    a = estimate_alone(PooledSample.of(alike, cv), spec)
    d = estimate_alone(PooledSample.of(disagree, cv), spec)
    assert a.point == pytest.approx(d.point)  # the same pool
    assert width(d.interval) > 2.0 * width(a.interval), (a.interval, d.interval)
    # The mixed/alone ratio inherits it.
    steady = PooledSample.of([with_cv(0.05, 20, s) for s in (1, 2)], cv)
    ratio_alike = compare(steady, PooledSample.of(alike, cv), spec).ratio_interval
    ratio_disagree = compare(steady, PooledSample.of(disagree, cv), spec).ratio_interval
    assert width(ratio_disagree) > 1.5 * width(ratio_alike)


def test_the_repeat_level_widens_the_within_group_interval_when_repeats_disagree() -> None:
    low = [with_cv(0.05, 10, s) for s in (1, 2)]
    high = [with_cv(0.30, 10, s) for s in (3, 4)]
    alike = CellSample.of([[low[0], high[0]], [low[1], high[1]]], cv)
    disagree = CellSample.of([[low[0], low[1]], [high[0], high[1]]], cv)
    a, d = estimate_alone(alike, SPEC), estimate_alone(disagree, SPEC)
    assert a.point == pytest.approx(d.point)  # the same cells
    assert width(d.interval) > 2.0 * width(a.interval), (a.interval, d.interval)


def test_one_repeat_gives_the_interval_of_its_units_and_is_not_judged() -> None:
    alone = ar_runs("allreduce_only", with_cv(0.05, 20, 1))
    mixed = ar_runs("mixed", *(with_cv(0.2, 20, s) for s in (4, 5, 6)))
    check = check_allreduce_cv(alone, mixed, THRESHOLDS)
    assert check.verdict == "not measurable" and check.ratio_ci[0] > 1.0
    assert "does not include run-to-run variation" in check.detail
    assert "2 repeats a side needed to judge" in check.detail
    judged = check_allreduce_cv(alone, mixed, StudyThresholds(repeats_min=1))
    assert judged.verdict == "shown" and "does not include run-to-run variation" in judged.detail


def test_an_alone_statistic_of_zero_gives_no_ratio_but_the_difference() -> None:
    """A ratio over 0 is unbounded: undefined, and the difference judged (issue 33; more in
    tests/unit/test_study_cv_floor.py)."""
    alone = ar_runs("allreduce_only", np.full(10, 40e9), np.full(10, 40e9))
    mixed = ar_runs("mixed", with_cv(0.2, 10, 1), with_cv(0.2, 10, 2))
    check = check_allreduce_cv(alone, mixed, THRESHOLDS)
    assert check.alone == 0.0 and check.ratio is None and check.verdict == "shown"
    assert check.ratio_undefined is not None and check.difference == pytest.approx(0.2)
    assert check.to_json()["ratio"] is None and check.to_json()["ratio_ci"] is None


def test_a_steady_mixed_cv_is_not_shown_whatever_the_ratio() -> None:
    alone, _ = clear_effect(0.2)
    alone = ar_runs("allreduce_only", *(with_cv(0.002, 20, s) for s in (1, 2, 3)))
    mixed = ar_runs("mixed", *(with_cv(0.01, 20, s) for s in (4, 5, 6)))
    check = check_allreduce_cv(alone, mixed, THRESHOLDS)
    assert check.ratio > 4 and check.verdict == "not shown" and "steady" in check.detail


def test_a_large_tail_bootstrap_stays_in_memory_bounds() -> None:
    """Batches hold at most BATCH_ELEMENTS values whatever B and the flows: 3 x 20k flows."""
    sample = PooledSample.of([fcts(3.0, 20_000, s) for s in (1, 2, 3)], percentile_ratio(99, 50))
    e = estimate_alone(sample, BootstrapSpec(resamples=100))
    assert e.interval is not None and e.interval[0] <= e.point <= e.interval[1]


@pytest.mark.parametrize("q", [1.0, 50.0, 99.0, 99.9])
def test_percentile_statistic_is_the_nearest_rank_percentile_of_each_row(q: float) -> None:
    from emulator.studies.stats.bootstrap import percentile

    rows = np.random.default_rng(7).random((5, 1001))
    got = percentile(q)(rows)
    assert list(got) == [percentile_nearest_rank(list(r), q) for r in rows]
