"""Integrated gradients on real (tiny) models: completeness, captum, dead heads, batching.

Two computations of the same gradients (captum's batch against ours, one step per batch
against several) are compared up to the rounding of a forward and backward pass through
every layer (tests/tolerance.py); completeness, a property of the quadrature, to 1% of the
objective's change.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from attribution_helpers import COMPLETION, PROMPT
from captum.attr import IntegratedGradients

from mechscope.engine import Engine, Read, Site
from mechscope.heads.baselines import gate_gradients, head_mask_importance
from mechscope.heads.gatefn import GateFunction
from mechscope.heads.ig import joint_ig, per_layer_ig, random_threshold_ig, staggered_ig
from mechscope.heads.objectives import nll_objective
from mechscope.heads.shapley import shapley_exact
from mechscope.models import load_model
from tolerance import assert_fp64_close, assert_rounding_close, depth_of


def test_completeness_within_one_percent_at_32_gauss_legendre_steps(stories_f, tiny_f) -> None:
    for f in (stories_f, tiny_f):
        res = joint_ig(f, n_steps=32)
        gap = abs(res.segments.f_end[0] - res.segments.f_start[0])
        assert gap > 0.01  # the check is not vacuous
        assert abs(res.segments.delta[0]) < 0.01 * gap


def test_completeness_error_shrinks_with_more_steps(stories_f) -> None:
    errs = [abs(joint_ig(stories_f, n_steps=n).segments.delta[0]) for n in (2, 8, 32)]
    assert errs[0] > errs[1] > errs[2]
    mids = [
        abs(joint_ig(stories_f, n_steps=n, method="riemann_middle").segments.delta[0])
        for n in (4, 16, 64)
    ]
    assert mids[0] > mids[1] > mids[2]


@pytest.mark.parametrize(
    "method", ["gauss_legendre", "riemann_left", "riemann_right", "riemann_middle"]
)
def test_equals_captum_integrated_gradients(stories_f, method: str) -> None:
    n, b = 32, 0.1
    ours = joint_ig(stories_f, n_steps=n, method=method, baseline=b).attributions
    ig = IntegratedGradients(lambda a: stories_f(a))
    ones = torch.ones((1, *stories_f.shape))
    captum_method = "gausslegendre" if method == "gauss_legendre" else method
    theirs = ig.attribute(ones, baselines=torch.full_like(ones, b), n_steps=n, method=captum_method)
    want = theirs[0].double().numpy()
    assert_rounding_close(ours, want, depth=depth_of(stories_f.lm), msg=method)


def test_trapezoid_is_captums_rescaled(stories_f) -> None:
    n = 16
    ours = joint_ig(stories_f, n_steps=n, method="riemann_trapezoid").attributions
    ig = IntegratedGradients(lambda a: stories_f(a))
    ones = torch.ones((1, *stories_f.shape))
    theirs = ig.attribute(ones, baselines=0 * ones, n_steps=n, method="riemann_trapezoid")
    want = theirs[0].double().numpy() * n / (n - 1)
    assert_rounding_close(ours, want, depth=depth_of(stories_f.lm), msg="trapezoid")


def test_batched_and_unbatched_steps_agree(stories_f) -> None:
    one = joint_ig(stories_f, n_steps=8, internal_batch_size=1).attributions
    some = joint_ig(stories_f, n_steps=8, internal_batch_size=3).attributions
    full = joint_ig(stories_f, n_steps=8).attributions
    depth = depth_of(stories_f.lm)
    assert_rounding_close(one, some, depth=depth, msg="batches of 3")
    assert_rounding_close(one, full, depth=depth, msg="one batch")
    a = per_layer_ig(stories_f, n_steps=4, internal_batch_size=1).attributions
    b = per_layer_ig(stories_f, n_steps=4).attributions
    assert_rounding_close(a, b, depth=depth, msg="per layer")


def test_per_layer_completeness_against_each_layers_endpoints(stories_f) -> None:
    res = per_layer_ig(stories_f, n_steps=16)
    s = res.segments
    # each layer's start: that layer off, the rest on (evaluated independently here)
    for i, layer in enumerate(range(stories_f.shape[0])):
        gate = torch.ones((1, *stories_f.shape))
        gate[0, layer] = 0.0
        with torch.no_grad():
            want = stories_f(gate).item()
        assert_rounding_close(s.f_start[i], want, depth=depth_of(stories_f.lm), msg=f"{i}")
    assert np.all(s.rel_delta < 0.01)
    # the same float64 numbers summed over a layer's heads: their own rounding
    heads = res.attributions.shape[1]
    scale = float(np.abs(res.attributions).sum(axis=1).max())
    assert_fp64_close(res.attributions.sum(axis=1), s.total, terms=heads, scale=scale)


def test_random_and_staggered_paths_satisfy_completeness(stories_f) -> None:
    rnd = random_threshold_ig(stories_f, n_paths=3, window=0.5, n_steps=64, seed=1)
    frame = rnd.completeness_frame()
    assert frame["rel_delta"].max() < 0.01
    stag = staggered_ig(stories_f, n_steps=32)
    assert stag.segments.rel_delta[0] < 0.01


def test_head_that_does_nothing_gets_zero() -> None:
    lm = load_model("tiny:llama")  # a private copy: its weights are edited
    layer, head = 1, 2
    o_proj = lm.layer_part("o_proj", layer)
    with torch.no_grad():
        o_proj.weight[:, head * lm.d_head : (head + 1) * lm.d_head] = 0.0
    f = GateFunction(lm, nll_objective(lm.tokenizer, PROMPT, COMPLETION, sample_id="dead"))
    for res in (
        joint_ig(f, n_steps=8),
        per_layer_ig(f, n_steps=4),
        staggered_ig(f, n_steps=8),
        random_threshold_ig(f, n_paths=2, n_steps=16),
    ):
        assert res.attributions[layer, head] == 0.0
        assert np.abs(res.attributions).max() > 0
    assert gate_gradients([f])[0, layer, head] == 0.0
    sh = shapley_exact(f, [(layer, head), (0, 0)])
    assert sh.values[0] == 0.0


def test_gate_gradient_is_gradient_times_activation(stories_f) -> None:
    """∂f/∂α_h at α = 1 equals Σ_{pos, d} ∂f/∂z_h · z_h, computed from z reads."""
    lm, obj = stories_f.lm, stories_f.objective
    sites = [Site("z", layer) for layer in range(lm.n_layers)]
    out = Engine.of(lm).run(
        obj.input_ids, [Read(s) for s in sites], logits=obj.positions, grad=True
    )
    value = obj.value(out.logits, 1).sum()
    zs = [out.reads[s] for s in sites]  # each [1, seq, heads, d_head]
    grads = torch.autograd.grad(value, zs)
    terms = [g * z for g, z in zip(grads, zs, strict=True)]
    gxa = torch.stack([t.sum(dim=(0, 1, 3)) for t in terms])
    gate = gate_gradients([stories_f])[0]
    # a sum over positions and dimensions: rounded at its terms' scale
    scale = max(float(t.abs().sum(dim=(0, 1, 3)).max()) for t in terms)
    want = gxa.detach().double().numpy()
    assert_rounding_close(gate, want, depth=depth_of(lm), scale=scale, msg="gate gradients")


def test_head_mask_importance_normalises_layers_and_does_not_accumulate(stories_f, tiny_f) -> None:
    g1 = gate_gradients([stories_f])
    g2 = gate_gradients([stories_f])
    np.testing.assert_array_equal(g1, g2)  # fresh gradient each batch, nothing accumulates
    imp = head_mask_importance(np.concatenate([g1, 3 * g1]))
    want = np.abs(g1[0]) * 2  # mean of |g| and |3g|
    want /= np.linalg.norm(want, axis=1, keepdims=True)
    # float64: a mean of two, then a norm over a layer's heads, of values normalised to 1
    terms = 2 + imp.shape[1]
    assert_fp64_close(imp, want, terms=terms, scale=1.0, msg="importance")
    assert_fp64_close(np.linalg.norm(imp, axis=1), 1.0, terms=terms, scale=1.0, msg="unit rows")
