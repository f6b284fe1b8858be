"""Benjamini–Hochberg against a plain step-up loop."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mechscope.errors import InputError
from mechscope.stats import bh_adjust, bh_reject, holm_adjust
from tolerance import assert_fp64_close, assert_within, rounding_tolerance


def _bh_loop(p: list[float]) -> list[float]:
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    adjusted = [0.0] * m
    running = 1.0
    for rank in range(m, 0, -1):  # step-up: from the largest p-value down
        i = order[rank - 1]
        running = min(running, p[i] * m / rank)
        adjusted[i] = running
    return adjusted


def _product_rounding(ref: list[float]) -> np.ndarray:
    """An adjusted p-value is ``p · m / rank`` (a product and a quotient, in either order):
    two float64 roundings relative to the value itself, however small."""
    return rounding_tolerance(np.abs(np.asarray(ref)), 2, torch.float64)


def test_bh_adjust_matches_loop() -> None:
    p = np.random.default_rng(0).uniform(size=200) ** 3  # [n_tests], many small
    ref = _bh_loop(list(p))
    assert_within(bh_adjust(p), ref, _product_rounding(ref))


def test_textbook_example() -> None:
    p = np.array([0.01, 0.04, 0.03, 0.005])
    # p · m / rank: 0.005 · 4, 0.01 · 4 / 2, 0.03 · 4 / 3, 0.04 · 4 / 4 (step-up minimum).
    assert_fp64_close(bh_adjust(p), [0.02, 0.04, 0.04, 0.02], terms=2)
    np.testing.assert_array_equal(bh_reject(p, alpha=0.03), [True, False, False, True])


def test_shape_kept_and_nan_excluded_from_family() -> None:
    p = np.random.default_rng(1).uniform(size=(4, 6)) ** 2  # [layers, heads]
    p[1, 2] = np.nan
    got = bh_adjust(p)
    assert got.shape == (4, 6) and np.isnan(got[1, 2])
    finite = ~np.isnan(p)
    ref = _bh_loop(list(p[finite]))
    assert_within(got[finite], ref, _product_rounding(ref))
    assert not bh_reject(p, alpha=0.5)[1, 2]


def test_bad_pvalues_raise() -> None:
    with pytest.raises(InputError, match="pvalues"):
        bh_adjust(np.array([0.1, 1.2]))
    with pytest.raises(InputError, match="alpha"):
        bh_reject(np.array([0.1]), alpha=0.0)


def test_holm_adjust_matches_loop() -> None:
    """Holm's step-down against its definition: the running maximum of ``(m - i)·p_(i)``
    over the sorted p-values, capped at 1; NaN tests out of the family."""
    rng = np.random.default_rng(5)
    p = rng.uniform(0, 0.2, 9)
    order = np.argsort(p)
    ref = np.empty_like(p)
    running = 0.0
    for i, j in enumerate(order):
        running = max(running, min(1.0, (len(p) - i) * p[j]))
        ref[j] = running
    assert_within(holm_adjust(p), ref, _product_rounding(ref))
    with_nan = np.append(p, np.nan)
    got = holm_adjust(with_nan)
    assert np.isnan(got[-1])
    assert_within(got[:-1], ref, _product_rounding(ref))
