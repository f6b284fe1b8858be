"""Procrustes alignment: recovers known maps; agrees with scipy in the square case."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.linalg import orthogonal_procrustes

from mechscope.distill.procrustes import centre_normalise, fit_alignments, procrustes_align
from mechscope.errors import InputError
from tolerance import assert_rounding_close


def _orthonormal(rows: int, cols: int, seed: int) -> torch.Tensor:
    """A [rows, cols] matrix with orthonormal columns (rows >= cols) or rows (rows < cols)."""
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(max(rows, cols), min(rows, cols), generator=g, dtype=torch.float64)
    q, _ = torch.linalg.qr(a)  # [max, min] orthonormal columns
    return q if rows >= cols else q.T


# The alignment is an SVD of well-conditioned float64 matrices, returned in fp32: the cast
# (one fp32 rounding of entries at most 1) dominates the float64 SVD's own rounding.


def test_recovers_known_rotation():
    q = _orthonormal(16, 16, seed=1)  # [d_T, d_S]
    s = torch.randn(200, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    t = s @ q.T  # teacher = rotated student
    w = procrustes_align(s, t)
    assert_rounding_close(w, q, depth=1, scale=1.0, msg="rotation")


def test_matches_scipy_orthogonal_procrustes():
    g = torch.Generator().manual_seed(3)
    s = torch.randn(50, 8, dtype=torch.float64, generator=g)
    t = torch.randn(50, 8, dtype=torch.float64, generator=g)  # no exact map: a real fit
    w = procrustes_align(s, t)
    r, _ = orthogonal_procrustes(centre_normalise(s).numpy(), centre_normalise(t).numpy())
    # scipy: argmin ||S R - T|| => T ≈ S R, i.e. W = R^T
    assert_rounding_close(w, r.T, depth=1, scale=1.0, msg="against scipy")


def test_rectangular_teacher_wider_recovers_map():
    w0 = _orthonormal(24, 10, seed=4)  # [d_T, d_S], orthonormal columns
    s = torch.randn(300, 10, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    w = procrustes_align(s, s @ w0.T)
    assert w.shape == (24, 10)
    assert_rounding_close(w, w0, depth=1, scale=1.0, msg="map")
    # fp32 products of 24 terms of the rounded map
    assert_rounding_close(w.T @ w, np.eye(10), depth=1 + 24, scale=1.0, msg="orthonormal")


def test_rectangular_student_wider_recovers_map():
    w0 = _orthonormal(6, 12, seed=6)  # [d_T, d_S], orthonormal rows
    t = torch.randn(300, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(7))
    s = t @ w0  # student vectors live in a 6-dim subspace of R^12
    w = procrustes_align(s, t)
    assert_rounding_close(w, w0, depth=1, scale=1.0, msg="map")
    # fp32 products of 12 terms of the rounded map
    assert_rounding_close(w @ w.T, np.eye(6), depth=1 + 12, scale=1.0, msg="orthonormal")


def test_solution_beats_random_semi_orthogonal_maps():
    g = torch.Generator().manual_seed(8)
    s, t = torch.randn(40, 5, generator=g), torch.randn(40, 9, generator=g)
    sc, tc = centre_normalise(s), centre_normalise(t)
    best = (tc - sc @ procrustes_align(s, t).double().T).norm()
    for seed in range(20):
        other = _orthonormal(9, 5, seed=100 + seed)
        assert best <= (tc - sc @ other.T).norm() + 1e-9


def test_fit_alignments_per_layer_and_errors():
    s = {3: torch.randn(10, 4), 5: torch.randn(10, 4)}
    t = {3: torch.randn(10, 6), 5: torch.randn(10, 6)}
    out = fit_alignments(s, t)
    assert sorted(out) == [3, 5] and out[3].shape == (6, 4)
    with pytest.raises(InputError, match="teacher layers \\[5\\]"):
        fit_alignments({3: s[3]}, t)
    with pytest.raises(InputError, match="same N"):
        procrustes_align(torch.randn(5, 3), torch.randn(6, 3))
