"""The category bars' interval is :func:`mechscope.stats.curve_ci`, the same percentile
bootstrap of the mean that anchors once computed by hand."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from mechscope.anchors.figures import mean_ci


@pytest.mark.parametrize("n", [10, 30, 100])
def test_mean_ci_is_the_percentile_bootstrap_of_the_mean(n):
    v = np.random.default_rng(n).gamma(2.0, size=n)
    mean, low, high = mean_ci(np.append(v, np.nan), seed=3)  # NaN dropped
    exact = stats.bootstrap(
        (v,), np.mean, n_resamples=2000, method="percentile", confidence_level=0.95, rng=3
    ).confidence_interval
    assert mean == pytest.approx(v.mean())
    assert (low, high) == pytest.approx((exact.low, exact.high), rel=1e-12)
    # the former hand-rolled call (scipy's legacy RandomState stream): the same interval up to
    # the Monte-Carlo noise of 2,000 resamples
    legacy = stats.bootstrap(
        (v,), np.mean, n_resamples=2000, method="percentile", random_state=3
    ).confidence_interval
    width = high - low
    assert abs(legacy.low - low) < 0.05 * width and abs(legacy.high - high) < 0.05 * width


def test_mean_ci_without_enough_values_has_no_bounds():
    assert all(np.isnan(mean_ci(np.array([np.nan, np.nan]))))
    for values in ([1.0, 2.0], [0.5, 0.5, 0.5, np.nan]):
        mean, low, high = mean_ci(np.array(values))
        assert mean == pytest.approx(np.nanmean(values)) and np.isnan(low) and np.isnan(high)
