"""router and expert_out on mixture-of-experts layers, against the modules themselves.

References: the router module's own top-k output (a plain hook), the experts module's
output (a plain hook), the model with one expert's down projection zeroed, and a router
replaced by one that returns every expert with given weights. Comparisons allow rounding
at the values' scale and depth (tests/tolerance.py).
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

from mechscope.engine import Ablate, Engine, Patch, Read, Site
from mechscope.errors import SiteError, UnsupportedInterventionError
from mechscope.models import load_model
from tolerance import assert_beyond_rounding, assert_rounding_close, depth_of, scale_of

MOE_CARD = {"mlp_out": "mlp", "mlp_down": None, "experts": "mlp.experts"}
N_EXPERTS = 4
MODELS = {
    "mixtral": dict(SMALL, num_local_experts=N_EXPERTS, num_experts_per_tok=2),
    "qwen3_moe": dict(
        SMALL, num_experts=N_EXPERTS, num_experts_per_tok=2, moe_intermediate_size=32, head_dim=16
    ),
}
LAYER = 1


@pytest.fixture(
    scope="module",
    params=[(m, impl) for m in MODELS for impl in ("eager", "grouped_mm")],
    ids=lambda p: f"{p[0]}-{p[1]}",
)
def moe(request):
    name, impl = request.param
    lm = build(name, MOE_CARD, **MODELS[name])
    lm.model.set_experts_implementation(impl)
    return lm, Engine.of(lm)


def _router(lm) -> torch.nn.Module:
    return lm.layer_module(LAYER).mlp.gate


def test_router_is_the_dense_top_k(moe):
    lm, eng = moe
    x = ids(lm)
    with Capture(_router(lm), output=True) as cap:
        handle = _router(lm).register_forward_hook(lambda m, a, out: cap.__setattr__("out", out))
        got = eng.run(x, [Read(Site("router", LAYER))], logits=False)[Site("router", LAYER)]
        handle.remove()
    _, weights, index = cap.out  # [tokens, k], [tokens, k]
    dense = torch.zeros(index.shape[0], N_EXPERTS).scatter(1, index, weights.float())
    torch.testing.assert_close(got.reshape(-1, N_EXPERTS), dense, atol=0, rtol=0)
    assert got.shape == (*x.shape, N_EXPERTS)
    assert bool(((got != 0).sum(-1) == 2).all())


def test_expert_outs_sum_to_the_experts_output(moe):
    lm, eng = moe
    x = ids(lm)
    sites = [Site("expert_out", LAYER, expert=e) for e in range(N_EXPERTS)]
    with Capture(lm.layer_part("experts", LAYER), output=True) as cap:
        out = eng.run(x, [Read(s) for s in sites])
    total = sum(out[s] for s in sites)  # a sum of the experts' terms: their scale
    scale = scale_of(cap.value, *(out[s] for s in sites))
    got = total.reshape(cap.value.shape)
    assert_rounding_close(got, cap.value, depth=1, scale=scale, msg="sum of expert_out")
    router = eng.run(x, [Read(Site("router", LAYER))], logits=False)[Site("router", LAYER)]
    for e, s in enumerate(sites):  # zero exactly where the token does not use expert e
        assert bool((out[s].abs().sum(-1)[router[..., e] == 0] == 0).all())
        assert bool((out[s].abs().sum(-1)[router[..., e] != 0] > 0).all())


@pytest.mark.parametrize("expert", [0, 3])
def test_ablating_an_expert_is_the_model_without_it(moe, expert):
    lm, eng = moe
    x = ids(lm)
    got = eng.run(x, [Ablate(Site("expert_out", LAYER, expert=expert))]).logits
    model = lm.model
    down = lm.layer_part("experts", LAYER).down_proj
    saved = down.detach().clone()
    with torch.no_grad():
        down[expert] = 0
    try:
        ref = logits_of(model, x).logits
    finally:
        with torch.no_grad():
            down.copy_(saved)
    depth = depth_of(lm)
    assert_rounding_close(got, ref, depth=depth, msg=f"expert {expert} ablated")
    base = eng.run(x).logits
    assert_beyond_rounding(got, base, depth=depth, scale=scale_of(base), msg="ablation")


@pytest.mark.parametrize("name", ["router", "expert_out"])
def test_self_patch_and_noisy_patch(moe, name):
    lm, eng = moe
    x = ids(lm)
    base = eng.run(x).logits
    site = Site(name, LAYER, expert=1 if name == "expert_out" else None)
    value = eng.run(x, [Read(site)], logits=False)[site]
    depth = depth_of(lm)
    assert_rounding_close(eng.run(x, [Patch(site, value)]).logits, base, depth=depth, msg=name)
    noise = torch.rand(value.shape, generator=torch.Generator().manual_seed(1))
    noisy = eng.run(x, [Patch(site, value + noise)]).logits
    assert_beyond_rounding(noisy, base, depth=depth, scale=scale_of(base), msg=name)


def test_a_dense_router_patch_uses_every_expert(moe, monkeypatch):
    """A patch giving every token all experts (k grows to the number of experts) equals the
    model whose router returns all experts with those weights."""
    lm, eng = moe
    x = ids(lm)
    dense = torch.rand(*x.shape, N_EXPERTS, generator=torch.Generator().manual_seed(2))
    dense[0, 3, 2] = 0  # one token skips one expert: rows of different lengths
    got = eng.run(x, [Patch(Site("router", LAYER), dense)]).logits
    gate = _router(lm)
    flat = dense.reshape(-1, N_EXPERTS)
    index = torch.arange(N_EXPERTS).expand(flat.shape[0], -1)
    monkeypatch.setattr(gate, "forward", lambda h: (None, flat.to(h.dtype), index))
    ref = logits_of(lm.model, x).logits
    monkeypatch.undo()
    assert_rounding_close(got, ref, depth=depth_of(lm), msg="dense router")


def test_moe_reads_under_grad_stay_in_the_graph(moe):
    lm, eng = moe
    x = ids(lm, batch=1)
    sites = [Site("router", LAYER), Site("expert_out", LAYER, expert=0)]
    out = eng.run(x, [Read(s) for s in sites], grad=True)
    torch.testing.assert_close(out.logits, eng.run(x).logits, atol=0, rtol=0)
    grads = torch.autograd.grad(out.logits[0, -1, 5], [out[s] for s in sites])
    assert all(float(g.abs().sum()) > 0 for g in grads)


def test_moe_sites_refused_where_they_do_not_exist(moe):
    lm, eng = moe
    x = ids(lm)
    with pytest.raises(UnsupportedInterventionError, match="mlp_post is not supported"):
        eng.run(x, [Read(Site("mlp_post", 0))])
    with pytest.raises(SiteError, match="expert 4 out of range"):
        eng.run(x, [Read(Site("expert_out", 0, expert=N_EXPERTS))])
    dense = load_model("tiny:llama")
    with pytest.raises(UnsupportedInterventionError, match="names no experts module"):
        Engine.of(dense).run(x, [Read(Site("router", 0))])
