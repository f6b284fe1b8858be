"""Families whose attention or residual stream the engine once mishandled, against eager.

gemma2 (attention soft-capping), gpt_oss (attention sinks), deepseek_v2/v3 (multi-head
latent attention: value heads smaller than query heads), sliding windows shorter than the
sequence (mistral, gemma2, gpt_oss); falcon and bloom (attention in their own code);
granite (residual and logit scales), cohere (logit scale, parallel block), OPT (an MLP
output flattened to ``[batch*seq, d]``). References: the same weights under
``attn_implementation="eager"``, and eager with a suppression block added to HF's own mask.
Comparisons allow rounding at the values' scale and depth (tests/tolerance.py).
"""

from __future__ import annotations

import copy

import pytest
import torch
from engine_tiny import (
    SMALL,
    build,
    eager_copy,
    ids,
    logits_of,
    one_thread,  # noqa: F401  (autouse fixture)
    suppressed_eager,
)

from mechscope.engine import (
    Engine,
    Patch,
    Read,
    ReduceAttention,
    Site,
    SuppressAttention,
)
from mechscope.errors import UnsupportedInterventionError
from tolerance import (
    assert_beyond_rounding,
    assert_rounding_close,
    depth_of,
    scale_of,
    score_scale,
)

SLIDING = ["sliding_attention", "full_attention", "sliding_attention"]
MOE = {"mlp_out": "mlp", "mlp_down": None, "experts": "mlp.experts"}
MLA = dict(
    SMALL,
    num_key_value_heads=4,
    moe_intermediate_size=32,
    n_routed_experts=4,
    num_experts_per_tok=2,
    first_k_dense_replace=1,
    kv_lora_rank=16,
    qk_rope_head_dim=8,
    qk_nope_head_dim=8,
    v_head_dim=12,
    n_shared_experts=1,
)
FAMILIES = {
    "gemma2": (
        {
            "attn_out": "post_attention_layernorm",
            "mlp_out": "post_feedforward_layernorm",
            "logit_softcap": "final_logit_softcapping",
        },
        dict(
            SMALL,
            head_dim=16,
            sliding_window=4,
            attn_logit_softcapping=2.0,  # small enough to bind on random weights
            query_pre_attn_scalar=16,
            layer_types=SLIDING,
        ),
    ),
    "gpt_oss": (
        MOE,
        dict(
            SMALL,
            intermediate_size=64,
            head_dim=16,
            sliding_window=4,
            num_local_experts=4,
            num_experts_per_tok=2,
            layer_types=SLIDING,
        ),
    ),
    "deepseek_v3": (
        {**MOE, "mlp_down": "mlp.down_proj"},
        dict(MLA, n_group=1, topk_group=1, q_lora_rank=None),
    ),
    "deepseek_v2": ({**MOE, "mlp_down": "mlp.down_proj"}, dict(MLA, q_lora_rank=16)),
    "mistral": ({}, dict(SMALL, sliding_window=4)),
}


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request):
    card, config = FAMILIES[request.param]
    lm = build(request.param, card, **config)
    if request.param == "gpt_oss":  # sinks large enough that dropping them shows
        with torch.no_grad():
            for layer in range(lm.n_layers):
                lm.layer_part("attn", layer).sinks.normal_(
                    0, 2, generator=torch.Generator().manual_seed(layer)
                )
    eng = Engine.of(lm)
    return request.param, lm, eng, eager_copy(lm)


def test_logits_equal_eager_without_and_with_pattern_reads(family):
    name, lm, eng, eager = family
    x = ids(lm)  # 12 tokens: longer than the 4-token sliding windows
    ref = logits_of(eager, x, output_attentions=True)
    depth = depth_of(lm)
    assert_rounding_close(eng.run(x).logits, ref.logits, depth=depth, msg="logits")
    names = ("pattern", "attn_scores")
    out = eng.run(x, [Read(Site(n, layer)) for layer in range(lm.n_layers) for n in names])
    assert_rounding_close(out.logits, ref.logits, depth=depth, msg="logits with reads")
    for layer in range(lm.n_layers):
        got, want = out[Site("pattern", layer)], ref.attentions[layer].float()
        scale = score_scale(out[Site("attn_scores", layer)])
        depth = depth_of(lm, layer)
        assert_rounding_close(got, want, depth=depth, scale=scale, msg=f"pattern {layer}")
    if name == "gpt_oss":  # the sink takes mass: probabilities over real keys sum to < 1
        assert float(out[Site("pattern", 0)].sum(-1).max()) < 1 - 1e-3


def test_suppression_equals_eager_with_the_span_masked(family):
    _, lm, eng, eager = family
    x = ids(lm)
    start, end = 3, 6
    ref = logits_of(suppressed_eager(lm, start, end), x).logits
    got = eng.run(x, [SuppressAttention((start, end))]).logits
    assert_rounding_close(got, ref, depth=depth_of(lm), msg="suppression")
    plain = logits_of(eager, x).logits  # the span mattered
    assert_beyond_rounding(ref, plain, depth=depth_of(lm), scale=scale_of(plain), msg="span")


