"""Every workflow on stories260K in bf16 against the same model in fp32.

What bf16 can do. bf16 keeps 8 bits of mantissa: values are ``U = 2^-8 ≈ 0.4%`` apart
(relative), rounding moves each by at most ``U/2``. A bf16 forward rounds every stored
activation: the residual stream after each of the ``2L = 10`` sublayer adds, each
sublayer's normalised input, q, k, v and the MLP's hidden units. The residual stream's
relative error grows like a random walk over those roundings, ``√10 · U/2 ≈ 1.6·U/2 ≈
0.8%`` here, and the logits inherit it: with ``S`` the largest |logit| (17 on these
prompts), ``≈ U·S ≈ 0.07`` per logit. Everything after the forward is fp32
(:mod:`mechscope.engine.core.unembed`), so that is the whole error budget:

- a logit-valued metric (ΔNLL, logit difference, patching effect): mean error ``≤ U·S``,
  largest ``≤ 4·U·S`` (the tail of the walk, and differences of two logits);
- a divergence ``D ∈ {JS, KL}`` moves to first order by at most ``max|δz| · ‖p − q‖₁``,
  and Pinsker gives ``‖p − q‖₁ ≤ √(2·KL)`` (``≤ 2√(2·JS)`` for JS): per entry
  ``≤ 4·U·S · 2√(2·D) + (U·S)²`` (the last term: the second-order floor where p ≈ q);
- IG attributions are shares of ``f(1) − f(0)`` (a sum of NLLs): ``≤ 4·U·|f|``;
- receiver kurtosis: the attention probabilities come from fp32 softmax of scores built
  from bf16 q and k, a score ``s`` moves by ``≈ U·|s|`` and a probability by the same
  relative amount; with scores up to ~16, vertical scores move by ``ρ = 16·U ≈ 6%``, and a
  head's kurtosis by at most ``ρ · Σ_j |∂K/∂v_j|·|v_j|`` (first order, computed from the
  fp32 scores).

Measured on these inputs, the largest error is 0.1 to 0.8 of its tolerance (the ratio is
named in each test). These tolerances are the bf16 forward's; the readout that was in bf16
before stays inside them too (its error is measured against an fp64 readout of the same
bf16 states in ``test_workflows_exact.py``, where it fails). What each test here catches
is a result that is wrong beyond rounding: each also checks that a mix-up of the result's
axes (layers, heads, sentences, conditions) fails the same check.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from precision_helpers import (
    abs_err,
    consistency_numbers,
    ig_numbers,
    lens_numbers,
    patching_numbers,
    receiver_numbers,
    suppression_numbers,
)

from mechscope.models import LoadedModel, load_model

U = 2.0**-8


@pytest.fixture(scope="module")
def models(stories_path) -> tuple[LoadedModel, LoadedModel]:
    return load_model(str(stories_path)), load_model(str(stories_path), dtype="bfloat16")


def logit_scale(lm: LoadedModel, prompts: list[str]) -> float:
    """S: the largest |logit| of the fp32 model over every position of ``prompts``."""
    from mechscope.engine import Engine

    eng = Engine.of(lm)
    return max(
        float(eng.run(lm.tokenizer(p, return_tensors="pt").input_ids).logits.abs().max())
        for p in prompts
    )


def logit_ok(got: np.ndarray, ref: np.ndarray, scale: float, u: float = U) -> bool:
    """A logit-valued metric: mean error ``≤ u·S``, largest ``≤ 4·u·S`` (``u``: the unit
    roundoff of the forward's dtype)."""
    err = abs_err(got, ref)
    return bool(err.mean() <= u * scale and err.max() <= 4 * u * scale)


def divergence_bound(ref: np.ndarray, scale: float, *, js: bool, u: float = U) -> np.ndarray:
    l1 = 2 * np.sqrt(2 * np.maximum(ref, 0)) if js else np.sqrt(2 * np.maximum(ref, 0))
    return 4 * u * scale * l1 + (u * scale) ** 2


def test_lens_dnll_and_js(models):
    from precision_helpers import LENS_SAMPLE

    f32, b16 = models
    ref, got = lens_numbers(f32), lens_numbers(b16)
    conds = LENS_SAMPLE["conditions"]
    scale = logit_scale(f32, [c["prompt"] + LENS_SAMPLE["continuation"] for c in conds.values()])
    assert logit_ok(got["dnll"], ref["dnll"], scale)  # measured: 0.28 / 0.32 of the bounds
    bound = divergence_bound(ref["js"], scale, js=True)
    assert np.all(np.abs(got["js"] - ref["js"]) <= bound)  # measured: 0.03 of it
    assert not logit_ok(-got["dnll"], ref["dnll"], scale)  # the conditions swapped
    assert not np.all(np.abs(got["js"][::-1] - ref["js"]) <= bound)  # layers reversed


def test_patching_logit_diff(models):
    from precision_helpers import ioi_pairs

    f32, b16 = models
    ref, got = patching_numbers(f32), patching_numbers(b16)
    scale = logit_scale(f32, [t for p in ioi_pairs() for t in (p.clean, p.corrupt)])
    for key in ("logit_diff", "clean", "corrupt"):  # measured: at most 0.55 of the bounds
        assert logit_ok(got[key], ref[key], scale)
    # correct and wrong answers mixed up (on this model every patched logit difference
    # lies within 0.3 of the others: the grid itself is below bf16's resolution)
    assert not logit_ok(-got["logit_diff"], ref["logit_diff"], scale)


def attribution_ok(got: np.ndarray, ref: np.ndarray, f_size: float, u: float = U) -> bool:
    """IG attributions (shares of ``f(1) − f(0)``): largest error ``≤ 4·u·|f|``, mean
    ``≤ u·|f|``."""
    err = abs_err(got, ref)
    return bool(err.max() <= 4 * u * f_size and err.mean() <= u * f_size)


def test_ig_attributions(models):
    f32, b16 = models
    ref, got = ig_numbers(f32), ig_numbers(b16)
    f_size = float(np.abs(ref["ends"]).max())
    for key in ("joint", "per_layer"):  # measured: at most 0.16 of the bounds
        assert attribution_ok(got[key], ref[key], f_size)
    assert abs_err(got["ends"], ref["ends"]).max() <= 4 * U * f_size  # measured: 0.24
    assert not attribution_ok(got["joint"][::-1], ref["joint"], f_size)  # layers reversed


def kurtosis_sensitivity(vertical: np.ndarray) -> np.ndarray:
    """``Σ_j |∂K/∂v_j|·|v_j|`` per head of ``vertical [L, H, n]`` (fp64 autograd)."""
    out = np.zeros(vertical.shape[:2])
    for idx in np.ndindex(*vertical.shape[:2]):
        v = torch.tensor(vertical[idx], dtype=torch.float64)
        v = v[~torch.isnan(v)].requires_grad_()
        d = v - v.mean()
        k = (d**4).mean() / (d**2).mean() ** 2 - 3
        (g,) = torch.autograd.grad(k, v)
        out[idx] = float((g.abs() * v.detach().abs()).sum())
    return out


def test_receiver_kurtosis(models):
    f32, b16 = models
    ref, got = receiver_numbers(f32), receiver_numbers(b16)
    bound = 16 * U * kurtosis_sensitivity(ref["vertical"])  # [L, H]
    assert np.all(np.abs(got["kurtosis"] - ref["kurtosis"]) <= bound)  # measured: 0.51
    shifted = np.roll(got["kurtosis"], 1, axis=1)  # each layer's heads shifted by one
    assert not np.all(np.abs(shifted - ref["kurtosis"]) <= bound)


def test_suppression_kl(models):
    from precision_helpers import TRACE_TEXT

    f32, b16 = models
    ref, got = suppression_numbers(f32), suppression_numbers(b16)
    scale = logit_scale(f32, [TRACE_TEXT])
    keep = ~np.isnan(ref["token_kl"])
    bound = divergence_bound(ref["token_kl"], scale, js=False)  # [sources, seq]
    err = np.abs(got["token_kl"] - ref["token_kl"])
    assert np.all(err[keep] <= bound[keep])  # measured: 0.81 of the bound
    rolled = np.abs(np.roll(got["token_kl"], 1, axis=0) - ref["token_kl"])  # sources
    assert not np.all(
        rolled[keep & np.roll(keep, 1, axis=0)] <= bound[keep & np.roll(keep, 1, axis=0)]
    )


def test_distill_consistency_effects(models):
    from precision_helpers import ioi_pairs

    f32, b16 = models
    ref, got = consistency_numbers(f32), consistency_numbers(b16)
    scale = logit_scale(f32, [t for p in ioi_pairs() for t in (p.clean, p.corrupt)])
    assert logit_ok(got["delta"], ref["delta"], scale)  # measured: 0.08 / 0.12
    assert logit_ok(got["clean"], ref["clean"], scale)  # measured: 0.55 / 0.20
    assert not logit_ok(got["delta"][::-1], ref["delta"], scale)  # sites reversed
