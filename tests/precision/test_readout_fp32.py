"""The fp32 readout (final norm, unembedding, scale, soft-cap) of low-precision models.

The reference is independent of :mod:`mechscope.engine.core.unembed`: deep copies of the model's
own final norm and unembedding converted to float64 (whole, with ``Module.double()``),
applied to the same hidden states, then the logit scale and soft-cap in float64.

Tolerance ``READOUT_RTOL`` (``K·eps·√2 ≈ 5e-6``) of the largest logit. fp32's unit roundoff is
``u = 2^-24 ≈ 6e-8``; the readout is a norm (a mean of ``d`` squares, a root, two
products) and a ``d``-term dot product, whose rounding grows like ``√d·u`` times
``Σ|x_i w_i| / |logit|`` (≈ 5e-7 for ``d = 64``); measured: 2e-7 to 4e-7 on every family
below. bf16 keeps 8 bits of mantissa, relative rounding ``2^-9 ≈ 2e-3`` per stored value;
the readout as it was (in the model's dtype, cast afterwards) rounds the normalised state
and every logit to bf16, so its error is ≥ 2e-3 of the largest logit (measured 2.4e-3 to
5.1e-3): the tolerance is 200× below it, and each test measures that the old path fails.
"""

from __future__ import annotations

import copy

import pytest
import torch

from mechscope.engine import Engine, Read, Site
from mechscope.engine.core import unembed as unembed_module
from mechscope.engine.core.unembed import FinalHidden, linear_fp32, vocab_chunk
from mechscope.models import LoadedModel, load_model
from mechscope.tolerance import eps, rounding_tolerance
from tolerance import assert_rounding_close, assert_within

#: Of the largest logit: two fp32 stages (the norm, the unembedding), ``K·eps·√2 ≈ 5e-6``.
READOUT_RTOL = rounding_tolerance(1.0, depth=2)
#: Families with something particular in their head: LayerNorm with bias (gpt2), Gemma's
#: ``1 + w`` norm and soft-cap (gemma2), a logit scale (cohere), a two-module head
#: (modernbert, not causal).
FAMILIES = ("tiny:llama", "tiny:gemma2", "tiny:gpt2", "tiny:cohere", "tiny:modernbert")


def fp64_readout(lm: LoadedModel, h: torch.Tensor) -> torch.Tensor:
    """The model's own head, every module converted to float64: ``[..., vocab]``."""
    modules = [lm.final_norm(), *lm.unembed_modules()]
    x = h.detach().double()
    with torch.no_grad():
        for module in modules:
            x = copy.deepcopy(module).double()(x)
    if lm.logit_scale is not None:
        x = x * lm.logit_scale
    if lm.logit_softcap:
        x = torch.tanh(x / lm.logit_softcap) * lm.logit_softcap
    return x


def rel_err(got: torch.Tensor, ref: torch.Tensor) -> float:
    """Largest error over the largest logit."""
    return float((got.detach().double() - ref).abs().max()) / float(ref.abs().max())


def last_hidden(lm: LoadedModel, seed: int = 0) -> tuple[torch.Tensor, Engine]:
    eng = Engine.of(lm)
    ids = torch.randint(5, 100, (2, 9), generator=torch.Generator().manual_seed(seed))
    last = Site("resid_post", lm.n_layers - 1)
    return eng.run(ids, [Read(last)], logits=False)[last], eng


@pytest.fixture(scope="module")
def stories_bf16(stories_path):
    return load_model(str(stories_path), dtype="bfloat16")


@pytest.mark.parametrize("spec", FAMILIES)
def test_bf16_readout_equals_fp64_head(spec):
    lm = load_model(spec, dtype="bfloat16")
    h, eng = last_hidden(lm)  # [2, 9, d] bf16
    ref = fp64_readout(lm, h)
    got = eng.unembed(h)
    assert got.dtype == torch.float32
    assert rel_err(got, ref) < READOUT_RTOL
    old = eng.unembed(h, fp32=False).float()  # the readout before: bf16 throughout
    assert rel_err(old, ref) > 10 * READOUT_RTOL


def test_bf16_readout_of_a_trained_model(stories_bf16):
    """stories260K: trained weights, logits up to ~17 (bf16 spacing 1/16 there)."""
    h, eng = last_hidden(stories_bf16)
    ref = fp64_readout(stories_bf16, h)
    assert float(ref.abs().max()) > 8  # large logits: where bf16 rounding is coarse
    assert rel_err(eng.unembed(h), ref) < READOUT_RTOL
    assert rel_err(eng.unembed(h, fp32=False).float(), ref) > 10 * READOUT_RTOL


