"""run_with_cache on real weights: stories260K (fast), smollm2-135m and gemma3-270m (slow).

The same identities as ``test_cache.py``, where real weights make them harder: smollm2's
residual stream has entries near 2·10⁴, so sums are compared at ``1e-6`` of that magnitude
per piece; gemma3's post-norms sit between every sublayer and the residual stream.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from mechscope.models import load_model

IOI = [
    "When Mary and John went to the store, John gave a drink to",
    "When Tom and Anna went to the park, Anna gave a ball to",
]
ATOL_PER_TERM = 1e-6


def _check_identities(lm, prompts: list[str], right, wrong) -> None:
    cache = lm.run_with_cache(prompts)
    parts = cache.decompose_resid()
    scale = float(parts.values.abs().max())
    atol = ATOL_PER_TERM * len(parts) * scale
    torch.testing.assert_close(parts.total(), cache["resid_post", -1].float(), atol=atol, rtol=0)
    heads = cache.stack_head_results(lm.n_layers - 1)
    atol = ATOL_PER_TERM * lm.n_heads * float(heads.values.abs().max())
    torch.testing.assert_close(heads.total(), cache["attn_out", -1].float(), atol=atol, rtol=0)
    dla = cache.logit_attribution(right, wrong)
    torch.testing.assert_close(dla.total(), dla.logit_diff, atol=1e-3, rtol=1e-4)
    torch.testing.assert_close(dla.heads.sum(-1) + dla.head_rest, dla.attn, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(dla.neurons.sum(-1) + dla.neuron_rest, dla.mlp, atol=1e-4, rtol=1e-4)
    for row, prompt in enumerate(prompts):  # padded rows equal the rows alone
        alone = lm.run_with_cache(prompt, ["resid_post"])
        n = alone.tokens.ids.shape[1]
        got, want = cache["resid_post", -1][row, -n:], alone["resid_post", -1][0]
        torch.testing.assert_close(got, want, atol=1e-5 * float(want.abs().max()), rtol=0)


def test_stories260k(stories_path: Path) -> None:
    lm = load_model(str(stories_path))
    prompts = ["Once upon a time, there was a little girl", "Lily went to the park"]
    _check_identities(lm, prompts, 100, 200)


@pytest.mark.slow
def test_smollm2_ioi(smollm2) -> None:
    _check_identities(smollm2, IOI, [" Mary", " Tom"], [" John", " Anna"])


@pytest.mark.slow
def test_gemma3_post_norms(gemma3) -> None:
    """Gemma 3: each head passes through post_attention_layernorm at its frozen scale."""
    _check_identities(gemma3, IOI, [" Mary", " Tom"], [" John", " Anna"])
