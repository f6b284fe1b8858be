"""``harness.agreement`` is a real comparison: equal results pass, perturbed ones fail."""

from __future__ import annotations

import harness
import numpy as np
import pytest
import torch

from tolerance import assert_fp64_close

ATOL = 1e-4


@pytest.fixture
def grid() -> np.ndarray:
    return np.random.default_rng(0).normal(size=(4, 5, 6))


def test_equal_and_within_tolerance_pass(grid: np.ndarray) -> None:
    assert harness.agreement(grid, grid.copy(), atol=ATOL).ok
    near = grid.copy()
    near[1, 2, 3] += ATOL / 2
    check = harness.agreement(grid, near, atol=ATOL, name="x")
    assert check.ok
    # ATOL/2 added to a cell and taken off again: float64 rounding at the grid's scale
    scale = float(np.abs(grid).max())
    assert_fp64_close(check.max_abs, ATOL / 2, terms=2, scale=scale, msg="max |diff|")
    assert check.tolerance == f"x atol {ATOL:g}"


@pytest.mark.parametrize("delta", [2 * ATOL, -2 * ATOL, 1.0, np.inf])
def test_one_perturbed_cell_fails(grid: np.ndarray, delta: float) -> None:
    bad = grid.copy()
    bad[3, 4, 5] += delta
    check = harness.agreement(grid, bad, atol=ATOL)
    assert not check.ok
    assert check.max_abs > ATOL


def test_undefined_cells_must_match(grid: np.ndarray) -> None:
    a, b = grid.copy(), grid.copy()
    a[0, 0, 0] = b[0, 0, 0] = np.nan
    assert harness.agreement(a, b, atol=ATOL).ok  # NaN in the same cell: both undefined
    b[0, 0, 1] = np.nan
    assert not harness.agreement(a, b, atol=ATOL).ok
    assert not harness.agreement(np.full(3, np.nan), np.full(3, np.nan), atol=ATOL).ok


def test_shapes_must_match(grid: np.ndarray) -> None:
    check = harness.agreement(grid, grid[:, :, :-1], atol=ATOL)
    assert not check.ok and "shapes differ" in check.note
    assert not harness.agreement(grid, grid.T, atol=ATOL).ok


def test_tensors_and_combined_checks() -> None:
    t = torch.randn(3, 4)
    good = harness.agreement(t, t.clone().double(), atol=ATOL, name="a")
    bad = harness.agreement(t, t + 1e-2, atol=ATOL, name="b")
    assert good.ok and not bad.ok
    both = good & bad
    assert not both.ok and both.tolerance == f"a atol {ATOL:g}, b atol {ATOL:g}"
    assert (good & good).ok


def test_rounding_tolerance_from_scale_and_depth(grid: np.ndarray) -> None:
    """``depth=``: the bound is ``K · eps · scale · √depth`` at the values' own scale, or at
    the one given (a difference's operands)."""
    from mechscope.tolerance import rounding_tolerance

    tol = rounding_tolerance(float(np.abs(grid).max()), 9)
    near, far = grid.copy(), grid.copy()
    near[0, 1, 2] += tol / 2
    far[0, 1, 2] += 2 * tol
    assert harness.agreement(grid, near, depth=9).ok
    check = harness.agreement(grid, far, depth=9, name="x")
    assert not check.ok and check.tolerance.startswith(f"x rounding {tol:.2g}")
    assert harness.agreement(grid, far, depth=9, scale=10 * np.abs(grid).max()).ok
    with pytest.raises(ValueError, match="either atol or depth"):
        harness.agreement(grid, grid, atol=ATOL, depth=9)
    with pytest.raises(ValueError, match="either atol or depth"):
        harness.agreement(grid, grid)
