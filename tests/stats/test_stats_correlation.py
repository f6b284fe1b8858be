"""Correlations against numpy.corrcoef / plain loops, and split-half reliability."""

from __future__ import annotations

import numpy as np
import pytest
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


def test_pearson_spearman_cosine_match_references() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=50)
    y = 0.6 * x + rng.normal(size=50)
    y[:5] = y[5]  # ties for the rank correlation
    assert pearson(x, y) == pytest.approx(np.corrcoef(x, y)[0, 1], abs=1e-12)
    ranks = np.corrcoef(stats.rankdata(x), stats.rankdata(y))[0, 1]  # average ranks for ties
    assert spearman(x, y) == pytest.approx(ranks, abs=1e-12)
    dot = sum(a * b for a, b in zip(x, y, strict=True))
    ref = dot / (sum(a * a for a in x) ** 0.5 * sum(b * b for b in y) ** 0.5)
    assert cosine(x, y) == pytest.approx(ref, abs=1e-12)
    # Cosine sees a shared offset, Pearson does not.
    assert pearson(x + 100, y) == pytest.approx(pearson(x, y), abs=1e-9)
    assert cosine(x + 100, y) != pytest.approx(cosine(x, y), abs=1e-3)


def test_constant_vectors_give_nan() -> None:
    x = np.arange(5.0)
    assert np.isnan(pearson(x, np.ones(5)))
    assert np.isnan(spearman(np.ones(5), x))
    assert np.isnan(cosine(np.zeros(5), x))


def test_pairwise_pearson_matrix_matches_corrcoef() -> None:
    X = np.random.default_rng(1).normal(size=(12, 40)) * np.arange(1, 13)[:, None]  # [n, d]
    got = pairwise_pearson_matrix(X)
    np.testing.assert_allclose(got, np.corrcoef(X), rtol=0, atol=1e-12)
    np.testing.assert_array_equal(np.diag(got), np.ones(12))


def test_pairwise_constant_row_is_nan() -> None:
    X = np.random.default_rng(2).normal(size=(4, 10))
    X[2] = 0.1
    got = pairwise_pearson_matrix(X)
    assert np.all(np.isnan(got[2])) and np.all(np.isnan(got[:, 2]))
    keep = [0, 1, 3]
    np.testing.assert_allclose(got[np.ix_(keep, keep)], np.corrcoef(X[keep]), atol=1e-12)


def test_summary_offdiag_matches_loop() -> None:
    M = np.random.default_rng(3).uniform(-1, 1, size=(6, 6))
    M[1, 4] = np.nan
    vals = [M[i, j] for i in range(6) for j in range(6) if i != j and not np.isnan(M[i, j])]
    mean, lo, hi = summary_offdiag(M)
    assert mean == pytest.approx(sum(vals) / len(vals), abs=1e-12)
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
    assert got.reliability == pytest.approx(_split_half_loop(X, 25, 3), abs=1e-12)
    assert got.split_r.shape == (25,)
    assert got.reliability == pytest.approx(2 * got.mean_r / (1 + got.mean_r), abs=1e-12)


def test_split_half_recovers_known_reliability() -> None:
    # Item signal variance 1, per-trace noise variance 20, 20 traces: the reliability of
    # the 20-trace mean is 20 / (20 + 20) = 0.5 (classical test theory).
    rng = np.random.default_rng(5)
    signal = rng.normal(size=2000)  # [n_items]
    X = signal + rng.normal(scale=np.sqrt(20.0), size=(20, 2000))  # [n_traces, n_items]
    got = split_half_reliability(X, n_splits=50, seed=0)
    assert got.reliability == pytest.approx(0.5, abs=0.05)
    pure_noise = rng.normal(size=(20, 2000))
    assert abs(split_half_reliability(pure_noise, n_splits=50).reliability) < 0.1


def test_split_half_skips_missing_items() -> None:
    X = np.random.default_rng(6).normal(size=(6, 20)) + np.arange(20)
    X[:, 0] = np.nan  # an item nobody measured
    full = split_half_reliability(X[:, 1:], n_splits=10, seed=1)
    got = split_half_reliability(X, n_splits=10, seed=1)
    assert got.reliability == pytest.approx(full.reliability, abs=1e-12)


def test_bad_input_raises() -> None:
    with pytest.raises(InputError, match="'y'"):
        pearson(np.arange(3.0), np.arange(4.0))
    with pytest.raises(InputError, match="'M'"):
        summary_offdiag(np.ones((2, 3)))
    with pytest.raises(InputError, match="'X'"):
        split_half_reliability(np.ones((1, 5)))
