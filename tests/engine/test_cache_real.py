"""run_with_cache on real weights: stories260K (fast), smollm2-135m and gemma3-270m (slow).

The same identities as ``test_cache.py``, where real weights make them harder: smollm2's
residual stream has entries near 2·10⁴, so sums are compared within rounding at that
magnitude (``tests/tolerance.py``: a sum of ``n`` pieces at depth ``n``); gemma3's
post-norms sit between every sublayer and the residual stream.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mechscope.models import load_model
from tolerance import assert_rounding_close, depth_of, scale_of

IOI = [
    "When Mary and John went to the store, John gave a drink to",
    "When Tom and Anna went to the park, Anna gave a ball to",
]


def _check_identities(lm, prompts: list[str], right, wrong) -> None:
    cache = lm.run_with_cache(prompts)
    parts, want = cache.decompose_resid(), cache["resid_post", -1]
    scale = scale_of(parts.values, want)
    assert_rounding_close(parts.total(), want, depth=len(parts), scale=scale, msg="resid")
    heads, want = cache.stack_head_results(lm.n_layers - 1), cache["attn_out", -1]
    scale = scale_of(heads.values, want, *([] if heads.rest is None else [heads.rest]))
    assert_rounding_close(heads.total(), want, depth=len(heads) + 1, scale=scale, msg="heads")
    dla = cache.logit_attribution(right, wrong)
    # the model's own logit difference: the logits' scale (the pieces', if larger), the pass
    scale = scale_of(dla.embed, dla.attn, dla.mlp, dla.constant, cache.logits[:, -1])
    assert_rounding_close(dla.total(), dla.logit_diff, depth=depth_of(lm), scale=scale, msg="DLA")
    scale = scale_of(dla.heads, dla.head_rest, dla.attn)
    got = dla.heads.sum(-1) + dla.head_rest
    assert_rounding_close(got, dla.attn, depth=lm.n_heads + 1, scale=scale, msg="DLA heads")
    scale = scale_of(dla.neurons, dla.neuron_rest, dla.mlp)
    got, depth = dla.neurons.sum(-1) + dla.neuron_rest, dla.neurons.shape[-1] + 1
    assert_rounding_close(got, dla.mlp, depth=depth, scale=scale, msg="DLA neurons")
    for row, prompt in enumerate(prompts):  # padded rows equal the rows alone
        alone = lm.run_with_cache(prompt, ["resid_post"])
        n = alone.tokens.ids.shape[1]
        got, want = cache["resid_post", -1][row, -n:], alone["resid_post", -1][0]
        depth = depth_of(lm, lm.n_layers - 1)
        assert_rounding_close(got, want, depth=depth, msg=f"padded row {row}")


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