@pytest.mark.parametrize("spec", ("tiny:llama", "tiny:gemma2"))
def test_fp32_model_takes_its_own_head_bit_for_bit(spec):
    """An fp32 model: the readout is the plain module calls, and pass logits are the
    model's own (numbers pinned elsewhere stay as they were)."""
    lm = load_model(spec)
    h, eng = last_hidden(lm)
    x = lm.final_norm()(h)
    for module in lm.unembed_modules():
        x = module(x)
    if lm.logit_softcap:
        x = torch.tanh(x / lm.logit_softcap) * lm.logit_softcap
    assert torch.equal(eng.unembed(h), x)
    ids = torch.randint(5, 100, (2, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        own = lm.model(input_ids=ids).logits
    assert torch.equal(eng.run(ids).logits, own)


def test_pass_logits_are_the_fp32_readout(stories_bf16):
    """bf16 model: every way of asking for logits gives the fp32 readout of the last
    residual stream at those positions, not the model's bf16 head."""
    eng = Engine.of(stories_bf16)
    ids = torch.randint(5, 500, (2, 12), generator=torch.Generator().manual_seed(1))
    last = Site("resid_post", stories_bf16.n_layers - 1)
    full = eng.run(ids, [Read(last)])
    ref = fp64_readout(stories_bf16, full[last])  # [2, 12, V]
    assert full.logits.dtype == torch.float32
    assert rel_err(full.logits, ref) < READOUT_RTOL
    tail = eng.run(ids, logits=3).logits  # the last 3 positions
    assert tail.shape == (2, 3, stories_bf16.vocab_size)
    assert rel_err(tail, ref[:, -3:]) < READOUT_RTOL
    picked = eng.run(ids, logits=torch.tensor([0, 5])).logits
    assert rel_err(picked, ref[:, [0, 5]]) < READOUT_RTOL
    site = Site("logits", positions=(4,))
    read = eng.run(ids, [Read(site)])[site]
    assert rel_err(read, ref[:, [4]]) < READOUT_RTOL
    with torch.no_grad():  # the model's own bf16 head is what the pass no longer returns
        own = stories_bf16.model(input_ids=ids).logits
    assert rel_err(own, ref) > 10 * READOUT_RTOL


def test_readout_fires_no_hook_of_the_model(stories_bf16):
    """The fp32 twins carry no hooks: a readout on another thread never runs a hook the
    engine has on the real final norm (the lens readout overlaps the next forward)."""
    calls = []
    norm = stories_bf16.final_norm()
    handle = norm.register_forward_pre_hook(lambda m, a: calls.append(1))
    try:
        Engine.of(stories_bf16).unembed(torch.randn(3, stories_bf16.d_model).bfloat16())
    finally:
        handle.remove()
    assert calls == []
    hooked = FinalHidden(stories_bf16)  # the pass's own capture: fires on the real norm
    try:
        with torch.no_grad():
            stories_bf16.model(input_ids=torch.tensor([[1, 5, 7]]))
    finally:
        hooked.handle.remove()
    assert hooked.h is not None and hooked.h.shape == (1, 3, stories_bf16.d_model)


@pytest.mark.parametrize("bias", [False, True])
def test_chunked_linear_value_and_gradients(monkeypatch, bias):
    """Seven chunks of 10 rows against one fp64 product; gradients of x, W and b against
    fp64 autograd. bf16 weights, so the fp64 reference holds the same numbers exactly."""
    monkeypatch.setattr(unembed_module, "UNEMBED_CHUNK_BYTES", 4 * 16 * 10)
    g = torch.Generator().manual_seed(0)
    w = torch.randn(67, 16, generator=g).bfloat16().requires_grad_()  # [vocab, d]
    b = torch.randn(67, generator=g).bfloat16().requires_grad_() if bias else None
    x = torch.randn(2, 3, 16, generator=g, requires_grad=True)  # [..., d] fp32
    assert vocab_chunk(w) == 10
    out = linear_fp32(x, w, b)  # [2, 3, 67]
    up = torch.randn(out.shape, generator=g)
    (out * up).sum().backward()
    x64 = x.detach().double().requires_grad_()
    w64 = w.detach().double().requires_grad_()
    b64 = b.detach().double().requires_grad_() if b is not None else None
    ref = x64 @ w64.T + (b64 if b64 is not None else 0)
    (ref * up.double()).sum().backward()
    # each fp32 product is one matmul stage per chunk, rounded at its terms' magnitude
    terms = x64.detach().abs() @ w64.detach().abs().T  # [2, 3, 67]: Σ|x_i w_i|
    bias = float(b64.detach().abs().max()) if b64 is not None else 0.0
    assert_rounding_close(out, ref.detach(), depth=1, scale=float(terms.max()) + bias, msg="out")
    chunks = -(-67 // vocab_chunk(w))  # x's gradient: the chunks' partial products added up
    scale = float((up.double().abs() @ w64.detach().abs()).max())
    assert_rounding_close(x.grad, x64.grad, depth=chunks, scale=scale, msg="x gradient")
    # the weight's and the bias's gradients: fp32 sums over the 6 rows (one stage), stored
    # in the weight's dtype: one bf16 rounding, at most half an ulp (eps/2 of the value)
    half_ulp = 0.5 * eps(torch.bfloat16)
    rows = up.double().abs().reshape(-1, 67)  # [6, vocab]
    cases = [("weight", w.grad, w64.grad, rows.T @ x64.detach().abs().reshape(-1, 16))]
    if b is not None and b64 is not None:
        cases.append(("bias", b.grad, b64.grad, rows.sum(0)))
    for name, got, want, terms in cases:  # terms: the sums' Σ|terms|
        t32 = rounding_tolerance(float(terms.max()), 1)  # the fp32 sum's
        bound = half_ulp * (want.abs() + t32) + t32
        assert_within(got.double(), want, bound, msg=f"{name} gradient")
