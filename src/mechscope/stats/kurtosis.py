"""Kurtosis of score distributions: how peaked is a head's attention over sentences?

Receiver heads (thought anchors) are attention heads whose sentence-level attention
concentrates on a few sentences; the kurtosis of a head's per-sentence scores measures
that concentration. This is a thin wrapper on :func:`scipy.stats.kurtosis` that fixes the
choices once so every workflow reports the same number:

- ``fisher=True``: excess kurtosis (normal = 0), so "positive = heavier-tailed than normal".
- ``bias=True``: the plain moment ratio ``m4 / m2²`` without small-sample correction. It is
  what the thought-anchors reference computes, and it is defined for any length >= 1
  (the corrected estimator needs 4+ values and is unstable for the short sentence lists
  of a single trace).
- ``nan_policy="omit"``: NaN marks a missing value (e.g. a sentence too close to the end
  to receive long-range attention) and is skipped per slice. Slices with no value left
  give NaN, without scipy's small-sample warning. A constant slice also gives NaN.
"""

from __future__ import annotations

import warnings
from typing import Literal

import numpy as np
from scipy import stats

from mechscope.errors import InputError
from mechscope.stats._checks import as_float_array


def kurtosis_across(
    x: np.ndarray,
    axis: int = -1,
    *,
    fisher: bool = True,
    bias: bool = True,
    nan_policy: Literal["omit", "propagate", "raise"] = "omit",
) -> np.ndarray:
    """Kurtosis of ``x`` along ``axis``, as a float64 array (0-d for a 1-d input).

    E.g. ``x`` of shape ``[layers, heads, sentences]`` with ``axis=-1`` gives
    ``[layers, heads]``.
    """
    arr = as_float_array(x, field="x")
    if not -arr.ndim <= axis < arr.ndim:
        raise InputError(f"expected an axis of a {arr.ndim}-d array, got {axis}", field="axis")
    with warnings.catch_warnings():
        # Expected outcomes for empty or constant slices: they return NaN, documented above.
        # (scipy's SmallSampleWarning is a RuntimeWarning subclass in a private module.)
        warnings.filterwarnings("ignore", r".*too small", RuntimeWarning)
        warnings.filterwarnings("ignore", "Precision loss occurred", RuntimeWarning)
        out = stats.kurtosis(arr, axis=axis, fisher=fisher, bias=bias, nan_policy=nan_policy)
    return np.asarray(np.ma.filled(out, np.nan), dtype=np.float64)
