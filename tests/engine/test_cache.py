"""run_with_cache and the Cache's decompositions, against independent code.

Families: llama (RMS norms, no biases), gpt2 (layer norms, biases, learned positions),
gpt_neox (parallel block, biases), gemma3_text (post-norms after each sublayer), granite
(residual and logit scales) and cohere (parallel block, bias-free layer norm, logit scale).
References never go through the engine: transformers' hidden states, plain torch hooks, the
model's own logits, and the frozen-scale readout written out in this file.

Tolerances (fp32): what rounding alone explains (``tests/tolerance.py``): a site of layer
``l`` at depth ``l + 1``, logits through every layer; a sum of ``n`` pieces against the
model's own running sum at depth ``n`` and the pieces' largest magnitude; one readout
recomputed in another order at depth 1, at the magnitude of the products it sums.
"""

from __future__ import annotations

import re

import pytest
import torch
from engine_tiny import (
    SMALL,
    Capture,
    build,
    one_thread,  # noqa: F401  (autouse fixture)
)

from mechscope.engine import Engine, Site
from mechscope.errors import MemoryBudgetError, UnsupportedInterventionError
from mechscope.models import load_model
from mechscope.models.memory import human_bytes, parse_memory
from tolerance import assert_rounding_close, assert_within, decimal_bound, depth_of, scale_of

PROMPTS = ["When Mary and John went to the store, John gave a drink to", "Once upon a time"]
BUILT_IN = ["llama", "gpt2", "gpt_neox", "gemma3_text"]
SCALED = {
    "granite": (
        {"residual_scale": "residual_multiplier", "logit_divisor": "logits_scaling"},
        dict(SMALL, residual_multiplier=0.5, logits_scaling=4.0),
    ),
    "cohere": ({"logit_scale": "logit_scale", "parallel": True}, dict(SMALL, logit_scale=0.25)),
}
FAMILIES = BUILT_IN + sorted(SCALED)


def _model(family: str):
    if family in SCALED:
        card, config = SCALED[family]
        return build(family, card, **config)
    return load_model(f"tiny:{family}")


@pytest.fixture(scope="module", params=FAMILIES)
def run(request):
    lm = _model(request.param)
    cache = Engine.of(lm).run_with_cache(PROMPTS)
    return lm, cache


def _real(cache, row: int) -> slice:
    """The real (unpadded) positions of a left-padded row."""
    return slice(cache.tokens.ids.shape[1] - cache.tokens.lengths[row], None)


def test_cache_equals_transformers_hidden_states(run) -> None:
    lm, cache = run
    tokens = cache.tokens
    with torch.no_grad():
        hf = lm.model(
            input_ids=tokens.ids,
            attention_mask=tokens.attention_mask,
            position_ids=tokens.position_ids,
            output_hidden_states=True,
        )
    for layer in range(lm.n_layers):
        for row in range(2):
            real = _real(cache, row)
            ours, theirs = cache["resid_pre", layer][row, real], hf.hidden_states[layer][row, real]
            what = f"resid_pre {layer} row {row}"
            assert_rounding_close(ours, theirs, depth=depth_of(lm, layer), msg=what)
    assert_rounding_close(cache.logits[:, -1], hf.logits[:, -1], depth=depth_of(lm), msg="logits")


def test_decompose_resid_sums_to_the_residual_stream(run) -> None:
    lm, cache = run
    for layer in (1, None):
        parts = cache.decompose_resid(layer)
        want = cache["resid_post", -1] if layer is None else cache["resid_pre", layer]
        assert parts.labels[0] == "embed" and len(parts) == 1 + 2 * (layer or lm.n_layers)
        scale = scale_of(parts.values, want)
        what = f"decompose_resid({layer})"
        assert_rounding_close(parts.total(), want, depth=len(parts), scale=scale, msg=what)


def test_stack_head_results_sum_to_attn_out_and_equal_z_times_w_o(run) -> None:
    """Independent: z from a plain pre-hook on o_proj, times each head's columns of W_O."""
    lm, cache = run
    heads = cache.stack_head_results()
    assert heads.values.shape[0] == lm.n_layers * lm.n_heads
    for layer in range(lm.n_layers):
        block = heads.values[layer * lm.n_heads : (layer + 1) * lm.n_heads]  # [H, b, p, d]
        want = cache["attn_out", layer].float()
        rest = cache.stack_head_results(layer).rest
        scale = scale_of(block, rest, want)
        what = f"layer {layer}'s heads"
        assert_rounding_close(
            block.sum(0) + rest, want, depth=lm.n_heads + 1, scale=scale, msg=what
        )
    if lm.card.attn_out == lm.card.o_proj.rsplit(".", 1)[0] and lm.residual_scale is None:
        o_proj = lm.layer_part("o_proj", 0)
        with Capture(o_proj) as z, torch.no_grad():
            lm.model(
                input_ids=cache.tokens.ids,
                attention_mask=cache.tokens.attention_mask,
                position_ids=cache.tokens.position_ids,
            )
        w = o_proj.weight if isinstance(o_proj, torch.nn.Linear) else o_proj.weight.T  # [d, H*dh]
        zs = z.value.view(*z.value.shape[:2], lm.n_heads, -1)
        for h in range(lm.n_heads):
            cols = slice(h * lm.d_head, (h + 1) * lm.d_head)
            want = zs[:, :, h] @ w[:, cols].T
            assert_rounding_close(heads[f"L0H{h}"], want, depth=1, msg=f"L0H{h} = z @ W_O")


