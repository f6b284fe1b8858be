"""Asking for more never changes a number: the same pass gives bit-identical logits with
or without any read or reduction, in fp32 and bf16.

Reading probabilities (``pattern``, ``attn_scores``, ``ReduceAttention``) used to send the
layer through the engine's explicit fp32 attention, whose output differs from SDPA's (or
the family's eager attention) in the last bits: 2e-7 on fp32 logits, 3e-3 on bf16 ones,
and up to 0.55 nats per token on a bf16 smollm2 lens. Now the probabilities are computed on
the side and the layer passes on what it would have computed unread. Families: llama
(SDPA), gemma2 (soft-capping: the family's eager attention), gpt_oss (attention sinks),
deepseek_v3 (latent attention: value heads of another size), qwen3_moe (router and
expert sites).
"""

from __future__ import annotations

import pytest
import torch

from mechscope.engine import Engine, Read, ReduceAttention, Site
from mechscope.models import load_model
from tolerance import assert_rounding_close, depth_of, score_scale

FAMILIES = ["llama", "gemma2", "gpt_oss", "deepseek_v3", "qwen3_moe"]
DTYPES = [torch.float32, torch.bfloat16]
MODULE_SITES = ("resid_pre", "resid_mid", "resid_post", "attn_out", "mlp_out", "z", "mlp_post")


def _reads(lm, eng) -> dict[str, list]:
    """Every kind of read or reduction the model serves, on every layer."""
    L, refused = lm.n_layers, {**eng.refusals, **lm.refused}
    kinds = {
        "pattern": [Read(Site("pattern", l)) for l in range(L)],
        "attn_scores": [Read(Site("attn_scores", l)) for l in range(L)],
        "ReduceAttention": [ReduceAttention(lambda l, p: p[..., :3].sum(-1))],
        "qkv": [Read(Site(n, l)) for l in range(L) for n in "qkv"],
        "logits": [Read(Site("logits", None))],
    }
    for name in MODULE_SITES:
        if name not in refused:
            kinds[name] = [Read(Site(name, l)) for l in range(L) if _has(lm, name, l)]
    if "router" not in refused:
        moe = [l for l in range(L) if _has(lm, "router", l)]
        kinds["router"] = [Read(Site("router", l)) for l in moe]
        kinds["expert_out"] = [Read(Site("expert_out", l, expert=1)) for l in moe]
    kinds["everything"] = [iv for ivs in list(kinds.values()) for iv in ivs]
    return {k: v for k, v in kinds.items() if v and k not in refused}


def _has(lm, name: str, layer: int) -> bool:
    role = {"mlp_post": "mlp_down", "router": "experts"}.get(name)
    if role is None:
        return True
    try:
        lm.layer_part(role, layer)
    except AttributeError:
        return False
    return True


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("family", FAMILIES)
def test_reads_leave_the_pass_bit_identical(family, dtype):
    lm = load_model(f"tiny:{family}", dtype=dtype)
    eng = Engine.of(lm)
    ids = torch.randint(10, 300, (2, 12), generator=torch.Generator().manual_seed(0))
    base = eng.run(ids).logits
    kinds = _reads(lm, eng)
    assert {"pattern", "attn_scores", "ReduceAttention", "everything"} <= set(kinds)
    for kind, reads in kinds.items():
        out = eng.run(ids, reads)
        assert torch.equal(out.logits, base), f"{kind} changed the logits"
        assert out.reads or out.reductions


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_reads_under_gradients_keep_the_value_and_stay_in_the_graph(dtype):
    """With ``grad=True`` the output keeps SDPA's exact value and the pattern read stays
    upstream of the logits (its gradient is the explicit path's)."""
    lm = load_model("tiny:llama", dtype=dtype)
    eng = Engine.of(lm)
    ids = torch.randint(10, 300, (1, 8), generator=torch.Generator().manual_seed(1))
    base = eng.run(ids, grad=True).logits
    site = Site("pattern", 1)
    out = eng.run(ids, [Read(site)], grad=True)
    assert torch.equal(out.logits.detach(), base.detach())
    (grad,) = torch.autograd.grad(out.logits[0, -1].float().logsumexp(-1), out[site])
    assert grad.abs().sum() > 0


def test_pattern_read_beside_sdpa_is_still_eager_attention():
    """The probabilities read on the side are eager attention's (the conformance check):
    equal up to rounding at their scores' scale."""
    lm = load_model("tiny:llama")
    eng = Engine.of(lm)
    ids = torch.randint(10, 300, (2, 9), generator=torch.Generator().manual_seed(2))
    sites = (Site("pattern", 2), Site("attn_scores", 2))
    out = eng.run(ids, [Read(s) for s in sites], logits=False)
    got, scale = out[sites[0]], score_scale(out[sites[1]])
    lm.model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            ref = lm.model(input_ids=ids, output_attentions=True).attentions[2]
    finally:
        lm.model.set_attn_implementation("mechscope")
    assert_rounding_close(got, ref, depth=depth_of(lm, 2), scale=scale, msg="pattern 2")
