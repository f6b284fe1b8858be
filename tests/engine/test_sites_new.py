"""The sites q/k/v, attn_scores, resid_mid and mlp_post against independent computations.

References: plain torch hooks on the projections plus the family's own rotary function and
q/k norms (q/k/v), the input of llama's pre-MLP norm (resid_mid), the down projection's
input (mlp_post), eager attention's probabilities (softmax of attn_scores). Comparisons
allow rounding at the values' scale and depth (tests/tolerance.py).
"""

from __future__ import annotations

import sys

import pytest
import torch
from engine_tiny import (
    Capture,
    ids,
    one_thread,  # noqa: F401  (autouse fixture)
)

from mechscope.engine import Engine, Patch, Read, Site, SuppressAttention
from mechscope.engine.core import attention as attention_module
from mechscope.engine.interventions.prefix import Resume
from mechscope.errors import SiteError, UnsupportedInterventionError
from mechscope.models import load_model
from tolerance import (
    assert_beyond_rounding,
    assert_rounding_close,
    assert_within,
    depth_of,
    rounding_tolerance,
    scale_of,
    score_scale,
)


@pytest.fixture(scope="module", params=["llama", "qwen3"])
def model(request):
    lm = load_model(f"tiny:{request.param}")
    return lm, Engine.of(lm)


def _rotary_reference(lm, input_ids, layer: int):
    """q, k, v of ``layer`` from hooked projections, the module's q/k norms and its
    modeling file's ``apply_rotary_pos_emb``: ``[b, s, heads, d]``."""
    attn = lm.layer_part("attn", layer)
    caps = {n: Capture(getattr(attn, f"{n}_proj"), output=True) for n in "qkv"}
    with torch.no_grad():
        lm.model(input_ids=input_ids)
    for c in caps.values():
        c.handle.remove()
    b, s = input_ids.shape
    q, k, v = (caps[n].value.view(b, s, -1, attn.head_dim) for n in "qkv")
    if hasattr(attn, "q_norm"):
        q, k = attn.q_norm(q), attn.k_norm(k)
    positions = torch.arange(s)[None].expand(b, -1)
    cos, sin = lm.model.model.rotary_emb(v, positions)
    rotate = sys.modules[type(attn).__module__].apply_rotary_pos_emb
    q, k = rotate(q.transpose(1, 2), k.transpose(1, 2), cos, sin)
    return q.transpose(1, 2), k.transpose(1, 2), v


def test_qkv_reads_are_rotated_projections(model):
    lm, eng = model
    x = ids(lm)
    for layer in range(lm.n_layers):
        sites = [Site(n, layer) for n in "qkv"]
        out = eng.run(x, [Read(s) for s in sites], logits=False)
        for site, ref in zip(sites, _rotary_reference(lm, x, layer), strict=True):
            depth = depth_of(lm, layer)  # the layer's input, then one projection
            assert_rounding_close(out[site], ref, depth=depth + 1, msg=str(site))
    last = Site("k", lm.n_layers - 1)
    assert out[last].shape[2] == lm.n_kv_heads
    head = Site("k", lm.n_layers - 1, head=lm.n_kv_heads - 1, positions=(2, 5))
    got = eng.run(x, [Read(head)], logits=False)[head]
    assert torch.equal(got, out[last][:, [2, 5], lm.n_kv_heads - 1])  # a slice of one pass
    with pytest.raises(SiteError):
        eng.run(x, [Read(Site("k", 0, head=lm.n_kv_heads))])


def test_attn_scores_softmax_is_pattern(model):
    lm, eng = model
    x = ids(lm)
    sites = [Site(n, 1) for n in ("attn_scores", "pattern", "q", "k")]
    out = eng.run(x, [Read(s) for s in sites], logits=False)
    scores, pattern = out[sites[0]], out[sites[1]]
    scale = score_scale(scores)  # the same pass's values, one softmax: one stage
    assert_rounding_close(torch.softmax(scores, -1), pattern, depth=1, scale=scale, msg="softmax")
    # scaled q·k with the causal mask, per query head reading its key/value head
    q, k = out[sites[2]].transpose(1, 2), out[sites[3]].transpose(1, 2)  # [b, h, s, d]
    k = k.repeat_interleave(lm.n_heads // lm.n_kv_heads, dim=1)
    ref = q @ k.transpose(-1, -2) * lm.layer_part("attn", 1).scaling
    causal = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).tril()
    got, want = scores[..., causal], ref[..., causal]
    assert_rounding_close(got, want, depth=1, msg="scores = q·k")
    assert bool((scores[..., ~causal] == torch.finfo(torch.float32).min).all())