def _readout_terms(lm, h: torch.Tensor, s: torch.Tensor, direction: torch.Tensor) -> torch.Tensor:
    """The terms ``[b, d]`` of the independent frozen-scale readout of ``h [b, d]``: the
    final norm written out from its weights (RMS: x/s·g, Gemma: x/s·(1+w), layer norm:
    (x - mean)/s·w + b), times the unembedding rows of ``direction [b, d]`` and the logit
    scale; without the biases (they cancel in a change)."""
    norm = lm.final_norm()
    weight = norm.weight.float()
    if type(norm).__name__.startswith("Gemma"):
        weight = 1 + weight
    if isinstance(norm, torch.nn.LayerNorm) or "LayerNorm" in type(norm).__name__:
        h = h - h.mean(-1, keepdim=True)
    return (h / s * weight) * direction * float(lm.logit_scale or 1.0)


def test_logit_attribution_is_the_frozen_scale_readout_and_sums_up(run) -> None:
    lm, cache = run
    a, b = 5, 7
    dla = cache.logit_attribution(a, b)
    # 1. the pieces plus the constant are the model's own logit difference: a difference of
    #    logits (their scale) read off a sum of pieces (theirs, if larger) through the pass
    pieces = (dla.embed, dla.attn, dla.mlp, dla.constant, cache.logits[:, -1])
    scale = scale_of(*pieces)
    depth = depth_of(lm)
    assert_rounding_close(dla.total(), dla.logit_diff, depth=depth, scale=scale, msg="DLA total")
    # 2. each layer's piece is the change the independent frozen-scale readout predicts
    w_u = lm.unembed_modules()[-1].weight.float()
    direction = (w_u[a] - w_u[b]).expand(2, -1)
    s = cache.final_scale()[:, -1]  # [b, 1]
    for layer in range(lm.n_layers):
        for name, got in (("attn_out", dla.attn[:, layer]), ("mlp_out", dla.mlp[:, layer])):
            piece = cache[name, layer][:, -1].float()
            terms = _readout_terms(lm, piece, s, direction)  # [b, d]
            want, scale = terms.sum(-1), scale_of(terms.abs().sum(-1))  # partial sums' bound
            what = f"{name} {layer} readout"
            assert_rounding_close(got, want, depth=1, scale=scale, msg=what)
    # 3. per head (and per neuron) plus the bias equals the layer's attention (MLP) piece:
    #    a sum of H + 1 (d_mlp + 1) terms
    heads = dla.heads.sum(-1) + dla.head_rest
    scale = scale_of(dla.heads, dla.head_rest, dla.attn)
    assert_rounding_close(heads, dla.attn, depth=lm.n_heads + 1, scale=scale, msg="heads")
    neurons = dla.neurons.sum(-1) + dla.neuron_rest
    scale = scale_of(dla.neurons, dla.neuron_rest, dla.mlp)
    depth = dla.neurons.shape[-1] + 1
    assert_rounding_close(neurons, dla.mlp, depth=depth, scale=scale, msg="neurons")
    assert dla.to_frame().shape[0] == 2 * (1 + 2 * lm.n_layers + lm.n_layers * lm.n_heads + 1)
    assert "DLA" in dla.figure().title or "attribution" in dla.figure().title
    assert "<table" in dla._repr_html_() and "<table" in cache._repr_html_()


def test_accumulated_resid_and_the_final_norm(run) -> None:
    lm, cache = run
    acc = cache.accumulated_resid()
    assert acc.labels[-1] == "final_post" and len(acc) == lm.n_layers + 1
    normed = cache.accumulated_resid(apply_norm=True).values[-1]
    with torch.no_grad():
        want = lm.final_norm()(cache["resid_post", -1])
    assert_rounding_close(normed, want, depth=1, msg="final norm")  # one module, recomputed
    frozen = cache.accumulated_resid(apply_norm="frozen").values[-1]
    bias = getattr(lm.final_norm(), "bias", None)
    frozen = frozen + (0 if bias is None else bias)
    assert_rounding_close(frozen, want, depth=1, msg="frozen final norm")


