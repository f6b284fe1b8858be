"""Attribution patching: exact on a model made linear, and its agreement statistics.

Attributions and exact changes are compared up to the rounding of the logits they come
from (tests/tolerance.py); correlations of values equal up to rounding are 1 up to
``(rounding / spread)²`` (:func:`correlation_bound`).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from patching_reference import metric_scale
from scipy import stats

from mechscope.patching import PatchSpec, agreement, patch_pairs, prepare_pair, top_k_overlap
from tolerance import (
    assert_fp64_close,
    assert_rounding_close,
    assert_within,
    correlation_bound,
    depth_of,
    rounding_tolerance,
)

CASES = [
    ("resid_pre", "position"),
    ("attn_out", "position"),
    ("z", "position"),
    ("mlp_out", "span"),
    ("resid_post", "all"),
]


@pytest.mark.parametrize(("site", "granularity"), CASES)
@pytest.mark.parametrize("metric", ["logit_diff", "target_logit"])
def test_attribution_is_exact_on_a_linear_model(linear_lm, same_pair, site, granularity, metric):
    spec = PatchSpec(
        site=site,
        granularity=granularity,
        directions=("denoising", "noising"),
        attribution=True,
        attribution_metric=metric,
    )
    result = patch_pairs(linear_lm, [same_pair], spec, keep_logits=True, progress=False)
    depth, t = depth_of(linear_lm), {}
    for res in result.pairs:
        exact = res.exact_change(metric)
        assert np.abs(exact).max() > 1e-3  # the grid has real effects to estimate
        # exact: a patched metric minus the base one; each a difference of two logits
        top = float(np.abs(res.logits).max())
        scale = 2 * metric_scale(metric, top, linear_lm.vocab_size)
        assert_rounding_close(res.attribution, exact, depth=depth, scale=scale, msg=site)
        t[res.direction] = rounding_tolerance(scale, depth)
    for a in agreement(result, k=3):
        exact = result.direction(a.direction)[0].exact_change(metric)
        if np.ptp(exact) > 1e-3:  # a constant grid ("all" at resid_post) has no correlation
            bound = correlation_bound(exact, t[a.direction])
            assert_within(a.pearson, 1.0, bound, msg=f"{a.direction} correlation")
        if np.unique(np.round(np.abs(exact), 3)).size == exact.size:  # no ties in the ranking
            assert a.top_k_overlap == 1.0


def test_attribution_matches_a_raw_autograd_reference(lm, same_pair):
    """On the (nonlinear) tiny model: (source - base) · grad from plain hooks and autograd."""
    spec = PatchSpec(site="resid_pre", directions=("denoising",), attribution=True)
    res = patch_pairs(lm, [same_pair], spec, progress=False).pairs[0]
    p = prepare_pair(same_pair, lm.tokenizer, "denoising", spec)
    for layer in range(lm.n_layers):
        acts = {}

        def grab(module, args, kwargs, key, acts=acts):
            x = args[0] if args else kwargs["hidden_states"]
            acts[key] = x
            if x.requires_grad:
                x.retain_grad()

        block = lm.model.model.layers[layer]
        h = block.register_forward_pre_hook(lambda m, a, k: grab(m, a, k, "base"), with_kwargs=True)
        try:
            logits = lm.model(input_ids=torch.tensor([p.base_ids]), use_cache=False).logits
            (logits[0, -1, p.correct_id] - logits[0, -1, p.wrong_id]).backward()
        finally:
            h.remove()
        h = block.register_forward_pre_hook(lambda m, a, k: grab(m, a, k, "src"), with_kwargs=True)
        try:
            with torch.no_grad():
                lm.model(input_ids=torch.tensor([p.source_ids]), use_cache=False)
        finally:
            h.remove()
        base = acts["base"]
        terms = ((acts["src"] - base.detach()) * base.grad)[0]  # [seq, d]: summed over d
        expected = terms.sum(-1).double().numpy()
        scale = float(terms.abs().sum(-1).max())  # a sum is rounded at its terms' scale
        got = res.attribution[layer, :, 0]
        assert_rounding_close(got, expected, depth=depth_of(lm), scale=scale, msg=f"{layer}")
    lm.model.zero_grad(set_to_none=True)


def test_agreement_statistics_against_scipy(lm, same_pair):
    spec = PatchSpec(
        site="resid_pre",
        directions=("denoising", "noising"),
        attribution=True,
        skip_identical=False,
    )
    result = patch_pairs(lm, [same_pair], spec, progress=False)
    for a in agreement(result, k=7):
        res = result.direction(a.direction)[0]
        atp = res.attribution.numpy().ravel()  # the result's tensors, as numpy for scipy
        exact = res.exact_change("logit_diff").numpy().ravel()
        want = stats.pearsonr(atp.astype(np.float64), exact.astype(np.float64)).statistic
        assert_fp64_close(a.pearson, want, terms=atp.size, scale=1.0, msg="Pearson")
        top = lambda x: set(np.argsort(-np.abs(x), kind="stable")[:7].tolist())  # noqa: E731
        assert a.top_k_overlap == len(top(atp) & top(exact)) / 7  # the same count over 7
        assert a.n_cells == atp.size


def test_top_k_overlap_by_hand():
    a = np.array([5.0, -4.0, 0.1, 0.2, 3.0])
    b = np.array([0.0, -9.0, 8.0, 0.3, 1.0])
    # top-2 |a| = {0, 1}; top-2 |b| = {1, 2}
    assert top_k_overlap(a, b, 2) == 0.5
    assert top_k_overlap(a, a, 3) == 1.0
    assert top_k_overlap(a, b, 99) == 1.0  # k capped at the number of cells
