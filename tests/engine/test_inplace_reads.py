"""Reads are immune to a model editing a module's output in place after the hook returns.

Falcon's decoder layer runs ``mlp_output += attention_output`` on the MLP's own output
tensor; a read that kept a reference to that tensor would silently become mlp + attention.
"""

from __future__ import annotations

import torch

from mechscope.engine import Engine, Read, Site
from mechscope.models import load_model
from tolerance import assert_beyond_rounding, assert_rounding_close, depth_of, scale_of


def test_a_read_of_falcons_mlp_out_is_the_mlp_output_alone() -> None:
    lm = load_model("tiny:falcon")
    eng = Engine.of(lm)
    assert lm.parallel and lm.card.mlp_out == "mlp"
    ids = torch.randint(10, 300, (2, 9), generator=torch.Generator().manual_seed(0))
    layer = 1
    kept: dict[str, torch.Tensor] = {}
    mlp = lm.layer_part("mlp_out", layer)

    def keep(module, args, output) -> None:  # returns None: the model keeps its own tensor
        kept.setdefault("mlp", output.clone())

    handle = mlp.register_forward_hook(keep)
    try:
        with torch.no_grad():
            ref_logits = lm.model(input_ids=ids).logits
    finally:
        handle.remove()
    sites = [Site("mlp_out", layer), Site("attn_out", layer)]
    for grad in (False, True):
        out = eng.run(ids, [Read(s) for s in sites], grad=grad)
        depth = depth_of(lm, layer)
        assert_rounding_close(out[sites[0]], kept["mlp"], depth=depth, msg="mlp_out")
        assert_rounding_close(out.logits, ref_logits, depth=depth_of(lm), msg="logits")
    # the in-place add does happen in this family: the model's own tensor is rewritten
    pre, post = Site("resid_pre", layer), Site("resid_post", layer)
    both = eng.run(ids, [Read(pre), Read(post), *(Read(s) for s in sites)])
    delta = both[post] - both[pre]  # one layer's adds, rounded at the stream's scale
    scale = scale_of(both[pre], both[post], both[sites[0]], both[sites[1]])
    summed = both[sites[0]] + both[sites[1]]
    assert_rounding_close(summed, delta, depth=1, scale=scale, msg="attn_out + mlp_out")
    assert_beyond_rounding(both[sites[0]], delta, depth=1, scale=scale, msg="mlp_out alone")


def test_reads_under_grad_stay_upstream_of_the_logits() -> None:
    lm = load_model("tiny:falcon")
    eng = Engine.of(lm)
    ids = torch.randint(10, 300, (1, 7), generator=torch.Generator().manual_seed(1))
    site = Site("mlp_out", 0)
    out = eng.run(ids, [Read(site)], grad=True)
    (g,) = torch.autograd.grad(out.logits[0, -1].logsumexp(-1), [out[site]])
    assert g.abs().sum() > 0