def test_attn_scores_and_z_shapes(family):
    name, lm, eng, _ = family
    x = ids(lm)
    sites = [Site(n, 1) for n in ("attn_scores", "pattern", "z", "q", "k", "v")]
    out = eng.run(x, [Read(s) for s in sites], logits=False)
    scores, pattern, z, q, k, v = (out[s] for s in sites)
    seq = x.shape[1]
    assert scores.shape == (2, lm.n_heads, seq, seq)
    probs = torch.softmax(scores, -1)
    if name == "gpt_oss":  # the sink column joins the softmax and is dropped
        sink = lm.layer_part("attn", 1).sinks.float()[None, :, None]
        top = torch.maximum(scores.amax(-1), sink)
        mass = torch.exp(scores - top[..., None]).sum(-1)
        probs = probs * (mass / (mass + torch.exp(sink - top)))[..., None]
    scale = score_scale(scores)  # the same pass's scores, one softmax
    assert_rounding_close(probs, pattern, depth=1, scale=scale, msg="softmax(scores)")
    assert z.shape == (2, seq, lm.n_heads, lm.d_head)
    assert v.shape[-1] == lm.d_head  # MLA: z's head size is the value head size
    assert q.shape[-1] == k.shape[-1]


@pytest.mark.parametrize("name", ["q", "k", "v", "attn_scores", "z", "resid_mid"])
def test_self_patch_and_noisy_patch(family, name):
    _, lm, eng, _ = family
    x = ids(lm)
    base = eng.run(x).logits
    site = Site(name, 1)
    value = eng.run(x, [Read(site)], logits=False)[site]
    depth = depth_of(lm)
    assert_rounding_close(eng.run(x, [Patch(site, value)]).logits, base, depth=depth, msg=name)
    noise = torch.randn(value.shape, generator=torch.Generator().manual_seed(1))
    noisy = eng.run(x, [Patch(site, value + noise)]).logits
    assert_beyond_rounding(noisy, base, depth=depth, scale=scale_of(base), msg=name)


# --- families that compute attention in their own code ------------------------------------

OWN_ATTENTION = {
    "falcon": (
        {
            "embed": "transformer.word_embeddings",
            "layers": "transformer.h",
            "attn": "self_attention",
            "o_proj": "self_attention.dense",
            "attn_out": "self_attention",
            "mlp_down": "mlp.dense_4h_to_h",
            "final_norm": "transformer.ln_f",
            "n_kv_heads": ["num_kv_heads", "num_attention_heads"],
            "parallel": "parallel_attn",
        },
        {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4},
    ),
    "bloom": (
        {
            "embed": "transformer.word_embeddings",
            "layers": "transformer.h",
            "attn": "self_attention",
            "o_proj": "self_attention.dense",
            "attn_out": "self_attention",
            "mlp_down": "mlp.dense_4h_to_h",
            "final_norm": "transformer.ln_f",
            "n_heads": ["n_head"],
            "n_kv_heads": ["n_head"],
            "n_layers": ["n_layer"],
        },
        {"hidden_size": 64, "n_layer": 2, "n_head": 4},
    ),
}


@pytest.mark.parametrize("name", sorted(OWN_ATTENTION))
def test_own_attention_is_refused_before_the_pass(name):
    card, config = OWN_ATTENTION[name]
    lm = build(name, card, **config)
    x = ids(lm)
    ref = logits_of(copy.deepcopy(lm.model), x).logits
    eng = Engine.of(lm)  # does not crash; the model keeps its own attention
    assert_rounding_close(eng.run(x).logits, ref, depth=depth_of(lm), msg="logits")
    calls = []
    lm.model.register_forward_pre_hook(lambda *a: calls.append(1))
    for iv in (
        Read(Site("pattern", 0)),
        Read(Site("q", 1)),
        SuppressAttention((1, 3)),
        ReduceAttention(lambda layer, p: p.sum()),
    ):
        with pytest.raises(UnsupportedInterventionError) as err:
            eng.run(x, [iv])
        assert "\n" not in str(err.value) and "attention interface" in str(err.value)
    assert calls == []  # refused before any forward work
    z = Site("z", 1)
    value = eng.run(x, [Read(z)])[z]  # sites at module boundaries still work
    patched = eng.run(x, [Patch(z, value)]).logits
    assert_rounding_close(patched, ref, depth=depth_of(lm), msg="z self-patch")


def test_a_layer_that_skips_the_attention_function_fails_the_pass():
    """A layer whose module runs attention itself (here: its own eager) while the others
    call the engine: the pass raises rather than return a pattern that never existed."""
    lm = build("llama", {}, **SMALL)
    eng = Engine.of(lm)
    attn = lm.layer_part("attn", 1)
    attn.config = copy.copy(attn.config)
    attn.config._attn_implementation = "eager"
    x = ids(lm)
    before = eng.run(x, [Read(Site("pattern", 0))]).logits
    for iv in (Read(Site("pattern", 1)), SuppressAttention((1, 3), layers=[1]), Read(Site("k", 1))):
        with pytest.raises(UnsupportedInterventionError, match="layer 1: LlamaAttention never"):
            eng.run(x, [iv])
    after = eng.run(x).logits  # nothing stayed
    assert_rounding_close(after, before, depth=depth_of(lm), msg="after the refusal")


def test_mixed_dense_and_expert_layers():
    """DeepSeek's first layer is a dense MLP, the others mixtures of experts: each site is
    served where its module exists and refused in one line where it does not."""
    card, config = FAMILIES["deepseek_v3"]
    lm = build("deepseek_v3", card, **config)
    eng = Engine.of(lm)
    x = ids(lm)
    eng.run(
        x,
        [Read(Site("mlp_post", 0)), Read(Site("router", 1)), Read(Site("expert_out", 2, expert=3))],
    )
    with pytest.raises(UnsupportedInterventionError, match="a dense layer"):
        eng.run(x, [Read(Site("router", 0))])
    with pytest.raises(UnsupportedInterventionError, match="a mixture-of-experts layer"):
        eng.run(x, [Read(Site("mlp_post", 1))])
