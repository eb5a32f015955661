"""The study's seed figures: Student's t bands over repeats, pointwise CDF bands."""

from __future__ import annotations

import math

import numpy as np
import pytest

from emulator.studies.interference.plots import cdf_band, mean_band, t95


def test_t_quantiles_are_the_tabulated_ones_and_never_narrower() -> None:
    assert t95(1) == 12.706 and t95(2) == 4.303 and t95(10) == 2.228
    assert t95(12) == t95(10)  # between tabulated rows: the wider one below
    assert t95(31) == 1.96
    with pytest.raises(ValueError, match="at least 2 repeats"):
        t95(0)


def test_mean_band_is_the_t_interval_of_the_repeats() -> None:
    # 3 repeats at one point: 1, 2, 3 -> mean 2, s 1, half-width 4.303 / sqrt(3)
    samples = np.array([[1.0, 10.0], [2.0, np.nan], [3.0, 30.0]])
    mean, low, high = mean_band(samples)
    assert mean[0] == 2.0 and low is not None and high is not None
    assert high[0] - mean[0] == pytest.approx(4.303 / math.sqrt(3))
    # second point: 2 repeats (10, 30): mean 20, s 14.142, t(1) 12.706
    assert mean[1] == 20.0
    assert high[1] - 20.0 == pytest.approx(12.706 * math.sqrt(200) / math.sqrt(2))


def test_one_repeat_has_no_band() -> None:
    mean, low, high = mean_band(np.array([[5.0, 6.0]]))
    assert list(mean) == [5.0, 6.0] and low is None and high is None


def test_cdf_band_pools_flows_and_bands_the_repeats_cdfs() -> None:
    a, b = np.array([1.0, 2.0, 3.0, 4.0]), np.array([2.0, 4.0])
    grid = np.array([1.0, 2.0, 3.0, 4.0])
    pooled, low, high = cdf_band([a, b], grid)
    # pooled flows 1, 2, 2, 3, 4, 4: at 2 -> 3/6
    assert list(pooled) == [1 / 6, 3 / 6, 4 / 6, 1.0]
    assert low is not None and high is not None
    # at 4 both CDFs are 1: no spread; at 1: 0.25 and 0 -> a band around 0.125, clipped at 0
    assert low[3] == high[3] == 1.0
    assert low[0] == 0.0 and high[0] > 0.25
