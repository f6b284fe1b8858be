"""A residual stack read along a token pair (``Components.logit_diff``) with the model's
real readout, against the model's own logits and the logit lens.

Families: those of ``test_cache.py`` (RMS and layer norms with biases, post-norms, Cohere's
logit scale, Granite's logit divisor) and a llama whose unembedding has a bias. References
never go through the readout under test: the run's own logits (the engine's fp32 readout of
the last residual stream), and ``unembed`` (the model's own final norm and head modules) of
each layer's residual stream.

Tolerance (fp32, ``tests/tolerance.py``): the same numbers summed in another order, at the
magnitude of the logits, through one readout (depth 1 for the logit lens of a stored
residual stream, every layer for the final logits, which come from the pass itself).
"""

from __future__ import annotations

import pytest
import torch
from engine_tiny import SMALL, build, one_thread  # noqa: F401  (autouse fixture)
from test_cache import FAMILIES, PROMPTS, _model

from mechscope.engine import Engine
from mechscope.engine.core.unembed import unembed
from mechscope.errors import InputError, UnsupportedInterventionError
from tolerance import assert_beyond_rounding, assert_rounding_close, depth_of, scale_of

A, B = 5, 7


def _biased(family: str) -> object:
    """A model whose unembedding (and final norm, where it has a bias) has random biases, so
    the metric moves with them."""
    lm = _model(family)
    gen = torch.Generator().manual_seed(1)
    head, norm = lm.unembed_modules()[-1], lm.final_norm()
    head.bias = torch.nn.Parameter(torch.randn(head.out_features, generator=gen))
    if getattr(norm, "bias", None) is not None:
        norm.bias.data = torch.randn(norm.bias.shape, generator=gen)
    return lm


@pytest.fixture(scope="module", params=[*FAMILIES, "llama+bias", "gpt2+bias"])
def run(request):
    family, biased = request.param.removesuffix("+bias"), request.param.endswith("+bias")
    lm = _biased(family) if biased else _model(family)
    return lm, Engine.of(lm).run_with_cache(PROMPTS)  # resid_mid where the model has one


def test_the_last_layer_is_the_models_own_logit_difference(run) -> None:
    lm, cache = run
    want = cache.logits[..., A] - cache.logits[..., B]  # [batch, seq]
    scale = scale_of(cache.logits[:, -1])
    for apply_norm in ("frozen", True):
        acc = cache.accumulated_resid(incl_mid=("resid_mid", 0) in cache, apply_norm=apply_norm)
        got = acc.logit_diff(lm, A, B)  # [components, batch, pos]
        assert got.shape == (len(acc), *want.shape)
        what = f"final_post, apply_norm={apply_norm!r}"
        assert_rounding_close(
            got[-1, :, -1], want[:, -1], depth=depth_of(lm), scale=scale, msg=what
        )
        # the long row is unpadded: every position
        assert_rounding_close(
            got[-1, 0], want[0], depth=depth_of(lm), scale=scale_of(cache.logits[0]), msg=what
        )


def test_each_layer_with_its_own_norm_is_the_logit_lens(run) -> None:
    lm, cache = run
    acc = cache.accumulated_resid(apply_norm=True)
    got = acc.logit_diff(lm, A, B)
    for l in range(lm.n_layers):
        with torch.no_grad():
            lens = unembed(lm, cache["resid_pre", l])  # [batch, seq, vocab]: the model's modules
        want = lens[..., A] - lens[..., B]
        assert_rounding_close(got[l], want, depth=1, scale=scale_of(lens), msg=f"layer {l}")
    bias = lm.unembed_modules()[-1].bias
    if bias is not None:  # the bias is in the number
        plain = got[-1] - float(lm.logit_scale or 1.0) * (bias[A] - bias[B]).detach()
        assert_beyond_rounding(
            plain, got[-1], depth=depth_of(lm), scale=scale_of(cache.logits), msg="bias"
        )


def test_a_raw_stack_and_soft_capped_logits_are_refused() -> None:
    lm = _model("llama")
    cache = Engine.of(lm).run_with_cache(PROMPTS[1])
    for stack in (cache.accumulated_resid(), cache.decompose_resid()):
        with pytest.raises(InputError, match="not through the final norm") as info:
            stack.logit_diff(lm, A, B)
        assert "\n" not in str(info.value)
    card = {
        "attn_out": "post_attention_layernorm",
        "mlp_out": "post_feedforward_layernorm",
        "logit_softcap": "final_logit_softcapping",
    }
    capped = build("gemma2", card, **dict(SMALL, head_dim=16, final_logit_softcapping=30.0))
    cache = Engine.of(capped).run_with_cache(PROMPTS[1], ["resid_pre", "resid_post"])
    with pytest.raises(UnsupportedInterventionError, match="soft-capped"):
        cache.accumulated_resid(apply_norm=True).logit_diff(capped, A, B)