def test_resid_mid_is_the_pre_mlp_norm_input(model):
    lm, eng = model
    x = ids(lm)
    for layer in range(lm.n_layers):
        site = Site("resid_mid", layer)
        with Capture(lm.layer_module(layer).post_attention_layernorm) as cap:
            got = eng.run(x, [Read(site)], logits=False)[site]
        depth = depth_of(lm, layer)
        assert_rounding_close(got, cap.value, depth=depth, msg=f"resid_mid {layer}")
        # a patch sets exactly what the MLP's norm sees, other positions untouched
        value = torch.randn(x.shape[0], 2, lm.d_model, generator=torch.Generator().manual_seed(3))
        patch = Patch(Site("resid_mid", layer, positions=(3, 7)), value)
        with Capture(lm.layer_module(layer).post_attention_layernorm) as cap:
            eng.run(x, [patch], logits=False)
        assert_rounding_close(cap.value[:, [3, 7]], value, depth=1, msg="patched")
        keep = [p for p in range(x.shape[1]) if p not in (3, 7)]
        assert_rounding_close(cap.value[:, keep], got[:, keep], depth=depth, msg="kept")


def test_mlp_post_is_the_down_projection_input(model):
    lm, eng = model
    x = ids(lm)
    site = Site("mlp_post", 2)
    with Capture(lm.layer_part("mlp_down", 2)) as cap:
        got = eng.run(x, [Read(site)], logits=False)[site]
    torch.testing.assert_close(got, cap.value, atol=0, rtol=0)
    assert got.shape == (*x.shape, lm.model.config.intermediate_size)


@pytest.mark.parametrize("name", ["resid_mid", "mlp_post", "q", "k", "v", "attn_scores"])
def test_grad_reads_are_the_true_gradients(model, name):
    """Reads under grad=True stay in the graph: their gradient is the gradient with respect
    to the site (checked against a central difference along a random direction)."""
    lm, eng = model
    x = ids(lm, batch=1)
    site = Site(name, 1)

    def metric(logits):  # a logit difference at the last position
        return logits[0, -1, 5] - logits[0, -1, 7]

    out = eng.run(x, [Read(site)], grad=True)
    (grad,) = torch.autograd.grad(metric(out.logits), [out[site]])
    value = out[site].detach()
    live = value > torch.finfo(torch.float32).min  # masked scores get no gradient
    scale = value[live].std()  # a step relative to the site's own size: linear regime
    direction = torch.randn(value.shape, generator=torch.Generator().manual_seed(4)) * live
    # q and k move this metric little on random weights: a longer step lifts the quotient
    # above its rounding floor (their curvature stays small at this step: measured below)
    eps = (0.2 if name in ("q", "k") else 0.05) * scale

    def quotient(step: torch.Tensor) -> float:
        hi = metric(eng.run(x, [Patch(site, value + step * direction)]).logits)
        lo = metric(eng.run(x, [Patch(site, value - step * direction)]).logits)
        return float((hi - lo) / (2 * step))

    numeric, wide = quotient(eps), quotient(2 * eps)
    analytic = float((grad * direction).sum())
    # The quotient's rounding: hi − lo (each a difference of two logits: four logits'
    # tolerance) over 2·eps. Its truncation C·eps² + O(eps⁴), from the same quotient at twice
    # the step (Richardson): wide − numeric = 3·C·eps² up to both quotients' rounding;
    # allowed twice over for the O(eps⁴) rest.
    noise = 2 * rounding_tolerance(scale_of(out.logits), depth_of(lm)) / float(eps)
    truncation = (abs(wide - numeric) + 1.5 * noise) / 3
    assert_within(analytic, numeric, 2 * truncation + noise, msg=f"{name} gradient")
    assert abs(numeric) > noise  # above what rounding alone could make of hi − lo


