"""Every workflow's metrics on a bf16 model are exact in fp32, given its bf16 states.

Each workflow runs on stories260K in bf16 three times over the same bf16 forward passes
(same inputs, same batch shapes, so the same states): with the fp32 readout, with an fp64
readout written out here (the Llama RMSNorm formula and the unembedding in float64), and
with the readout as it was (final norm and unembedding in bf16, cast afterwards; pass
logits from the model's bf16 head). Only the readout differs, so the differences are its
errors alone.

Tolerance: the fp32 readout is within ``R`` (``K·eps·√2 ≈ 5e-6``) of the largest logit
``S`` of the fp64 one (``test_readout_fp32.py``: fp32's ``u = 2^-24`` over a ``d``-term
product, measured 4e-7). A metric inherits it:

- a logit-valued metric (logit difference, ΔNLL: differences of up to four logit-sized
  terms): ``≤ 4·R·S``;
- a divergence ``D`` (JS, KL) moves by at most ``max|δz| · ‖p − q‖₁ ≤ 2·R·S · √(2D)``
  (Pinsker), plus ``1e-6`` for the fp32 arithmetic after the readout, which is the same
  code in both runs but sees slightly different inputs;
- IG: its objective ``f`` (a sum of NLLs) like a logit metric, ``≤ 4·R·|f|``; its
  attributions within one bf16 spacing (see :func:`test_ig`).

Measured: the fp32 readout stays below 0.03 of every tolerance. The bf16 readout rounds
every logit to 8 bits of mantissa (``2^-9`` relative, 0.03 at |logit| = 17) and misses
them by 33× to 180× (ΔNLL 0.13 nats, JS 0.003, logit difference 0.06, patching effect
0.09, suppression KL 0.03); each test asserts that it misses by at least ``MISS``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
import pytest
import torch
from precision_helpers import (
    abs_err,
    consistency_numbers,
    ig_numbers,
    lens_numbers,
    old_readout,
    patching_numbers,
    suppression_numbers,
)
from test_readout_fp32 import READOUT_RTOL

from mechscope.engine import Engine
from mechscope.models import LoadedModel, load_model
from mechscope.tolerance import eps

#: The fp32 readout's rounding, relative to the largest logit (test_readout_fp32.py).
R = READOUT_RTOL
#: Below the tolerance by this factor or more, the bf16 readout must miss it by as much.
MISS = 10.0


def fp64_readout(lm: LoadedModel, h: torch.Tensor) -> torch.Tensor:
    """Llama's head in float64, differentiable in ``h``: RMSNorm, then ``W`` (``[..., V]``)."""
    norm, head = lm.final_norm(), lm.unembed_modules()[-1]
    x = h.double()
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon)
    return (x * norm.weight.double()) @ head.weight.double().T


@contextmanager
def fp64_pass(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The engine's readout (lens and pass logits) in float64, handed on as fp32."""

    def readout(self, h: torch.Tensor, fp32: bool = True, out: torch.Tensor | None = None):
        z = fp64_readout(self.lm, h).float()
        return z if out is None else out.copy_(z)

    monkeypatch.setattr(Engine, "unembed", readout)
    try:
        yield
    finally:
        monkeypatch.undo()


@pytest.fixture(scope="module")
def bf16(stories_path) -> LoadedModel:
    lm = load_model(str(stories_path), dtype="bfloat16")
    assert lm.card.family == "llama" and lm.logit_scale is None and not lm.logit_softcap
    return lm


def three_ways(
    fn: Callable[[LoadedModel], dict[str, np.ndarray]], lm: LoadedModel
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray]]:
    """``(fp32 readout, fp64 readout, bf16 readout)`` numbers of one workflow."""
    got = fn(lm)
    with fp64_pass(pytest.MonkeyPatch()):
        ref = fn(lm)
    with old_readout(pytest.MonkeyPatch()):
        old = fn(lm)
    return got, ref, old


@pytest.fixture(scope="module")
def scale(bf16) -> float:
    """S: the largest |logit| the readout produces on these inputs (17 to 21)."""
    ids = bf16.tokenizer("Lily and Tim went to the park. Tim gave", return_tensors="pt")
    return float(Engine.of(bf16).run(ids.input_ids).logits.abs().max())


def check_logits(got: np.ndarray, ref: np.ndarray, old: np.ndarray, scale: float) -> None:
    tol = 4 * R * scale
    assert abs_err(got, ref).max() <= tol
    assert abs_err(old, ref).max() > MISS * tol


def check_divergence(got: np.ndarray, ref: np.ndarray, old: np.ndarray, scale: float) -> None:
    keep = ~np.isnan(ref)
    tol = 2 * R * scale * np.sqrt(2 * np.maximum(ref[keep], 0)) + 1e-6
    assert np.all(np.abs(got[keep] - ref[keep]) <= tol)
    assert np.max(np.abs(old[keep] - ref[keep]) / tol) > MISS


def test_lens(bf16, scale):
    got, ref, old = three_ways(lens_numbers, bf16)
    check_logits(got["dnll"], ref["dnll"], old["dnll"], scale)
    check_divergence(got["js"], ref["js"], old["js"], scale)


def test_patching(bf16, scale):
    got, ref, old = three_ways(patching_numbers, bf16)
    for key in ("logit_diff", "clean", "corrupt"):
        check_logits(got[key], ref[key], old[key], scale)


def test_ig(bf16):
    """The objective's values are exact like any logit metric. The attributions also carry
    the bf16 backward pass: the gradient reaching the network from the readout is rounded
    to bf16 at the last residual stream, so any change of the readout, however small,
    flips some of those roundings. Their tolerance is one bf16 spacing of the largest
    attribution, ``U·max|attr|`` (measured: 0.05 of it in joint IG, 0.53 in per-layer IG);
    the bf16 readout reaches 0.8 and 2.3 of it."""
    got, ref, old = three_ways(ig_numbers, bf16)
    tol = 4 * R * float(np.abs(ref["ends"]).max())
    assert abs_err(got["ends"], ref["ends"]).max() <= tol  # f(0), f(1): 0.006 of it
    assert abs_err(old["ends"], ref["ends"]).max() > MISS * tol  # measured 33×
    for key in ("joint", "per_layer"):
        bf16_tol = eps(torch.bfloat16) / 2 * float(np.abs(ref[key]).max())  # one bf16 spacing
        assert abs_err(got[key], ref[key]).max() <= bf16_tol
    assert abs_err(old["per_layer"], ref["per_layer"]).max() > bf16_tol


def test_suppression(bf16, scale):
    got, ref, old = three_ways(suppression_numbers, bf16)
    check_divergence(got["token_kl"], ref["token_kl"], old["token_kl"], scale)


def test_distill_consistency(bf16, scale):
    got, ref, old = three_ways(consistency_numbers, bf16)
    for key in ("delta", "clean"):
        check_logits(got[key], ref[key], old[key], scale)
