"""Feature attribution and steering against what they claim: the exposed splice leaves the
logits as the model computes them, integrated gradients are complete (the attributions sum
to the metric's change), gradient × activation equals a finite difference to first order,
a clamp to the feature's own value changes nothing and a clamp to zero removes exactly the
feature's decoder contribution, and feature steering is a Steer along the decoder row."""

from __future__ import annotations

import pytest
import torch

from mechscope.dictionaries import Dictionary, DictionaryConfig, Hook
from mechscope.engine import Engine, Read, Site
from mechscope.features.attribution import exposed, feature_attribution
from mechscope.features.steer import clamp_feature, decoder_row, feature_steer
from tolerance import assert_exact, assert_rounding_close, assert_within, depth_of

LAYER = 1
PROMPT = "When Mary and John went to the store, John gave a drink to"


def _sae(d_model: int, width: int = 16) -> Dictionary:
    g = torch.Generator().manual_seed(3)
    w_dec = torch.randn(width, d_model, generator=g)
    w_dec /= w_dec.norm(dim=-1, keepdim=True)
    config = DictionaryConfig(
        activation="relu", apply_b_dec_to_input=False, hook_in=Hook("resid_post", LAYER)
    )
    w_enc = 4 * w_dec.T.clone()  # the tiny model's residual norm is about 0.2
    return Dictionary(w_enc, torch.zeros(width), w_dec, torch.zeros(d_model), config)


def _metric(logits: torch.Tensor) -> torch.Tensor:
    return logits[:, -1, 5] - logits[:, -1, 7]


def test_the_exposed_features_change_nothing(tiny, engine) -> None:
    d, holder = _sae(tiny.d_model), {}
    clean = engine.run(PROMPT).logits
    spliced = engine.run(PROMPT, [exposed(d, holder, 1.0)])
    assert_rounding_close(spliced.logits, clean, depth=depth_of(tiny))
    assert holder["f"].shape[-1] == d.d_sae


def _transcoder(d_model: int) -> Dictionary:
    """A random transcoder from the MLP's input to its output at layer ``LAYER``."""
    from dictionary_fixtures import random_dictionary

    return random_dictionary(d_model, Hook("mlp_in", LAYER), Hook("mlp_out", LAYER), seed=2)


@pytest.mark.parametrize(("kind", "steps"), [("sae", 64), ("transcoder", 256)])
def test_integrated_gradients_are_complete(tiny, kind: str, steps: int) -> None:
    """The transcoder's path crosses more curvature (the MLP's output moves with its
    features): its midpoint error falls fourfold per doubling (7 % at 64 steps, 0.4 % at
    256), so it is checked at 256."""
    d = _sae(tiny.d_model) if kind == "sae" else _transcoder(tiny.d_model)
    ig = feature_attribution(tiny, d, PROMPT, _metric, method="ig", steps=steps)
    total = ig.scores.sum((1, 2))
    # the midpoint rule's error on a smooth path: a few per cent of the change
    change = ig.value - ig.baseline
    assert_within(total, change, 0.05 * change.abs() + 1e-3, msg="IG completeness")
    assert ig.top(3)[0][1] != 0


def test_gradient_times_activation_is_the_derivative_along_the_feature(tiny) -> None:
    """Scaling feature i by (1 + ε) at every position moves the metric by ε times its
    gradient × activation, to first order."""
    d = _sae(tiny.d_model)
    att = feature_attribution(tiny, d, PROMPT, _metric)
    feat, score = att.top(1)[0]
    eps = 1e-2
    scale = torch.ones(d.d_sae)
    scale[feat] = 1 + eps
    scaled = Engine.of(tiny).run(PROMPT, [exposed(d, {}, 1.0, scale)]).logits.detach()
    moved = _metric(scaled) - att.value
    # second order: ε² times the curvature, a few per cent of ε · score here
    assert_within(moved, eps * score, 0.05 * abs(eps * score), msg="grad x act vs ε-scaling")


def test_clamps_and_steering(tiny, engine) -> None:
    d = _sae(tiny.d_model)
    site = Site("resid_post", 1)
    clean = engine.run(PROMPT, [Read(site)], logits=False)[site]
    f = d.encode(clean).detach()
    feat = int(f.sum((0, 1)).argmax())
    zero = engine.run(PROMPT, [clamp_feature(d, feat, 0.0), Read(site)], logits=False)
    want = clean - f[..., feat, None] * decoder_row(tiny, d, feat)
    assert_rounding_close(zero[site], want, depth=2)
    steer = feature_steer(tiny, d, feat, 2.0)
    steered = engine.run(PROMPT, [steer, Read(site)], logits=False)[site]
    assert_rounding_close(steered, clean + 2.0 * decoder_row(tiny, d, feat), depth=2)
    later = engine.run(PROMPT, [clamp_feature(d, feat, 0.0, positions=[-1]), Read(site)],
                       logits=False)[site]  # fmt: skip
    assert_exact(later[:, :-1], clean[:, :-1])  # the positions before are not touched
    assert_rounding_close(later[:, -1], want[:, -1], depth=2)
