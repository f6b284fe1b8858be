"""The suppression KL in fp32 on the device, finished in fp64 on the host.

Reference: the textbook ``Σ p (log p − log q)`` in float64 from the same fp32 logits.
Tolerance ``|got − ref| ≤ KL_RTOL·ref + KL_ATOL``:

- ``KL_RTOL`` (``K·eps·√7 ≈ 1e-5``): each term of the centred sum has fp32's relative precision
  (``u = 2^-24 ≈ 6e-8`` per op, a few ops, plus the ``e^-ε − 1 + ε`` series' truncation,
  at most 4e-7); the ``vocab``-term sums add ~``√vocab·u``. Measured: at most 2.5e-6.
- ``KL_ATOL`` (``K·eps64·10·√vocab ≈ 5e-13``): the float64 reference's own floor. Its terms
  ``p·log p`` are ~10 and cancel to the KL, leaving ~``2^-53 × 10 × √vocab`` ≈ 1e-14 of noise
  (measured differences at KL ≈ 4e-13: 1e-15 to 2e-15).

The textbook formula in fp32 leaves ~1e-7 nats of noise (measured 1e-7 to 2e-7 absolute,
70× the KL at KL ≈ 4e-9), which is why the fp32 form is centred; the last test measures
that the textbook fp32 formula fails this tolerance.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mechscope.anchors.attention.suppression import _kl_parts, kl_from_parts
from mechscope.tolerance import rounding_tolerance

VOCAB, POSITIONS = 4096, 6
#: Relative: each centred term rounds in fp32 through a few operations (about 7).
KL_RTOL = rounding_tolerance(1.0, depth=7)
#: The float64 reference's own floor: ``VOCAB`` terms ``p·log p`` of size ~10 that cancel.
KL_ATOL = rounding_tolerance(10.0, depth=VOCAB, dtype=torch.float64)


def reference(base: torch.Tensor, sup: torch.Tensor, temperature: float) -> np.ndarray:
    lp = torch.log_softmax(base.double() / temperature, -1)  # [pos, V]
    lq = torch.log_softmax(sup.double() / temperature, -1)  # [rows, pos, V]
    return ((lp - lq) * lp.exp()).sum(-1).numpy()  # [rows, pos]


def textbook_fp32(base: torch.Tensor, sup: torch.Tensor, temperature: float) -> np.ndarray:
    lp = torch.log_softmax(base / temperature, -1)
    lq = torch.log_softmax(sup / temperature, -1)
    return ((lp - lq) * lp.exp()).sum(-1).clamp_min(0).double().numpy()


def logits(scale: float, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Base logits ``[pos, V]`` (spread like a language model's) and three perturbed rows
    ``[3, pos, V]``: noise of ``scale`` nats on every logit."""
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(POSITIONS, VOCAB, generator=g) * 4
    sup = base[None] + scale * torch.randn(3, POSITIONS, VOCAB, generator=g)
    return base, sup


def within(got: np.ndarray, ref: np.ndarray) -> bool:
    return bool(np.all(np.abs(got - ref) <= KL_RTOL * ref + KL_ATOL))


@pytest.mark.parametrize("temperature", [1.0, 0.6])
@pytest.mark.parametrize("scale", [1e-6, 1e-4, 1e-2, 1.0, 10.0])
def test_kl_from_fp32_parts_equals_fp64(scale, temperature):
    """From KL ≈ 1e-12 (distant effects) to KL ≈ 40 (a sentence that decides the token)."""
    base, sup = logits(scale)
    got = kl_from_parts(_kl_parts(base, sup, temperature).numpy())  # [3, pos]
    ref = reference(base, sup, temperature)
    assert within(got, ref), np.max(np.abs(got - ref) - KL_RTOL * ref)


def test_equal_logits_give_zero():
    base, _ = logits(0.0)
    got = kl_from_parts(_kl_parts(base, base[None].repeat(2, 1, 1), 1.0).numpy())
    assert np.all(got == 0.0)


def test_overflowing_ratio_falls_back_to_log_mean():
    """A token 100 nats more likely under the suppressed distribution: ``e^-ε`` overflows
    fp32, and the row is finished from the log-sum-exp part."""
    base, _ = logits(0.0)
    sup = base[None].repeat(2, 1, 1)
    sup[0, :, 5] += 100.0  # overflows: ε ≈ -100
    sup[1, :, 7] -= 100.0  # a token made impossible: no overflow
    parts = _kl_parts(base, sup, 1.0).numpy()
    assert np.isinf(parts[1, 0]).all() and np.isfinite(parts[1, 1]).all()
    got, ref = kl_from_parts(parts), reference(base, sup, 1.0)
    assert ref[0].min() > 50  # the overflowing row's KL is large
    assert within(got, ref)


def test_textbook_fp32_formula_fails_the_tolerance():
    base, sup = logits(1e-4)
    ref, textbook = reference(base, sup, 1.0), textbook_fp32(base, sup, 1.0)
    assert not within(textbook, ref)
    # its noise is larger than the KL itself (≈ 4e-9), not a near miss
    assert np.max(np.abs(textbook - ref)) > ref.max()