@pytest.mark.parametrize("family", BUILT_IN)
def test_padded_rows_equal_the_unpadded_rows(family: str) -> None:
    lm = load_model(f"tiny:{family}")
    eng = Engine.of(lm)
    batch = eng.run_with_cache(PROMPTS)
    assert batch.tokens.attention_mask is not None  # the rows differ in length
    dla = batch.logit_attribution(5, 7)
    for row, prompt in enumerate(PROMPTS):
        alone = eng.run_with_cache(prompt)
        real = _real(batch, row)
        for name in ("resid_post", "z", "mlp_pre", "ln1_scale"):
            for layer in range(lm.n_layers):
                got, want = batch[name, layer][row, real], alone[name, layer][0]
                depth = depth_of(lm, layer)
                assert_rounding_close(got, want, depth=depth, msg=f"{name} {layer} row {row}")
        got, want = batch.logits[row, -1], alone.logits[0, -1]
        assert_rounding_close(got, want, depth=depth_of(lm), msg=f"logits row {row}")
        one = alone.logit_attribution(5, 7)
        scale = scale_of(batch.logits[row, -1], dla.heads[row])  # read off the logits' pass
        got, want = dla.heads[row], one.heads[0]
        assert_rounding_close(got, want, depth=depth_of(lm), scale=scale, msg=f"DLA row {row}")


def test_stop_positions_filters_and_device() -> None:
    lm = load_model("tiny:llama")
    eng = Engine.of(lm)
    ids = torch.randint(10, 300, (2, 9), generator=torch.Generator().manual_seed(0))
    full = eng.run_with_cache(ids)
    early = eng.run_with_cache(ids, ["resid_pre", "z"], stop_at_layer=1, device="cpu")
    assert early.logits is None and ("resid_pre", 1) in early and ("z", 1) not in early
    torch.testing.assert_close(early["resid_pre", 1], full["resid_pre", 1], atol=0, rtol=0)
    with pytest.raises(KeyError, match="stopped at layer 1"):
        early["z", 2]
    kept = eng.run_with_cache(ids, lambda name: name.endswith("_scale"), positions=[0, -1])
    assert {k[0] for k in kept} == {"ln1_scale", "ln2_scale", "ln_final_scale"}
    torch.testing.assert_close(
        kept["ln1_scale", 2], full["ln1_scale", 2][:, [0, -1]], atol=0, rtol=0
    )
    torch.testing.assert_close(full[Site("z", 2, head=1)], full["z", 2][:, :, 1], atol=0, rtol=0)
    long = torch.randint(10, 300, (2, 400), generator=torch.Generator().manual_seed(0))
    with pytest.raises(MemoryBudgetError, match="cache fewer sites") as info:
        eng.run_with_cache(long, memory="1MiB")  # about 8 MiB of reads
    assert "\n" not in str(info.value)
    assert "over the 1.00 MiB it may use" in str(info.value) and "0.00 GiB" not in str(info.value)
    sizes = re.search(
        r"hold (\S+ \S+) .*\(cache (\S+ \S+), pass (\S+ \S+)\), over the (\S+ \S+)",
        str(info.value),
    )
    texts = sizes.groups()
    held, cache, run, limit = (parse_memory(x.replace(" ", ""))[1] for x in texts)
    assert limit == 2**20 and held > limit and cache > 2**20  # each in a unit that shows it
    # the three numbers as written: each within half a unit of its last digit
    written = [x.split()[0] for x in texts[:3]]  # "1.23" of "1.23 MiB"
    amounts = (held, cache, run)
    bound = sum(decimal_bound(w) * a / float(w) for w, a in zip(written, amounts, strict=True))
    assert_within(held, cache + run, bound, msg="held = cache + pass")


def test_human_bytes() -> None:
    assert [human_bytes(n) for n in (512, 2**20, 1.5 * 2**20, 3.25 * 2**30, 2**41)] == [
        "512 B",
        "1.00 MiB",
        "1.50 MiB",
        "3.25 GiB",
        "2.00 TiB",
    ]


def test_a_nonlinearity_after_o_proj_is_refused_not_decomposed() -> None:
    """A tanh between o_proj and what the layer adds (a plain hook on the attention module)
    breaks z @ W_O's sum: stack_head_results and per-head attribution refuse in one line."""
    lm = load_model("tiny:llama")
    handle = lm.layer_part("attn", 1).register_forward_hook(
        lambda m, args, out: (torch.tanh(out[0] * 10), *out[1:])
    )
    try:
        cache = Engine.of(lm).run_with_cache(PROMPTS[1])
        parts, want = cache.decompose_resid(), cache["resid_post", -1]  # still holds
        scale = scale_of(parts.values, want)
        assert_rounding_close(parts.total(), want, depth=len(parts), scale=scale, msg="resid")
        with pytest.raises(UnsupportedInterventionError, match="layer 1's heads") as info:
            cache.stack_head_results()
        assert "\n" not in str(info.value)
        with pytest.raises(UnsupportedInterventionError, match="layer 1's heads"):
            cache.logit_attribution(5, 7)
    finally:
        handle.remove()


def test_soft_capped_logits_are_refused() -> None:
    card = {
        "attn_out": "post_attention_layernorm",
        "mlp_out": "post_feedforward_layernorm",
        "logit_softcap": "final_logit_softcapping",
    }
    lm = build("gemma2", card, **dict(SMALL, head_dim=16, final_logit_softcapping=30.0))
    cache = Engine.of(lm).run_with_cache(PROMPTS[1])
    with pytest.raises(UnsupportedInterventionError, match="soft-capped"):
        cache.logit_attribution(5, 7)
