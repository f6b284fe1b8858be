"""Integrated gradients on a closed-form gate function: exact values, completeness, paths."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mechscope.errors import InputError
from mechscope.heads.ig import (
    head_ig,
    joint_ig,
    per_layer_ig,
    random_threshold_ig,
    staggered_ig,
)
from mechscope.heads.integrate import evaluate, integrate
from mechscope.heads.paths import RampPath, random_threshold_paths
from mechscope.heads.quadrature import quadrature
from mechscope.tolerance import eps
from tolerance import assert_fp64_close, assert_within


def cast_bound(toy) -> float:
    """How far IG of the toy may stray from its closed form by rounding alone: integrate
    runs the gates and their gradients in fp32 (a model's dtype), each rounded once by half
    an ulp. The toy's gradient ``a + c·α_partner + 3d·α²`` is at most ``|a| + c + 3d`` on
    gates in [0, 1] and its derivative at most ``c + 6d``; the weights times the velocity
    sum to the path's length, 1 for a monotone path. Per attribution:
    ``eps/2 · (|a| + 2c + 9d)``."""
    return 0.5 * eps(torch.float32) * (float(toy.a.abs().max()) + 2 * toy.c + 9 * toy.d)


def delta_bound(toy) -> float:
    """The completeness error's: the six attributions' rounding, and as much again for the
    function at the two ends, whose gates (``b = 0.3``) are rounded to fp32 too."""
    return 2 * toy.a.numel() * cast_bound(toy)


def _toy_joint_ig(toy, b: float) -> np.ndarray:
    """Closed form of joint IG for ``Σ a α + c α00 α01 + d α10³`` from ``b`` to 1.

    On α(t) = b + t(1 − b): ∫ ∂f/∂α_i (1 − b) dt = a_i (1 − b) for the linear part; the
    product term gives each partner ∫ α(t) α'(t) dt = (1 − b²)/2; the cube gives 1 − b³.
    """
    out = toy.a.numpy() * (1 - b)
    out[0, 0] += toy.c * (1 - b**2) / 2
    out[0, 1] += toy.c * (1 - b**2) / 2
    out[1, 0] += toy.d * (1 - b**3)
    return out


@pytest.mark.parametrize("b", [0.0, 0.3])
def test_joint_ig_matches_the_closed_form(toy, b: float) -> None:
    # the integrand is a polynomial of degree 2 in t: 2 Gauss-Legendre nodes are exact
    res = joint_ig(toy, baseline=b, n_steps=2)
    assert_within(res.attributions, _toy_joint_ig(toy, b), cast_bound(toy), msg="attributions")
    assert_within(res.segments.delta[0], 0.0, delta_bound(toy), msg="completeness")


def test_per_layer_ig_closed_form(toy) -> None:
    # layer 0 alone from 0 (layer 1 at 1): a + the product's shares; layer 1: a + d (cube)
    res = per_layer_ig(toy, n_steps=4)
    want = toy.a.numpy().copy()
    want[0, 0] += toy.c / 2
    want[0, 1] += toy.c / 2
    want[1, 0] += toy.d
    assert_within(res.attributions, want, cast_bound(toy), msg="attributions")
    assert res.labels == ["layer 0", "layer 1"]
    assert_within(res.segments.delta, np.zeros(2), delta_bound(toy), msg="completeness")


def test_staggered_ig_uses_the_path_derivative(toy) -> None:
    # λ = (0, 1): layer 1 follows t², the integrand is a polynomial (8 nodes are exact);
    # each term's IG is its change along the path: a for linear terms, c/2 each, d
    res = staggered_ig(toy, n_steps=8, lambdas=[0.0, 1.0])
    want = toy.a.numpy().copy()
    want[0, 0] += toy.c / 2
    want[0, 1] += toy.c / 2
    want[1, 0] += toy.d
    assert_within(res.attributions, want, cast_bound(toy), msg="attributions")
    assert_within(res.segments.delta[0], 0.0, delta_bound(toy), msg="completeness")


def test_random_paths_satisfy_completeness_each_and_on_average(toy) -> None:
    res = random_threshold_ig(toy, n_paths=5, window=0.3, n_steps=256, seed=3)
    frame = res.completeness_frame()
    assert list(frame["segment"]) == [f"path {k}" for k in range(5)] + ["mean"]
    assert frame["rel_delta"].max() < 1e-3
    coarse = random_threshold_ig(toy, n_paths=5, window=0.3, n_steps=64, seed=3)
    assert coarse.completeness_frame()["abs_delta"].max() > frame["abs_delta"].max()
    # linear terms are path independent: a head without interactions has the gradient a_i at
    # every node of every path, so its IG is a_i times the rule's integral of its velocity
    # (1 up to the midpoint rule's error, which completeness measures above)
    q = quadrature("riemann_middle", 256)
    paths = random_threshold_paths(toy.shape, 0.0, n_paths=5, window=0.3, seed=3)
    length = np.mean([q.w @ p.points(torch.from_numpy(q.t))[1][:, 0, 2].numpy() for p in paths])
    a = toy.a[0, 2].item()
    assert_within(res.attributions[0, 2], a * length, 0.5 * eps(torch.float32) * abs(a))


def test_narrow_disjoint_ramps_give_permutation_marginals(toy) -> None:
    """Heads switched on one after another (disjoint windows) get exactly their marginal
    contribution in that order: the random-threshold path's Shapley limit."""
    order = [4, 0, 3, 1, 5, 2]  # flat head indices in switch-on order
    n = len(order)
    onsets = torch.zeros(toy.shape, dtype=torch.float64).view(-1)
    for rank, head in enumerate(order):
        onsets[head] = rank / n
    window, steps = 1.0 / n, n * 128
    path = RampPath(toy.shape, 0.0, onsets.view(toy.shape), window)
    seg = integrate(toy, [path], n_steps=steps, method="riemann_middle")
    gates = torch.zeros(n + 1, 6, dtype=torch.float64)
    for rank in range(n):
        gates[rank + 1 :, order[rank]] = 1.0
    v = evaluate(toy, gates.view(n + 1, *toy.shape))
    marginal = np.zeros(6)
    marginal[order] = np.diff(v)
    # The windows are whole panels of the midpoint rule, so each head's integrand
    # g = G(α)·v is smooth on its panels and the rule's error is Euler-Maclaurin's
    # (h²/24)·[g'] + O(h⁴); v vanishes at both ends and v' = ±6/w² there, so it is
    # −h²/(4w²)·(G_start + G_end), with G the head's gradient before and after its window.
    rows = gates.view(n + 1, *toy.shape).clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(toy(rows).sum(), rows)
    grad = grad.view(n + 1, 6).numpy()
    ends = np.zeros(6)
    ends[order] = [abs(grad[r, h]) + abs(grad[r + 1, h]) for r, h in enumerate(order)]
    leading = (1.0 / steps) ** 2 / (4 * window**2) * ends
    bound = 2 * leading + cast_bound(toy)  # twice the leading term: the O(h⁴) rest
    assert_within(seg.attributions[0].reshape(-1), marginal, bound, msg="marginals")


def test_window_one_random_path_equals_joint_ig(toy) -> None:
    # IG is invariant under reparametrising the same curve
    # along the smoothstep the integrand is a polynomial of degree 8: 8 nodes are exact
    ramp = random_threshold_ig(toy, n_paths=1, window=1.0, n_steps=8, method="gauss_legendre")
    assert_within(ramp.attributions, _toy_joint_ig(toy, 0.0), cast_bound(toy), msg="window 1")


def test_batched_and_unbatched_agree(toy) -> None:
    a = joint_ig(toy, n_steps=16, internal_batch_size=1).attributions
    b = joint_ig(toy, n_steps=16, internal_batch_size=5).attributions
    c = joint_ig(toy, n_steps=16).attributions
    # the toy's rows are independent float64 sums of six terms; the nodes are summed alike
    scale = float(np.abs(a).max())
    assert_fp64_close(b, a, terms=6 + 16, scale=scale, msg="batches of 5")
    assert_fp64_close(c, a, terms=6 + 16, scale=scale, msg="one batch")


def test_bad_inputs_are_one_line_errors(toy) -> None:
    cases = [
        (dict(baseline=1.0), "baseline"),
        (dict(baseline=-0.2), "baseline"),
        (dict(n_steps=0), "n_steps"),
        (dict(internal_batch_size=0), "internal_batch_size"),
        (dict(method="simpson"), "method"),
    ]
    for kwargs, field in cases:
        with pytest.raises(InputError) as exc:
            joint_ig(toy, **kwargs)
        assert f"field '{field}'" in str(exc.value) and "\n" not in str(exc.value)
    with pytest.raises(InputError, match="layers"):
        per_layer_ig(toy, layers=[])
    with pytest.raises(InputError, match="path"):
        head_ig(toy, "diagonal")


def test_function_returning_wrong_shape_is_refused() -> None:
    class Bad:
        shape = (1, 2)

        def __call__(self, alpha):
            return alpha.sum()

    with pytest.raises(InputError, match="one value per row"):
        joint_ig(Bad(), n_steps=2)


def test_completeness_off_skips_the_end_forwards_and_changes_no_attribution(toy) -> None:
    """``completeness=False``: the same attributions from the gradient rows alone (the
    gradient batch has ``requires_grad``; the ends would be a second, gradient-free call)."""
    calls: list[bool] = []

    class Counting:
        shape = toy.shape

        def __call__(self, alpha: torch.Tensor) -> torch.Tensor:
            calls.append(alpha.requires_grad)
            return toy(alpha)

    with_check = joint_ig(Counting(), n_steps=4)
    assert calls == [True, False]  # gradient rows, then the two ends
    calls.clear()
    without = joint_ig(Counting(), n_steps=4, completeness=False)
    assert calls == [True]
    np.testing.assert_array_equal(without.attributions, with_check.attributions)
    assert np.isnan(without.segments.f_start).all() and np.isnan(without.segments.delta).all()
    assert np.isnan(without.completeness_frame()["rel_delta"]).all()
    with pytest.raises(InputError, match="needs completeness"):
        joint_ig(toy, n_steps=4, completeness=False, rtol=1e-3)
