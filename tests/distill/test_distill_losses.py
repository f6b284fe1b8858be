"""Losses: RCID is zero for an exact rotation, has the right gradient sign, matches a loop;
KD matches a direct KL; FitNets is zero for identical representations."""

from __future__ import annotations

import numpy as np
import torch
from scipy.special import log_softmax, rel_entr

from mechscope.distill.losses import (
    FitNetsLoss,
    InformedFitNetsLoss,
    RCIDLoss,
    aligned_direction_loss,
    kd_loss,
)
from tolerance import assert_fp64_close, assert_rounding_close


def _rotation(d: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=torch.float64))
    return q


def test_rcid_zero_for_exact_rotation_and_scale():
    q = _rotation(8, 0)  # W* [d_T, d_S]
    d_t = torch.randn(5, 2, 8, dtype=torch.float64)  # [b, K, d_T]
    d_s = torch.einsum("ts,bkt->bks", q, d_t)  # student = W^T d_T, so W d_S = d_T
    loss = RCIDLoss([3, 7], {3: q, 7: q}).double()
    # float64 sums over the 8 coordinates of unit-scale directions: zero up to their rounding
    assert_fp64_close(float(loss(d_s, d_t)), 0.0, terms=8, scale=1.0)
    assert_fp64_close(float(loss(2.5 * d_s, d_t)), 0.0, terms=8, scale=1.0)  # only directions


def test_rcid_matches_plain_loop():
    g = torch.Generator().manual_seed(1)
    w = {2: torch.randn(6, 4, generator=g), 5: torch.randn(6, 4, generator=g)}
    d_s, d_t = torch.randn(3, 2, 4, generator=g), torch.randn(3, 2, 6, generator=g)
    got = float(RCIDLoss([2, 5], w)(d_s, d_t))
    ref = []
    for b in range(3):
        for k, layer in enumerate([2, 5]):
            a = (w[layer].double() @ d_s[b, k].double()).numpy()
            t = d_t[b, k].double().numpy()
            ref.append(np.sum((a / np.linalg.norm(a) - t / np.linalg.norm(t)) ** 2))
    # fp32 against float64: the map's 4-term products, the 6-term norms, the 6 squared
    # differences of unit vectors (each at most 4) and the mean over 6 rows
    assert_rounding_close(got, np.mean(ref), depth=4 + 6 + 6 + 6, scale=4.0, msg="RCID")


def test_rcid_gradient_points_towards_teacher_direction():
    q = _rotation(6, 2).float()
    d_t = torch.randn(4, 1, 6)
    d_s = torch.randn(4, 1, 6, requires_grad=True)
    loss = aligned_direction_loss(d_s, d_t, q[None])
    loss.backward()
    toward = torch.einsum("ts,bkt->bks", q, d_t / d_t.norm(dim=-1, keepdim=True))
    toward = toward - d_s.detach() / d_s.detach().norm(dim=-1, keepdim=True)
    # moving the student towards the (aligned) teacher direction decreases the loss
    assert float((d_s.grad * toward).sum()) < 0
    with torch.no_grad():
        stepped = aligned_direction_loss(d_s - 0.05 * d_s.grad, d_t, q[None])
    assert float(stepped) < float(loss.detach())


def test_rcid_gradient_matches_finite_differences():
    w = torch.randn(1, 5, 3, dtype=torch.float64)
    d_t = torch.randn(2, 1, 5, dtype=torch.float64)
    d_s = torch.randn(2, 1, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda x: aligned_direction_loss(x, d_t, w), (d_s,), eps=1e-6, atol=1e-6
    )


def test_informed_fitnets_is_the_same_form_on_states():
    q = _rotation(4, 3)
    h_t = torch.randn(3, 1, 4, dtype=torch.float64)
    h_s = torch.einsum("ts,bkt->bks", q, h_t)
    loss = float(InformedFitNetsLoss([0], {0: q}).double()(h_s, h_t))
    assert_fp64_close(loss, 0.0, terms=4, scale=1.0)


def test_kd_loss_matches_direct_kl():
    g = torch.Generator().manual_seed(4)
    s, t = torch.randn(3, 11, generator=g), torch.randn(3, 11, generator=g)
    temp = 2.0
    got = float(kd_loss(s, t, temp))
    ls = log_softmax(s.double().numpy() / temp, axis=-1)
    lt = log_softmax(t.double().numpy() / temp, axis=-1)
    ref = rel_entr(np.exp(lt), np.exp(ls)).sum(-1).mean() * temp**2
    # KL = cross-entropy − entropy, each a p-weighted sum of fp32 log-probabilities over 11
    # logits (then a mean over 3 rows, times T²): rounded at the two terms' magnitude
    terms = np.exp(lt) * (np.abs(lt) + np.abs(ls))  # [3, 11]
    scale = temp**2 * float(terms.sum(-1).max())
    assert_rounding_close(got, ref, depth=11 + 3, scale=scale, msg="KD")
    assert float(kd_loss(t, t, temp)) == 0.0  # t − t is 0 in every entry


def test_fitnets_zero_for_identical_and_scale_free():
    loss = FitNetsLoss(2, 4, 4)  # identity projections at init for equal widths
    h = [torch.randn(2, 3, 4), torch.randn(2, 3, 4)]
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    assert float(loss(h, h, mask).detach()) == 0.0  # identity projections: h·I is h, exactly
    off = [x + 1.0 for x in h]
    a = float(loss(h, off, mask).detach())
    b = float(loss([10 * x for x in h], [10 * x for x in off], mask).detach())
    # invariant to scale: the ratio of two fp32 sums of 2 × 3 × 4 terms, whose error terms
    # (h − (h + 1) = −1) are rounded at the states' magnitude, 1 + max|h| times theirs
    mag = 1 + max(float(x.abs().max()) for x in h)
    assert_rounding_close(a, b, depth=2 * 24, scale=mag * max(a, b), msg="scaled by 10")