def test_qkv_only_layers_keep_sdpa(model, monkeypatch):
    lm, eng = model
    calls = []
    real = attention_module.explicit_attention
    monkeypatch.setattr(
        attention_module, "explicit_attention", lambda *a, **k: calls.append(1) or real(*a, **k)
    )
    x = ids(lm)
    eng.run(x, [Read(Site(n, layer)) for n in "qkv" for layer in range(lm.n_layers)])
    assert calls == []
    eng.run(x, [Read(Site("attn_scores", 0))])
    assert calls == [1]


def test_attention_sites_under_resume(model):
    """With a key/value cache the sites cover the current input (the tail); reads and
    patches equal the full pass's."""
    lm, eng = model
    x = ids(lm, batch=1)
    start, seq = 5, x.shape[1]
    base = eng.run(x, cache=True, logits=False)
    gen = torch.Generator().manual_seed(5)
    for name in ("q", "k", "v", "attn_scores", "pattern"):
        site = Site(name, 1, positions=(start, seq - 1))
        full = eng.run(x, [Read(site)])
        tail = eng.run(x, [Read(site)], resume=Resume(base.cache, start))
        scale = score_scale(full[site]) if name == "pattern" else None
        depth = depth_of(lm, 1) + 1
        assert_rounding_close(tail[site], full[site], depth=depth, scale=scale, msg=name)
        if name == "pattern":
            continue
        whole = Site(name, 1)
        value = eng.run(x, [Read(whole)], logits=False)[whole]
        value = value + torch.randn(value.shape, generator=gen)
        pos = 2 if name == "attn_scores" else 1  # patch queries / positions >= start only
        mask = torch.zeros(value.shape[: pos + 1], dtype=torch.bool)
        mask.narrow(pos, start + 2, 1).fill_(True)
        ivs = [Patch(whole, value, mask=mask)]
        full = eng.run(x, ivs).logits[:, start:]
        tail = eng.run(x, ivs, resume=Resume(base.cache, start)).logits
        assert_rounding_close(tail, full, depth=depth_of(lm), msg=name)
        plain = base_logits(eng, x)[:, start:]
        assert_beyond_rounding(full, plain, depth=depth_of(lm), scale=scale_of(plain), msg=name)
        early = mask.clone().fill_(False)
        early.narrow(pos, start - 1, 1).fill_(True)
        with pytest.raises(SiteError):
            eng.run(x, [Patch(whole, value, mask=early)], resume=Resume(base.cache, start))


def base_logits(eng, x):
    return eng.run(x).logits


def test_kv_edits_refused_when_the_cache_is_kept(model):
    lm, eng = model
    x = ids(lm, batch=1)
    value = torch.zeros(1, x.shape[1], lm.n_kv_heads, lm.d_head)
    with pytest.raises(UnsupportedInterventionError, match="cache=True"):
        eng.run(x, [Patch(Site("k", 0), value)], cache=True)
    eng.run(x, [Read(Site("k", 0)), Patch(Site("q", 0), torch.zeros(1))], cache=True)


def test_attn_scores_patch_never_unmasks(model):
    """A zero patch of the scores gives uniform attention over the allowed keys only, and
    suppression applies after the scores' edits."""
    lm, eng = model
    x = ids(lm, batch=1)
    site, pattern = Site("attn_scores", 0), Site("pattern", 0)
    out = eng.run(x, [Patch(site, torch.zeros(1)), Read(pattern)], logits=False)
    seq = x.shape[1]
    uniform = torch.ones(seq, seq).tril()
    uniform = uniform / uniform.sum(-1, keepdim=True)  # scores all 0: a softmax of 1s
    assert_rounding_close(out[pattern][0, 0], uniform, depth=1, scale=1.0, msg="uniform")
    ivs = [Patch(site, torch.zeros(1)), SuppressAttention((2, 4)), Read(pattern)]
    sup = eng.run(x, ivs, logits=False)[pattern]
    assert float(sup[0, :, 4:, 2:4].abs().max()) == 0.0
