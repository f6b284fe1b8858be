"""Benjamini–Hochberg against a plain step-up loop."""

from __future__ import annotations

import numpy as np
import pytest

from mechscope.errors import InputError
from mechscope.stats import bh_adjust, bh_reject


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


def test_bh_adjust_matches_loop() -> None:
    p = np.random.default_rng(0).uniform(size=200) ** 3  # [n_tests], many small
    np.testing.assert_allclose(bh_adjust(p), _bh_loop(list(p)), rtol=0, atol=1e-12)


def test_textbook_example() -> None:
    p = np.array([0.01, 0.04, 0.03, 0.005])
    np.testing.assert_allclose(bh_adjust(p), [0.02, 0.04, 0.04, 0.02], rtol=0, atol=1e-12)
    np.testing.assert_array_equal(bh_reject(p, alpha=0.03), [True, False, False, True])


def test_shape_kept_and_nan_excluded_from_family() -> None:
    p = np.random.default_rng(1).uniform(size=(4, 6)) ** 2  # [layers, heads]
    p[1, 2] = np.nan
    got = bh_adjust(p)
    assert got.shape == (4, 6) and np.isnan(got[1, 2])
    finite = ~np.isnan(p)
    np.testing.assert_allclose(got[finite], _bh_loop(list(p[finite])), rtol=0, atol=1e-12)
    assert not bh_reject(p, alpha=0.5)[1, 2]


def test_bad_pvalues_raise() -> None:
    with pytest.raises(InputError, match="pvalues"):
        bh_adjust(np.array([0.1, 1.2]))
    with pytest.raises(InputError, match="alpha"):
        bh_reject(np.array([0.1]), alpha=0.0)
