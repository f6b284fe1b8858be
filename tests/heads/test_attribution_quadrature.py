"""Quadrature rules: captum's nodes and weights, exactness, convergence, bad input."""

from __future__ import annotations

import numpy as np
import pytest
from captum.attr._utils.approximation_methods import approximation_parameters

from mechscope.errors import InputError
from mechscope.heads.quadrature import METHODS, quadrature

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
    # captum builds Riemann nodes with torch.linspace in float32: atol 1e-7
    np.testing.assert_allclose(q.t, alphas(n), atol=1e-7)
    np.testing.assert_allclose(q.w, steps(n), atol=1e-12)


def test_trapezoid_is_captums_nodes_with_weights_that_sum_to_one() -> None:
    n = 9
    steps, alphas = approximation_parameters("riemann_trapezoid")
    q = quadrature("riemann_trapezoid", n)
    np.testing.assert_allclose(q.t, alphas(n), atol=1e-7)
    # captum's weights are 1/n (halved at the ends) and sum to (n-1)/n; ours are rescaled
    np.testing.assert_allclose(q.w, np.asarray(steps(n)) * n / (n - 1), atol=1e-12)
    assert q.w.sum() == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("method", METHODS)
def test_weights_sum_to_one_and_nodes_in_unit_interval(method: str) -> None:
    q = quadrature(method, 16)
    assert q.w.sum() == pytest.approx(1.0, abs=1e-12)
    assert q.t.min() >= 0.0 and q.t.max() <= 1.0


def test_gauss_legendre_exact_to_degree_2n_minus_1() -> None:
    for n in (1, 3, 8):
        q = quadrature("gauss_legendre", n)
        deg = 2 * n - 1
        assert (q.w * q.t**deg).sum() == pytest.approx(1.0 / (deg + 1), abs=1e-13)


def test_error_shrinks_at_the_expected_order() -> None:
    def err(method: str, n: int) -> float:
        q = quadrature(method, n)
        return abs((q.w * np.exp(q.t)).sum() - (np.e - 1.0))

    assert err("riemann_left", 64) / err("riemann_left", 32) == pytest.approx(0.5, abs=0.02)
    assert err("riemann_middle", 64) / err("riemann_middle", 32) == pytest.approx(0.25, abs=0.01)
    assert err("riemann_trapezoid", 65) / err("riemann_trapezoid", 33) == pytest.approx(
        0.25, abs=0.01
    )


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
