"""mechscope.tolerance against hand computations: the formula, its scale and its comparison.

The rounding tolerance is ``K · eps · scale · √depth``; these tests write each piece out
(machine epsilons as powers of two, ``K`` as stated in the module) and check what the
comparison counts as equal (equal infinities, NaN on both sides), what it counts as an
error (NaN on one side), and which magnitudes set the scale (not a mask's fill value).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from mechscope.tolerance import (
    K,
    eps,
    logprob_scale,
    pass_depth,
    rounding_margin,
    rounding_tolerance,
    scale_of,
    score_scale,
)


def test_epsilons_and_depths() -> None:
    assert eps(torch.float32) == 2.0**-23 and eps(torch.bfloat16) == 2.0**-7
    assert eps(torch.float16) == 2.0**-10 and eps() == 2.0**-23
    assert pass_depth(18) == 19  # logits: 18 layers and the head
    assert pass_depth(18, 0) == 1 and pass_depth(18, 17) == 18


@pytest.mark.parametrize(
    ("dtype", "k"), [(torch.float32, 32), (torch.bfloat16, 4), (torch.float16, 4)]
)
def test_tolerance_is_k_eps_scale_sqrt_depth(dtype: torch.dtype, k: float) -> None:
    assert K[dtype] == k
    want = k * torch.finfo(dtype).eps * 100.0 * math.sqrt(19)
    assert rounding_tolerance(100.0, 19, dtype) == want  # the same product, in the same order
    # no stage still rounds once
    assert rounding_tolerance(3.0, 0, dtype) == rounding_tolerance(3.0, 1, dtype)


def test_the_issue_s_gemma3_error_is_rounding_and_a_wrong_head_is_not() -> None:
    """Gemma 3's logits reach about 100 after 18 layers: the 1.83e-4 an Intel Xeon's BLAS
    gave is within the tolerance, which is still far below a logit's own size."""
    tol = rounding_tolerance(100.0, pass_depth(18))
    assert 1.83e-4 < tol < 1e-2


def test_margin_counts_equal_specials_as_equal_and_one_sided_nan_as_error() -> None:
    inf, nan = float("inf"), float("nan")
    got = torch.tensor([1.0, -inf, nan, 2.0])
    ref = torch.tensor([1.0, -inf, nan, 2.0 + 2**-20])  # exact in fp32
    err, tol = rounding_margin(got, ref, 4)
    assert err == 2**-20 and tol == rounding_tolerance(2.0 + 2**-20, 4)
    err, _ = rounding_margin(torch.tensor([1.0, nan]), torch.tensor([1.0, 0.0]), 1)
    assert err == inf
    err, _ = rounding_margin(torch.tensor([1.0, inf]), torch.tensor([1.0, -inf]), 1)
    assert err == inf


def test_margin_takes_arrays_scalars_and_a_given_scale() -> None:
    got = np.array([[0.5, 0.25], [1.0, 0.0]])
    err, tol = rounding_margin(got, 0.5, 2, scale=8.0)  # a scalar reference broadcasts
    assert err == 0.5 and tol == rounding_tolerance(8.0, 2)
    err, tol = rounding_margin(torch.zeros(3), torch.zeros(3), 5)
    assert err == 0.0 and tol == 0.0  # two all-zero sides: only bit-identity passes


def test_scale_leaves_out_mask_fills_and_non_finite_values() -> None:
    lowest = torch.finfo(torch.float32).min
    scores = torch.tensor([[3.0, lowest], [-7.5, float("-inf")]])
    assert scale_of(scores) == 7.5
    assert scale_of(scores, np.array([2.0, -9.0])) == 9.0
    assert scale_of(torch.tensor([float("nan"), lowest])) == 0.0
    assert scale_of() == 0.0
    assert score_scale(scores) == 7.5 and score_scale(torch.tensor([0.25, lowest])) == 1.0


@pytest.mark.parametrize("top", [0.1, 3.0, 40.0])
def test_logprob_scale_bounds_every_log_probability(top: float) -> None:
    """``|z_t − lse(z)| ≤ 2·max|z| + log(vocab)``, checked against torch's log-softmax on
    logits drawn to reach ``top`` (one of them at ``−top``, the worst case)."""
    gen = torch.Generator().manual_seed(0)
    for vocab in (2, 100, 5000):
        z = torch.rand(64, vocab, generator=gen, dtype=torch.float64) * 2 * top - top
        z[:, 0], z[:, -1] = -top, top
        worst = float(torch.log_softmax(z, -1).abs().max())
        assert worst <= logprob_scale(top, vocab)
