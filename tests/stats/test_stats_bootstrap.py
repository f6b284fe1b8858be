"""Bootstrap CIs: agreement with scipy, stratification, group differences, coverage."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from mechscope.errors import InputError
from mechscope.stats import (
    curve_ci,
    group_curve_cis,
    group_difference_ci,
    stratified_curve_ci,
)
from tolerance import assert_exact, assert_fp64_close, assert_sampling_close, scale_of


def _values(n: int = 30, points: int = 7, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.gamma(2.0, size=(n, points)) + np.arange(points)  # [n, points], skewed


@pytest.mark.parametrize("method", ["percentile", "BCa"])
@pytest.mark.parametrize("batch", [None, 37])
def test_curve_ci_equals_scipy_bootstrap(method: str, batch: int | None) -> None:
    x = _values()
    got = curve_ci(x, n_resamples=500, seed=7, method=method, confidence=0.9, batch=batch)
    ref = stats.bootstrap(
        (x,),
        np.mean,
        n_resamples=500,
        vectorized=True,
        axis=0,
        confidence_level=0.9,
        method=method,
        rng=np.random.default_rng(7),
    )
    # Replicates are means of 30 resampled values: float64 sums of 30 terms at the data's scale.
    scale = scale_of(x)
    assert_fp64_close(got.low, ref.confidence_interval.low, terms=30, scale=scale, msg="low")
    assert_fp64_close(got.high, ref.confidence_interval.high, terms=30, scale=scale, msg="high")
    assert_fp64_close(got.mean, x.mean(axis=0), terms=30, scale=scale, msg="mean")
    assert got.n == 30 and got.method == method and got.confidence == 0.9
    assert got.mean.shape == got.low.shape == got.high.shape == (7,)


def test_curve_ci_skips_nan_like_scipy_with_nanmean() -> None:
    x = _values()
    x[::3, 2] = np.nan  # a third of the samples miss point 2
    got = curve_ci(x, n_resamples=300, seed=3)
    ref = stats.bootstrap(
        (x,),
        np.nanmean,
        n_resamples=300,
        vectorized=True,
        axis=0,
        method="percentile",
        rng=np.random.default_rng(3),
    )
    scale = scale_of(x)
    assert_fp64_close(got.low, ref.confidence_interval.low, terms=30, scale=scale, msg="low")
    assert_fp64_close(got.mean[2], np.nanmean(x[:, 2]), terms=30, scale=scale, msg="mean")
    assert np.all(np.isfinite(got.low)) and np.all(got.low <= got.mean)


def test_point_with_too_few_values_gets_nan_bounds_and_one_warning() -> None:
    x = _values(n=12, points=3)
    x[1:, 0] = np.nan  # one sample only: most resamples miss it
    with pytest.warns(RuntimeWarning, match="NaN at 1 of 3 points"):
        ci = curve_ci(x, n_resamples=200, seed=0)
    assert np.isnan(ci.low[0]) and ci.mean[0] == x[0, 0]
    assert np.all(np.isfinite(ci.low[1:]))


def test_curve_ci_keeps_trailing_point_shape() -> None:
    x = np.random.default_rng(0).normal(size=(20, 3, 4))  # [samples, layers, bins]
    ci = curve_ci(x, n_resamples=200, seed=0)
    flat = curve_ci(x.reshape(20, 12), n_resamples=200, seed=0)
    assert ci.low.shape == (3, 4)
    assert_fp64_close(ci.low.reshape(12), flat.low, terms=20, scale=scale_of(x))


def test_curve_ci_is_reproducible_and_seed_dependent() -> None:
    x = _values()
    a, b = curve_ci(x, n_resamples=200, seed=1), curve_ci(x, n_resamples=200, seed=1)
    c = curve_ci(x, n_resamples=200, seed=2)
    np.testing.assert_array_equal(a.low, b.low)
    assert not np.array_equal(a.low, c.low)


def test_curve_ci_coverage_of_known_mean() -> None:
    # 400 independent "points", each its own normal data set with true mean 0.
    x = np.random.default_rng(11).normal(size=(40, 400))  # [n_samples, n_points]
    ci = curve_ci(x, n_resamples=1000, seed=0)
    coverage = np.mean((ci.low <= 0.0) & (ci.high >= 0.0))
    # Percentile bootstrap of a mean at n=40 covers ~0.93-0.95; binomial sd at 400 is ~0.011.
    assert 0.89 <= coverage <= 0.99


def test_stratified_keeps_stratum_sizes() -> None:
    # Strata with constant values: if every replicate keeps 4 zeros and 6 ones the overall
    # mean is always 0.6, so a stratified band has zero width. A plain bootstrap would not.
    x = np.repeat(np.array([0.0, 0.0, 0.0, 0.0, 1, 1, 1, 1, 1, 1])[:, None], 3, axis=1)
    strata = ["a"] * 4 + ["b"] * 6
    ci = stratified_curve_ci(x, strata, n_resamples=400, seed=0)
    # Every replicate sums 6 ones and divides by 10, and the percentiles of equal values
    # are that value: 6 / 10 bit for bit.
    assert_exact(ci.low, np.full(3, 6 / 10))
    assert_exact(ci.high, np.full(3, 6 / 10))
    plain = curve_ci(x, n_resamples=400, seed=0)
    assert np.all(plain.high - plain.low > 0.1)


def test_stratified_width_matches_analytic_standard_error() -> None:
    rng = np.random.default_rng(5)
    sizes, sds = [40, 80, 30], [1.0, 3.0, 0.5]
    parts = [
        rng.normal(loc=10 * i, scale=s, size=(n, 25))
        for i, (n, s) in enumerate(zip(sizes, sds, strict=True))
    ]
    x = np.concatenate(parts)  # [150, 25]
    strata = [str(i) for i, n in enumerate(sizes) for _ in range(n)]
    ci = stratified_curve_ci(x, strata, n_resamples=4000, seed=1)
    # Bootstrap variance of the stratified mean: Σ (n_s/n)² · var_s(ddof=0) / n_s.
    n = x.shape[0]
    se = np.sqrt(sum((p.shape[0] / n) ** 2 * p.var(axis=0) / p.shape[0] for p in parts))
    ratio = (ci.high - ci.low) / (2 * stats.norm.ppf(0.975) * se)  # [25], each 1 in expectation
    # The 25 points are independent data sets: their ratios' spread is the Monte-Carlo error
    # of one band's width, and their mean's standard error is that over √25.
    assert_sampling_close(np.mean(ratio), 1.0, se=np.std(ratio, ddof=1) / np.sqrt(ratio.size))
    # Between-strata differences are huge here; ignoring strata would widen the band a lot.
    plain = curve_ci(x, n_resamples=1000, seed=1)
    assert np.all(plain.high - plain.low > 2 * (ci.high - ci.low))


def test_stratified_singleton_stratum_is_a_fixed_contribution() -> None:
    x = _values(n=6, points=4)
    strata = ["a"] * 5 + ["b"]
    base = stratified_curve_ci(x, strata, n_resamples=300, seed=4)
    shifted = x.copy()
    shifted[5] += 6.0  # moves the overall mean of every replicate by exactly 6/6 = 1
    moved = stratified_curve_ci(shifted, strata, n_resamples=300, seed=4)
    # Differences of replicates (means of 6 values) rounded at the shifted data's scale.
    scale = scale_of(shifted)
    assert_fp64_close(moved.low - base.low, 1.0, terms=6, scale=scale, msg="low")
    assert_fp64_close(moved.high - base.high, 1.0, terms=6, scale=scale, msg="high")
    assert_fp64_close(base.mean, x.mean(axis=0), terms=6, scale=scale, msg="mean")


def test_stratified_bca_runs_and_brackets_mean() -> None:
    x = _values(n=24)
    strata = ["a", "b", "c"] * 8
    ci = stratified_curve_ci(x, strata, n_resamples=300, seed=0, method="BCa")
    assert np.all(ci.low <= ci.mean) and np.all(ci.mean <= ci.high)


def test_group_curve_cis_per_group() -> None:
    x = _values(n=20)
    groups = ["g1"] * 8 + ["g0"] * 12
    cis = group_curve_cis(x, groups, n_resamples=300, seed=9)
    assert sorted(cis) == ["g0", "g1"]
    assert_fp64_close(cis["g1"].mean, x[:8].mean(axis=0), terms=8, scale=scale_of(x[:8]))
    assert cis["g0"].n == 12 and cis["g1"].n == 8
    # The first group (sorted order) draws first from a fresh generator seeded with 9.
    ref = stats.bootstrap(
        (x[8:],),
        np.mean,
        n_resamples=300,
        vectorized=True,
        axis=0,
        method="percentile",
        rng=np.random.default_rng(9),
    )
    assert_fp64_close(cis["g0"].low, ref.confidence_interval.low, terms=12, scale=scale_of(x))


def test_group_difference_equals_two_sample_scipy_bootstrap() -> None:
    x = _values(n=25)
    groups = ["a"] * 10 + ["b"] * 15
    got = group_difference_ci(x, groups, "a", "b", n_resamples=400, seed=2)

    def diff(sa: np.ndarray, sb: np.ndarray, axis: int = -1) -> np.ndarray:
        return sa.mean(axis=axis) - sb.mean(axis=axis)

    ref = stats.bootstrap(
        (x[:10], x[10:]),
        diff,
        n_resamples=400,
        vectorized=True,
        paired=False,
        axis=0,
        method="percentile",
        rng=np.random.default_rng(2),
    )
    # A difference of two means (of 10 and 15 values): rounded at the data's scale.
    scale = scale_of(x)
    assert_fp64_close(got.low, ref.confidence_interval.low, terms=15, scale=scale, msg="low")
    assert_fp64_close(got.high, ref.confidence_interval.high, terms=15, scale=scale, msg="high")
    want = x[:10].mean(0) - x[10:].mean(0)
    assert_fp64_close(got.mean, want, terms=15, scale=scale, msg="mean")
    assert got.n == 25


def test_group_difference_detects_a_shift() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(60, 5))
    x[:30] += 2.0
    groups = ["hi"] * 30 + ["lo"] * 30
    ci = group_difference_ci(x, groups, "hi", "lo", n_resamples=1000, seed=0)
    assert np.all(ci.low > 0.5)  # the shift of 2 is far outside sampling noise
    assert np.sum((ci.low <= 2.0) & (ci.high >= 2.0)) >= 4  # and the band covers it
    rev = group_difference_ci(x, groups, "lo", "hi", n_resamples=1000, seed=0)
    assert_exact(rev.mean, -ci.mean)  # b − a is −(a − b) bit for bit in IEEE arithmetic
    assert np.all(rev.high < -0.5)


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: curve_ci(np.ones((1, 3))), "values"),
        (lambda: curve_ci(np.ones((4, 3)), method="basic"), "method"),
        (lambda: curve_ci(np.ones((4, 3)), confidence=1.0), "confidence"),
        (lambda: curve_ci(np.ones((4, 3)), n_resamples=0), "n_resamples"),
        (lambda: stratified_curve_ci(np.ones((4, 3)), ["a", "b"]), "strata"),
        (lambda: stratified_curve_ci(np.ones((2, 3)), ["a", "b"]), "strata"),
        (lambda: group_difference_ci(np.ones((4, 3)), list("aabc"), "a", "b"), "groups"),
        (lambda: group_curve_cis(np.ones((3, 2)), list("aab")), "groups"),
    ],
)
def test_bad_input_raises_input_error(call, field: str) -> None:
    with pytest.raises(InputError) as err:
        call()
    assert err.value.field == field
