"""Correlations against numpy.corrcoef / plain loops, and split-half reliability."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from mechscope.errors import InputError
from mechscope.stats import (
    cosine,
    pairwise_pearson_matrix,
    pearson,
    spearman,
    split_half_reliability,
    summary_offdiag,
)
from tolerance import assert_beyond_rounding, assert_fp64_close, assert_sampling_close, scale_of


def test_pearson_spearman_cosine_match_references() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=50)
    y = 0.6 * x + rng.normal(size=50)
    y[:5] = y[5]  # ties for the rank correlation
    # A correlation is a normalised sum of 50 products: its rounding is eps · √50 at scale 1
    # (|Σ aᵢbᵢ| ≤ ‖a‖‖b‖), times max|x| / std(x) where centring subtracts a large mean.
    assert_fp64_close(pearson(x, y), np.corrcoef(x, y)[0, 1], terms=50, msg="pearson")
    ranks = np.corrcoef(stats.rankdata(x), stats.rankdata(y))[0, 1]  # average ranks for ties
    assert_fp64_close(spearman(x, y), ranks, terms=50, msg="spearman")
    assert_fp64_close(cosine(x, y), _cosine_loop(x, y), terms=50, msg="cosine")
    # Cosine sees a shared offset, Pearson does not (its centring rounds at 100 + |x|).
    offset = scale_of(x + 100) / np.std(x)
    assert_fp64_close(pearson(x + 100, y), pearson(x, y), terms=50, scale=offset, msg="offset")
    assert_fp64_close(cosine(x + 100, y), _cosine_loop(x + 100, y), terms=50, msg="cos offset")
    assert_beyond_rounding(
        cosine(x + 100, y), cosine(x, y), depth=50, scale=1.0, dtype=torch.float64, msg="moved"
    )


def _cosine_loop(x: np.ndarray, y: np.ndarray) -> float:
    dot = sum(a * b for a, b in zip(x, y, strict=True))
    return dot / (sum(a * a for a in x) ** 0.5 * sum(b * b for b in y) ** 0.5)


def test_constant_vectors_give_nan() -> None:
    x = np.arange(5.0)
    assert np.isnan(pearson(x, np.ones(5)))
    assert np.isnan(spearman(np.ones(5), x))
    assert np.isnan(cosine(np.zeros(5), x))


def test_pairwise_pearson_matrix_matches_corrcoef() -> None:
    X = np.random.default_rng(1).normal(size=(12, 40)) * np.arange(1, 13)[:, None]  # [n, d]
    got = pairwise_pearson_matrix(X)
    assert_fp64_close(got, np.corrcoef(X), terms=40, scale=1.0)  # correlations: scale 1
    np.testing.assert_array_equal(np.diag(got), np.ones(12))


def test_pairwise_constant_row_is_nan() -> None:
    X = np.random.default_rng(2).normal(size=(4, 10))
    X[2] = 0.1
    got = pairwise_pearson_matrix(X)
    assert np.all(np.isnan(got[2])) and np.all(np.isnan(got[:, 2]))
    keep = [0, 1, 3]
    assert_fp64_close(got[np.ix_(keep, keep)], np.corrcoef(X[keep]), terms=10, scale=1.0)


def test_summary_offdiag_matches_loop() -> None:
    M = np.random.default_rng(3).uniform(-1, 1, size=(6, 6))
    M[1, 4] = np.nan
    vals = [M[i, j] for i in range(6) for j in range(6) if i != j and not np.isnan(M[i, j])]
    mean, lo, hi = summary_offdiag(M)
    assert_fp64_close(mean, sum(vals) / len(vals), terms=len(vals), scale=scale_of(M))
    assert (lo, hi) == (min(vals), max(vals))
    assert all(np.isnan(v) for v in summary_offdiag(np.full((3, 3), np.nan)))


def _split_half_loop(X: np.ndarray, n_splits: int, seed: int) -> float:
    rng = np.random.default_rng(seed)
    rs = []
    for _ in range(n_splits):
        order = rng.permutation(X.shape[0])
        h = X.shape[0] // 2
        a, b = X[order[:h]].mean(axis=0), X[order[h:]].mean(axis=0)
        rs.append(np.corrcoef(a, b)[0, 1])
    r = float(np.mean(rs))
    return 2 * r / (1 + r)


def test_split_half_matches_loop() -> None:
    X = np.random.default_rng(4).normal(size=(9, 30)) + np.linspace(0, 2, 30)
    got = split_half_reliability(X, n_splits=25, seed=3)
    # Correlations of item means (4 or 5 traces each): centring rounds at the items' largest
    # magnitude, relative to the spread of their means.
    spread = scale_of(X) / np.std(X.mean(axis=0))
    assert_fp64_close(got.reliability, _split_half_loop(X, 25, 3), terms=30, scale=spread)
    assert got.split_r.shape == (25,)
    assert got.reliability == 2 * got.mean_r / (1 + got.mean_r)  # the same expression


def test_split_half_recovers_known_reliability() -> None:
    # Item signal variance 1, per-trace noise variance 20, 20 traces: the reliability of
    # the 20-trace mean is 20 / (20 + 20) = 0.5 (classical test theory).
    n_items = 20_000
    rng = np.random.default_rng(5)
    signal = rng.normal(size=n_items)  # [n_items]
    X = signal + rng.normal(scale=np.sqrt(20.0), size=(20, n_items))  # [n_traces, n_items]
    got = split_half_reliability(X, n_splits=50, seed=0)
    assert_sampling_close(got.reliability, 0.5, se=_reliability_se(got.mean_r, n_items))
    pure_noise = rng.normal(size=(20, n_items))
    noise = split_half_reliability(pure_noise, n_splits=50)
    assert_sampling_close(noise.reliability, 0.0, se=_reliability_se(noise.mean_r, n_items))


def _reliability_se(r: float, n_items: int) -> float:
    """Standard error of ``2r / (1 + r)`` from one split's ``r`` over ``n_items`` items
    (Fisher's ``se(r) ≈ (1 − r²) / √(n − 3)``); averaging over splits only narrows it."""
    return 2 / (1 + r) ** 2 * (1 - r**2) / np.sqrt(n_items - 3)


def test_split_half_skips_missing_items() -> None:
    X = np.random.default_rng(6).normal(size=(6, 20)) + np.arange(20)
    X[:, 0] = np.nan  # an item nobody measured
    full = split_half_reliability(X[:, 1:], n_splits=10, seed=1)
    got = split_half_reliability(X, n_splits=10, seed=1)
    # The missing item is left out before anything is summed: the same numbers, bit for bit.
    assert got.reliability == full.reliability


def test_bad_input_raises() -> None:
    with pytest.raises(InputError, match="'y'"):
        pearson(np.arange(3.0), np.arange(4.0))
    with pytest.raises(InputError, match="'M'"):
        summary_offdiag(np.ones((2, 3)))
    with pytest.raises(InputError, match="'X'"):
        split_half_reliability(np.ones((1, 5)))
