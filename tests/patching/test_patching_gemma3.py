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

from mechscope.data.ioi import generate_ioi
from mechscope.data.ioi_pools import TEMPLATES
from mechscope.patching import PatchSpec, patch_pairs, prepare_pair
from mechscope.patching.figures import position_heatmap

pytestmark = pytest.mark.slow
ATOL = 1e-4  # measured: 1.4e-5 (layer-0 full patch, batched rows), 0.0 (self-patches)


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
    np.testing.assert_allclose(res.logits[0, 0, 0], _readout_logits(gemma3, clean), atol=ATOL)
    assert res.metrics["normalized_effect"][0, 0, 0] == pytest.approx(1.0, abs=1e-3)


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
            np.testing.assert_allclose(res.logits[li, u, 0], base, atol=ATOL)
    assert abs(res.metrics["normalized_effect"][0, s2, 0] - 1.0) < 1e-3  # not vacuous


def test_gemma3_ioi_heatmap_moves_to_the_end(gemma3, ioi_pairs) -> None:
    spec = PatchSpec(site="resid_pre", granularity="position")
    result = patch_pairs(gemma3, ioi_pairs, spec, progress=False)
    n_tokens = len(result.pairs[0].positions)
    eff = result.stack("normalized_effect", "denoising")
    assert eff.shape == (len(ioi_pairs), gemma3.n_layers, n_tokens, 1)
    heatmap = position_heatmap(result, "normalized_effect", "denoising")
    assert heatmap.spec.z.shape == (gemma3.n_layers, n_tokens)
    mean = heatmap.spec.z
    np.testing.assert_allclose(mean, eff.mean(0)[..., 0])
    s2, end = result.pairs[0].roles.index("S2"), n_tokens - 1
    assert mean[-1, end] > 0.8  # last layer, last position: most of the logit diff (1.01)
    assert mean[0, s2] == pytest.approx(1.0, abs=1e-3)  # layer 0: only S2 differs
    assert mean[0, end] == pytest.approx(0.0, abs=1e-3)
