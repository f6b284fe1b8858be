"""What a model cannot support is refused in one line, before any forward work.

Sources of refusals: ``LoadedModel.refused`` (card and probe), a card whose attention is its
own code, a parallel block (no resid_mid), a card without mlp_down / experts. Also the
scaled and flattened contributions (Granite, OPT) and the logit scales (Cohere, Granite)
against the modules' own outputs, up to rounding at the values' scale and depth
(tests/tolerance.py).
"""

from __future__ import annotations

import pytest
import torch
from engine_tiny import (
    SMALL,
    Capture,
    build,
    ids,
    logits_of,
    one_thread,  # noqa: F401  (autouse fixture)
)

from mechscope.engine import (
    Ablate,
    Engine,
    Gate,
    Patch,
    Read,
    ReduceAttention,
    Site,
    SuppressAttention,
)
from mechscope.errors import MechscopeError, UnsupportedInterventionError
from mechscope.models import load_model
from tolerance import assert_beyond_rounding, assert_rounding_close, depth_of, scale_of


def _no_forward(lm) -> list[int]:
    calls: list[int] = []
    lm.model.register_forward_pre_hook(lambda *a: calls.append(1))
    return calls


@pytest.mark.parametrize(
    ("key", "iv"),
    [
        ("q", Read(Site("q", 0))),
        ("attn_scores", Patch(Site("attn_scores", 1), torch.zeros(1))),
        ("mlp_post", Ablate(Site("mlp_post", 2))),
        ("z", Gate(torch.ones(3, 4))),
        ("SuppressAttention", SuppressAttention((1, 3))),
        ("ReduceAttention", ReduceAttention(lambda layer, p: p.sum())),
    ],
)
def test_refused_names_raise_one_line_before_the_pass(key, iv):
    lm = load_model("tiny:llama")
    eng = Engine.of(lm)
    lm.refused[key] = "the probe found it wrong"
    calls = _no_forward(lm)
    with pytest.raises(UnsupportedInterventionError) as err:
        eng.run(ids(lm), [Read(Site("resid_pre", 0)), iv])
    msg = str(err.value)
    assert msg == f"{key} is not supported for tiny:llama: the probe found it wrong"
    assert isinstance(err.value, MechscopeError)
    assert calls == []
    del lm.refused[key]
    eng.run(ids(lm), [iv])  # allowed again


def test_card_with_own_attention_refuses_attention_sites():
    card = {"attention": "own"}
    lm = build("llama", card, **SMALL)
    eng = Engine.of(lm)
    for iv in (Read(Site("pattern", 0)), Read(Site("k", 0)), SuppressAttention((0, 1))):
        with pytest.raises(UnsupportedInterventionError, match="computes attention in its own"):
            eng.run(ids(lm), [iv])
    eng.run(ids(lm), [Read(Site("z", 0))])


def test_parallel_block_has_no_resid_mid():
    lm = load_model("tiny:gpt_neox")
    assert lm.parallel
    with pytest.raises(UnsupportedInterventionError, match="in parallel"):
        Engine.of(lm).run(ids(lm), [Read(Site("resid_mid", 0))])


# --- scaled / flattened contributions and logit scales ---------------------------------

OPT = {
    "embed": "model.decoder.embed_tokens",
    "layers": "model.decoder.layers",
    "o_proj": "self_attn.out_proj",
    "mlp_out": "fc2",
    "mlp_down": "fc2",
    "final_norm": "model.decoder.final_layer_norm",
    "n_kv_heads": ["num_attention_heads"],
}
SCALED = {
    "granite": (
        {"residual_scale": "residual_multiplier", "logit_divisor": "logits_scaling"},
        dict(SMALL, residual_multiplier=0.5, logits_scaling=4.0),
    ),
    "cohere": (
        {"logit_scale": "logit_scale", "parallel": True},
        dict(SMALL, logit_scale=0.25),
    ),
    "opt": (
        OPT,
        dict(
            hidden_size=64,
            ffn_dim=128,
            num_hidden_layers=3,
            num_attention_heads=4,
            word_embed_proj_dim=64,
            max_position_embeddings=64,
        ),
    ),
}


@pytest.fixture(scope="module", params=sorted(SCALED))
def scaled(request):
    card, config = SCALED[request.param]
    lm = build(request.param, card, **config)
    return request.param, lm, Engine.of(lm)


def test_lens_and_residual_identity(scaled):
    """unembed(resid_post[L-1]) is the logits (logit scale applied), and in every layer
    resid_post - resid_pre = attn_out + mlp_out (scaled contributions, [b, s, d])."""
    _, lm, eng = scaled
    x = ids(lm)
    names = ("resid_pre", "resid_post", "attn_out", "mlp_out")
    out = eng.run(x, [Read(Site(n, layer)) for n in names for layer in range(lm.n_layers)])
    ref = logits_of(lm.model, x).logits
    assert_rounding_close(out.logits, ref, depth=depth_of(lm), msg="logits")
    last = out[Site("resid_post", lm.n_layers - 1)]
    assert_rounding_close(eng.unembed(last), out.logits, depth=1, msg="lens")
    for layer in range(lm.n_layers):
        pre, post, attn, mlp = (out[Site(n, layer)] for n in names)
        assert attn.shape == mlp.shape == pre.shape  # one layer's adds, at the stream's scale
        scale = scale_of(pre, post, attn, mlp)
        assert_rounding_close(post - pre, attn + mlp, depth=1, scale=scale, msg=f"layer {layer}")


def test_contribution_is_the_scaled_module_output(scaled):
    name, lm, eng = scaled
    x = ids(lm)
    for site_name in ("attn_out", "mlp_out"):
        site = Site(site_name, 1)
        with Capture(lm.layer_part(site_name, 1), output=True) as cap:
            got = eng.run(x, [Read(site)], logits=False)[site]
        scale = lm.residual_scale or 1.0
        torch.testing.assert_close(got, (cap.value * scale).reshape(got.shape), atol=0, rtol=0)
        assert (name == "granite") == (scale != 1.0)
        assert (name == "opt" and site_name == "mlp_out") == (cap.value.dim() == 2)


@pytest.mark.parametrize("site_name", ["attn_out", "mlp_out", "mlp_post", "resid_mid"])
def test_self_patch_and_noisy_patch(scaled, site_name):
    _, lm, eng = scaled
    x = ids(lm)
    site = Site(site_name, 1)
    if site_name == "resid_mid" and lm.parallel:
        with pytest.raises(UnsupportedInterventionError):
            eng.run(x, [Read(site)])
        return
    base = eng.run(x).logits
    value = eng.run(x, [Read(site)], logits=False)[site]
    depth = depth_of(lm)
    patched = eng.run(x, [Patch(site, value)]).logits
    assert_rounding_close(patched, base, depth=depth, msg=site_name)
    noise = torch.randn(value.shape, generator=torch.Generator().manual_seed(1))
    noisy = eng.run(x, [Patch(site, value + noise)]).logits
    assert_beyond_rounding(noisy, base, depth=depth, scale=scale_of(base), msg=site_name)
    if site_name == "resid_mid":  # resid_mid = resid_pre + attn_out: one add
        pre, attn = Site("resid_pre", 1), Site("attn_out", 1)
        out = eng.run(x, [Read(pre), Read(attn)], logits=False)
        summed = out[pre] + out[attn]
        scale = scale_of(value, out[pre], out[attn])
        assert_rounding_close(value, summed, depth=1, scale=scale, msg="resid_mid")
