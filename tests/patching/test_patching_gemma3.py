"""Real-model patching checks on Gemma 3 270M (slow): identities, and the IOI heatmap.

The IOI pairs use one template (ABC corruption: only S2 differs), so every pair has the same
15 tokens and the per-position grids stack. Measured on 4 pairs: the denoising effect sits
on S2 up to layer 9, spreads between S2 and the end over layers 10-13, and is on the end
position alone from layer 14 (last layer, last position: 1.01).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from patching_reference import logit_scale, metric_scale

from mechscope.data.ioi import generate_ioi
from mechscope.data.ioi_pools import TEMPLATES
from mechscope.patching import PatchSpec, patch_pairs, prepare_pair
from mechscope.patching.figures import position_heatmap
from tolerance import assert_rounding_close, depth_of

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ioi_pairs(gemma3):
    return generate_ioi(3, tokenizer=gemma3.tokenizer, templates=TEMPLATES[:1])


def _readout_logits(lm, ids: list[int]) -> np.ndarray:
    with torch.no_grad():
        return lm.model(torch.tensor([ids])).logits[0, -1].double().numpy()


def test_gemma3_full_denoising_patch_at_layer_0_is_the_clean_run(gemma3, ioi_pairs) -> None:
    """Every position of resid_pre[0] from the clean run: the corrupt run becomes the clean
    run, logits and all."""
    spec = PatchSpec(site="resid_pre", granularity="all", layers=(0,))
    (res,) = patch_pairs(gemma3, ioi_pairs[:1], spec, keep_logits=True, progress=False).pairs
    clean = prepare_pair(ioi_pairs[0], gemma3.tokenizer, "denoising", spec).source_ids
    depth = depth_of(gemma3)  # measured: 0.05 of the tolerance (batched rows)
    assert_rounding_close(res.logits[0, 0, 0], _readout_logits(gemma3, clean), depth=depth)
    scale = metric_scale(
        "normalized_effect", float(np.abs(res.logits).max()), gemma3.vocab_size, res
    )
    effect = res.metrics["normalized_effect"][0, 0, 0]
    assert_rounding_close(effect, 1.0, depth=depth, scale=scale, msg="normalized effect")


def test_gemma3_self_patch_changes_nothing(gemma3, ioi_pairs) -> None:
    """Patching a value that equals the base's own is a self-patch: in a causal model every
    position before S2 has the same residual in both runs at every layer, and at layer 0 so
    has every position with the same token. Run for real (skip_identical=False)."""
    layers = (0, gemma3.n_layers // 2, gemma3.n_layers - 1)
    spec = PatchSpec(site="resid_pre", granularity="position", layers=layers, skip_identical=False)
    (res,) = patch_pairs(gemma3, ioi_pairs[:1], spec, keep_logits=True, progress=False).pairs
    prepared = prepare_pair(ioi_pairs[0], gemma3.tokenizer, "denoising", spec)
    base = _readout_logits(gemma3, prepared.base_ids)
    s2 = res.roles.index("S2")
    for li, _layer in enumerate(layers):
        same = range(len(res.positions)) if li == 0 else range(s2)
        for u in same:
            if u == s2:
                continue
            assert_rounding_close(res.logits[li, u, 0], base, depth=depth_of(gemma3))
    scale = metric_scale(
        "normalized_effect", float(np.abs(res.logits).max()), gemma3.vocab_size, res
    )
    effect = res.metrics["normalized_effect"][0, s2, 0]  # not vacuous: S2 is the clean run's
    assert_rounding_close(effect, 1.0, depth=depth_of(gemma3), scale=scale, msg="S2")


def test_gemma3_ioi_heatmap_moves_to_the_end(gemma3, ioi_pairs) -> None:
    spec = PatchSpec(site="resid_pre", granularity="position")
    result = patch_pairs(gemma3, ioi_pairs, spec, progress=False)
    n_tokens = len(result.pairs[0].positions)
    eff = result.stack("normalized_effect", "denoising")
    assert eff.shape == (len(ioi_pairs), gemma3.n_layers, n_tokens, 1)
    heatmap = position_heatmap(result, "normalized_effect", "denoising")
    assert heatmap.spec.z.shape == (gemma3.n_layers, n_tokens)
    mean = heatmap.spec.z
    assert_rounding_close(mean, eff.mean(0)[..., 0], depth=1, msg="mean over pairs")
    s2, end = result.pairs[0].roles.index("S2"), n_tokens - 1
    assert mean[-1, end] > 0.8  # last layer, last position: most of the logit diff (1.01)
    # layer 0: only S2 differs, so patching it gives the clean run, any other the corrupt
    # one; each pair's effect up to the rounding of its own logit differences
    top, vocab = logit_scale(gemma3, ioi_pairs), gemma3.vocab_size
    scale = max(metric_scale("normalized_effect", top, vocab, p) for p in result.pairs)
    assert_rounding_close(mean[0, s2], 1.0, depth=depth_of(gemma3), scale=scale, msg="S2")
    assert_rounding_close(mean[0, end], 0.0, depth=depth_of(gemma3), scale=scale, msg="end")
