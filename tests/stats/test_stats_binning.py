"""Progress bins, first-k and anchor alignment against plain loops."""

from __future__ import annotations

import numpy as np
import pytest

from mechscope.errors import InputError
from mechscope.stats import (
    anchor_align,
    first_k,
    nanmean_stack,
    progress_bin_counts,
    progress_bins,
)
from tolerance import assert_fp64_close, scale_of


def _tokens(n_layers: int, n_tokens: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n_layers, n_tokens))  # [layers, tokens]


def _bins_loop(values: np.ndarray, n_bins: int) -> np.ndarray:
    n_layers, K = values.shape
    out = np.full((n_layers, n_bins), np.nan)
    for b in range(n_bins):
        members = [k for k in range(K) if (k * n_bins) // K == b]
        for layer in range(n_layers):
            vals = [values[layer, k] for k in members if not np.isnan(values[layer, k])]
            if vals:
                out[layer, b] = sum(vals) / len(vals)
    return out


@pytest.mark.parametrize("n_tokens", [1, 7, 49, 50, 51, 137, 1000])
def test_progress_bins_conserve_token_mass(n_tokens: int) -> None:
    x = _tokens(4, n_tokens)
    means, counts = progress_bins(x, 50), progress_bin_counts(n_tokens, 50)
    assert means.shape == (4, 50) and counts.sum() == n_tokens
    mass = np.nansum(means * counts, axis=1)  # empty bins: NaN mean × 0 tokens
    # Sums of a row's tokens in two orders: rounded at the partial sums' magnitude.
    row_scale = scale_of(x, np.cumsum(x, axis=1))
    assert_fp64_close(mass, x.sum(axis=1), terms=n_tokens, scale=row_scale, msg="mass")
    terms = int(counts.max())  # a bin's mean sums its tokens
    assert_fp64_close(means, _bins_loop(x, 50), terms=terms, scale=scale_of(x), msg="means")


def test_short_sequences_leave_empty_bins_nan() -> None:
    x = _tokens(2, 10)
    got = progress_bins(x, 50)
    counts = progress_bin_counts(10, 50)
    assert np.array_equal(np.isnan(got[0]), counts == 0)
    assert counts.max() == 1 and (counts == 1).sum() == 10
    np.testing.assert_array_equal(got[:, [0, 5, 45]], x[:, [0, 1, 9]])  # bin floor(k*50/10)


def test_progress_bins_skip_nan_tokens() -> None:
    x = _tokens(3, 120)
    x[0, 5:9] = np.nan
    x[1, :] = np.nan
    got = progress_bins(x, 20)
    assert_fp64_close(got, _bins_loop(x, 20), terms=120 // 20, scale=scale_of(x))
    assert np.all(np.isnan(got[1]))
    assert np.all(np.isnan(progress_bins(np.zeros((3, 0)), 5)))


def test_first_k_truncates_and_pads() -> None:
    x = _tokens(3, 6)
    np.testing.assert_array_equal(first_k(x, 4), x[:, :4])
    padded = first_k(x, 9)
    np.testing.assert_array_equal(padded[:, :6], x)
    assert padded.shape == (3, 9) and np.all(np.isnan(padded[:, 6:]))


@pytest.mark.parametrize(
    ("anchor", "before", "after"), [(0, 3, 2), (5, 3, 4), (9, 2, 5), (4, 0, 1)]
)
def test_anchor_align_matches_loop(anchor: int, before: int, after: int) -> None:
    x = _tokens(2, 10)
    got = anchor_align(x, anchor, before, after)
    assert got.shape == (2, before + after)
    for j in range(before + after):
        k = anchor - before + j
        if 0 <= k < 10:
            np.testing.assert_array_equal(got[:, j], x[:, k])
        else:
            assert np.all(np.isnan(got[:, j]))
    if after:
        np.testing.assert_array_equal(got[:, before], x[:, anchor])


def test_nanmean_stack_and_shape_errors() -> None:
    a, b = progress_bins(_tokens(3, 10), 8), progress_bins(_tokens(3, 80, seed=1), 8)
    stacked = nanmean_stack([a, b])
    assert stacked.shape == (2, 3, 8)
    np.testing.assert_array_equal(np.nanmean(stacked, axis=0)[np.isnan(a)], b[np.isnan(a)])
    with pytest.raises(InputError, match="sample 'q7'"):
        nanmean_stack([a, a[:, :5]], sample_ids=["q1", "q7"])


def test_bad_inputs_raise() -> None:
    x = _tokens(2, 5)
    with pytest.raises(InputError, match="anchor_index"):
        anchor_align(x, 5, 1, 1)
    with pytest.raises(InputError, match="n_bins"):
        progress_bins(x, 0)
    with pytest.raises(InputError, match="'k'"):
        first_k(x, 0)
