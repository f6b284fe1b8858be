"""Shapley values: exact enumeration against a permutation loop, sampling, efficiency."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from mechscope.errors import InputError
from mechscope.heads.integrate import evaluate
from mechscope.heads.shapley import shapley_exact, shapley_sampled
from tolerance import (
    Z_SAMPLING,
    assert_fp64_close,
    assert_rounding_close,
    assert_within,
    depth_of,
    rounding_tolerance,
)

HEADS = [(0, 0), (0, 1), (1, 0), (1, 2)]


def _v(f, heads, on: set[int], b: float = 0.0) -> float:
    gate = torch.ones((1, *f.shape))
    for j, (layer, head) in enumerate(heads):
        if j not in on:
            gate[0, layer, head] = b
    return float(evaluate(f, gate)[0])


def _all_orders(f, heads, b: float = 0.0) -> np.ndarray:
    """Shapley by its definition: the mean marginal over every order (a plain loop)."""
    k = len(heads)
    phi = np.zeros(k)
    for order in itertools.permutations(range(k)):
        on: set[int] = set()
        for j in order:
            before = _v(f, heads, on, b)
            on.add(j)
            phi[j] += _v(f, heads, on, b) - before
    return phi / math.factorial(k)


def _value_scale(res) -> float:
    """The values are weighted sums of differences of the toy's float64 values: rounded at
    those values' magnitude."""
    return 2 * max(abs(res.v_full), abs(res.v_empty))


def test_exact_matches_the_definition(toy) -> None:
    res = shapley_exact(toy, HEADS, baseline=0.2)
    scale, orders = _value_scale(res), math.factorial(len(HEADS))
    want = _all_orders(toy, HEADS, 0.2)
    assert_fp64_close(res.values, want, terms=orders, scale=scale, msg="against every order")
    # efficiency: the values share out v(all) − v(none)
    got = res.values.sum()
    assert_fp64_close(got, res.v_full - res.v_empty, terms=orders, scale=scale, msg="efficiency")
    # linear term: a (1 − b); the product c α00 α01 is split equally: c (1 − b²) / 2 each,
    # at the baseline as the gates hold it (fp32)
    b = float(np.float32(0.2))
    want = toy.a[0, 0].item() * (1 - b) + toy.c * (1 - b**2) / 2
    assert_fp64_close(res.values[0], want, terms=orders, scale=scale, msg="closed form")


def test_exact_on_a_model_matches_the_definition(tiny_f) -> None:
    heads = [(0, 1), (1, 3), (2, 0)]
    res = shapley_exact(tiny_f, heads)
    # weighted differences of the objective's values (weights summing to 1 per head)
    scale = 2 * max(abs(res.v_full), abs(res.v_empty))
    want = _all_orders(tiny_f, heads)
    assert_rounding_close(res.values, want, depth=depth_of(tiny_f.lm), scale=scale, msg="values")


def test_sampled_values_are_efficient_and_converge(toy) -> None:
    exact = shapley_exact(toy, HEADS).values
    for antithetic in (True, False):
        res = shapley_sampled(toy, HEADS, n_permutations=400, seed=1, antithetic=antithetic)
        # every permutation shares out exactly v(all) − v(none), so the mean does too (up to
        # the float64 rounding of 400 permutations' differences)
        scale, got = _value_scale(res), res.values.sum()
        assert_fp64_close(got, res.v_full - res.v_empty, terms=400, scale=scale, msg="efficiency")
        # within their sampling error; a head whose marginal is the same in every order (the
        # linear one) has none, and equals the exact value up to rounding
        rounding = rounding_tolerance(scale, 400, torch.float64)
        assert_within(res.values, exact, Z_SAMPLING * res.se + rounding, msg="sampled")


def test_standard_error_shrinks_with_more_permutations(tiny_f) -> None:
    heads = [(0, 1), (1, 3), (2, 0), (2, 2), (1, 1)]
    small = shapley_sampled(tiny_f, heads, n_permutations=8, seed=0, antithetic=False)
    large = shapley_sampled(tiny_f, heads, n_permutations=128, seed=0, antithetic=False)
    assert large.se.mean() < small.se.mean()
    frame = large.frame()
    assert list(frame.columns) == ["layer", "head", "shapley", "se", "n_permutations"]


def test_bad_heads_and_permutations() -> None:
    from attribution_helpers import ToyGate

    toy = ToyGate()
    with pytest.raises(InputError, match="heads within"):
        shapley_exact(toy, [(5, 0)])
    with pytest.raises(InputError, match="distinct"):
        shapley_sampled(toy, [(0, 0), (0, 0)])
    with pytest.raises(InputError, match="even"):
        shapley_sampled(toy, HEADS, n_permutations=5)
    with pytest.raises(InputError, match="baseline"):
        shapley_sampled(toy, HEADS, baseline=1.0)
