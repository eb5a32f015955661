"""Percentiles (nearest-rank), CV and nccl-tests busbw against hand-computed values."""

from __future__ import annotations

import pytest

from collectors.stats import coefficient_of_variation, mean, percentile_nearest_rank
from emulator.schedule.busbw import busbw_bytes_per_s


@pytest.mark.parametrize(
    ("p", "expected"),
    # The textbook nearest-rank example: rank = ceil(p/100 * 5).
    [(0, 15), (5, 15), (30, 20), (40, 20), (50, 35), (80, 40), (81, 50), (100, 50)],
)
def test_nearest_rank_percentile_of_five_values(p: float, expected: float) -> None:
    assert percentile_nearest_rank([50, 15, 40, 20, 35], p) == expected


def test_tail_percentiles_pick_measured_values() -> None:
    values = [float(v) for v in range(1, 1001)]  # 1..1000
    assert percentile_nearest_rank(values, 50) == 500.0
    assert percentile_nearest_rank(values, 99) == 990.0
    assert percentile_nearest_rank(values, 99.9) == 999.0
    assert percentile_nearest_rank(values, 5) == 50.0


def test_percentile_of_nothing_is_none_and_p_is_checked() -> None:
    assert percentile_nearest_rank([], 50) is None
    with pytest.raises(ValueError, match=r"0\.\.100"):
        percentile_nearest_rank([1.0], 101)


def test_cv_is_population_std_over_mean() -> None:
    # mean 5, population variance 4 -> std 2 -> CV 0.4 (sample std would give 0.428).
    assert coefficient_of_variation([2, 4, 4, 4, 5, 5, 7, 9]) == pytest.approx(0.4)
    assert coefficient_of_variation([3.0, 3.0]) == 0.0
    assert coefficient_of_variation([]) is None
    assert mean([1.0, 2.0]) == 1.5


@pytest.mark.parametrize(
    ("collective", "n", "size", "time_s", "expected"),
    [
        # AllReduce: algbw 1 GB / 10 ms = 100 GB/s, x 2(8-1)/8 = 175 GB/s.
        ("ALL_REDUCE", 8, 1_000_000_000, 0.01, 175e9),
        # AllToAll: 4 MB / 2 ms = 2 GB/s, x 3/4.
        ("ALL_TO_ALL", 4, 4_000_000, 0.002, 1.5e9),
        ("ALL_GATHER", 2, 1_000, 1e-6, 0.5e9),
        ("BROADCAST", 16, 1_000, 1e-6, 1e9),
    ],
)
def test_busbw_matches_nccl_tests(
    collective: str, n: int, size: int, time_s: float, expected: float
) -> None:
    assert busbw_bytes_per_s(collective, n, size, time_s) == pytest.approx(expected)
