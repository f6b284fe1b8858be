"""Kurtosis wrapper against scipy and a plain moment loop, with NaNs."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy import stats

from mechscope.errors import InputError
from mechscope.stats import kurtosis_across
from tolerance import assert_exact, assert_fp64_close


def _scores() -> np.ndarray:
    x = np.random.default_rng(0).standard_t(4, size=(3, 5, 40))  # [layers, heads, sentences]
    x[0, 1, :7] = np.nan  # sentences excluded by a proximity window
    x[2, 3, ::2] = np.nan
    return x


def test_matches_scipy_with_nans() -> None:
    x = _scores()
    got = kurtosis_across(x, axis=-1)
    ref = stats.kurtosis(x, axis=-1, fisher=True, bias=True, nan_policy="omit")
    assert got.shape == (3, 5) and got.dtype == np.float64
    # The wrapper is scipy's call with its choices fixed: the same arithmetic, bit for bit.
    assert_exact(got, ref)
    assert_exact(
        kurtosis_across(x, axis=1, fisher=False, bias=False),
        stats.kurtosis(x, axis=1, fisher=False, bias=False, nan_policy="omit"),
    )


def test_matches_moment_loop() -> None:
    x = _scores()
    got = kurtosis_across(x, axis=-1)
    for i in range(3):
        for j in range(5):
            v = [float(a) for a in x[i, j] if not np.isnan(a)]
            m = sum(v) / len(v)
            m2 = sum((a - m) ** 2 for a in v) / len(v)
            m4 = sum((a - m) ** 4 for a in v) / len(v)
            # Moments of up to 40 centred values; the excess is rounded at m4 / m2².
            ratio = m4 / m2**2
            assert_fp64_close(got[i, j], ratio - 3.0, terms=len(v), scale=ratio, msg=f"{i},{j}")


def test_peaked_beats_flat_and_edge_cases_are_nan_silently() -> None:
    peaked = np.zeros(30)
    peaked[4] = 1.0  # one sentence receives all the attention
    flat = np.linspace(0, 1, 30)
    assert kurtosis_across(peaked) > 20 > 0 > kurtosis_across(flat)
    x = np.vstack([np.full(6, np.nan), np.ones(6), np.arange(6.0)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = kurtosis_across(x, axis=1)
    assert np.isnan(got[0]) and np.isnan(got[1]) and np.isfinite(got[2])


def test_bad_axis_raises() -> None:
    with pytest.raises(InputError, match="axis"):
        kurtosis_across(np.ones((2, 3)), axis=2)
