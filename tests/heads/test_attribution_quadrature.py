"""Quadrature rules: captum's nodes and weights, exactness, convergence, bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from captum.attr._utils.approximation_methods import approximation_parameters

from mechscope.errors import InputError
from mechscope.heads.quadrature import METHODS, quadrature
from mechscope.tolerance import eps
from tolerance import assert_fp64_close, assert_within

#: How far torch.linspace's fp32 nodes on [0, 1] may be from the exact ones: four roundings
#: of half an fp32 ulp of a value at most 1 (the end point's cast, the step's division, its
#: product with the index, the sum with the start).
LINSPACE_FP32 = 4 * 0.5 * eps(torch.float32)

CAPTUM = {
    "riemann_left": "riemann_left",
    "riemann_right": "riemann_right",
    "riemann_middle": "riemann_middle",
    "gauss_legendre": "gausslegendre",
}


@pytest.mark.parametrize("method", list(CAPTUM))
@pytest.mark.parametrize("n", [2, 7, 32])
def test_nodes_and_weights_match_captum(method: str, n: int) -> None:
    steps, alphas = approximation_parameters(CAPTUM[method])
    q = quadrature(method, n)
    # captum's Gauss-Legendre nodes are ours bit for bit; its Riemann nodes come from
    # torch.linspace in fp32 (LINSPACE_FP32)
    bound = LINSPACE_FP32 if method.startswith("riemann") else 0.0
    assert_within(q.t, alphas(n), bound, msg="nodes")
    np.testing.assert_array_equal(q.w, steps(n))  # 1/n each, or the same 0.5·w of numpy's


def test_trapezoid_is_captums_nodes_with_weights_that_sum_to_one() -> None:
    n = 9
    steps, alphas = approximation_parameters("riemann_trapezoid")
    q = quadrature("riemann_trapezoid", n)
    assert_within(q.t, alphas(n), LINSPACE_FP32, msg="nodes")
    # captum's weights are 1/n (halved at the ends) and sum to (n-1)/n; ours are rescaled
    want = np.asarray(steps(n)) * n / (n - 1)
    assert_fp64_close(q.w, want, terms=3, scale=1.0 / (n - 1), msg="weights")
    assert_fp64_close(q.w.sum(), 1.0, terms=n, scale=1.0, msg="sum")


@pytest.mark.parametrize("method", METHODS)
def test_weights_sum_to_one_and_nodes_in_unit_interval(method: str) -> None:
    q = quadrature(method, 16)
    assert_fp64_close(q.w.sum(), 1.0, terms=16, scale=1.0, msg=method)
    assert q.t.min() >= 0.0 and q.t.max() <= 1.0


def test_gauss_legendre_exact_to_degree_2n_minus_1() -> None:
    for n in (1, 3, 8):
        q = quadrature("gauss_legendre", n)
        deg = 2 * n - 1
        # numpy's nodes and weights are accurate to float64's rounding; the powers and the
        # n-term sum of values at most 1 add their own
        got = (q.w * q.t**deg).sum()
        assert_fp64_close(got, 1.0 / (deg + 1), terms=n + deg, scale=1.0, msg=f"{n} nodes")


def test_error_shrinks_at_the_expected_order() -> None:
    """Halving the step scales the error ``E(h) = C·h^p·(1 + r·h^q + …)`` by
    ``2^−p·(1 + r·(2^−q − 1)·h^q + …)``: at most ``2^−p·|r|·h^q`` off. For ``exp`` on [0, 1]
    (Euler-Maclaurin) the left rule has ``p = q = 1``, ``r = −1/6``; the midpoint and the
    trapezoid rules ``p = q = 2``, ``r = −7/240`` and ``−1/60`` (allowed: ``|r| ≤ 1``)."""

    def err(method: str, n: int) -> float:
        q = quadrature(method, n)
        return abs((q.w * np.exp(q.t)).sum() - (np.e - 1.0))

    h = 1 / 32
    got = err("riemann_left", 64) / err("riemann_left", 32)
    assert_within(got, 0.5, 0.5 * h / 6, msg="left")  # twice the h/12 it is off by
    got = err("riemann_middle", 64) / err("riemann_middle", 32)
    assert_within(got, 0.25, 0.25 * h**2, msg="midpoint")
    got = err("riemann_trapezoid", 65) / err("riemann_trapezoid", 33)
    assert_within(got, 0.25, h**2 * 0.25, msg="trapezoid")


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "8", None])
def test_bad_step_counts_are_one_line_errors(bad) -> None:
    with pytest.raises(InputError, match="n_steps") as exc:
        quadrature("gauss_legendre", bad)
    assert "\n" not in str(exc.value)


def test_trapezoid_needs_two_steps_and_unknown_method_is_refused() -> None:
    with pytest.raises(InputError, match=">= 2"):
        quadrature("riemann_trapezoid", 1)
    with pytest.raises(InputError, match="field 'method'"):
        quadrature("simpson", 8)
    assert quadrature("gausslegendre", 4).method == "gauss_legendre"
