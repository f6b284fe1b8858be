"""Patching sweeps on the new sites equal one plain engine patch per forward.

The sweep packs variants into rows (masks), shares layers below the lowest patched one
(``expand``) and reuses the base run's key/value cache (``resume``); the reference runs
each cell alone with a positional ``Patch`` and no sharing. Attribution patching, which
differentiates through the site's reads, must give a finite nonzero estimate. Logit
differences are compared up to rounding of the logits (their scale, the whole pass's
depth: tests/tolerance.py).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from engine_tiny import one_thread  # noqa: F401  (autouse fixture)

from mechscope.data.pairs import ContrastivePair
from mechscope.data.spans import render
from mechscope.engine import Engine, Patch, Read, Site
from mechscope.models import load_model
from mechscope.patching import PatchSpec, patch_pairs
from mechscope.patching.prepare import prepare_pair, units
from tolerance import assert_beyond_rounding, assert_rounding_close, depth_of

TEMPLATE = "When {IO} and {S1} went to the {PLACE}, {S2} gave a drink to"


def _pair() -> ContrastivePair:
    clean, cs = render(TEMPLATE, {"IO": "Mary", "S1": "John", "PLACE": "store", "S2": "John"})
    corrupt, ks = render(TEMPLATE, {"IO": "John", "S1": "Mary", "PLACE": "store", "S2": "Mary"})
    names = ("IO", "S1", "S2")
    return ContrastivePair(
        id="p",
        task="test",
        clean=clean,
        corrupt=corrupt,
        correct=" Mary",
        wrong=" John",
        spans={k: cs[k] for k in names},
        corrupt_spans={k: ks[k] for k in names},
    )


@pytest.fixture(scope="module")
def lm():
    return load_model("tiny:llama")


def _one_at_a_time(lm, p, spec, res) -> tuple[np.ndarray, float]:
    """``[layers, units, heads]`` logit differences, one unshared forward per cell, and the
    largest |logit| they were read from."""
    eng = Engine.of(lm)
    _, _, base_pos, src_pos = units(p, spec)
    base = torch.tensor([p.base_ids])
    out = np.zeros(res.metrics["logit_diff"].shape)
    scale = 0.0
    for i, layer in enumerate(res.layers):
        whole = Site(spec.site, layer)
        src = eng.run(torch.tensor([p.source_ids]), [Read(whole)], logits=False)[whole]
        for u, (bp, sp) in enumerate(zip(base_pos, src_pos, strict=True)):
            for j, head in enumerate(res.heads):
                h = None if head < 0 else head
                value = src[:, sp] if h is None else src[:, sp, h]
                site = Site(spec.site, layer, head=h, positions=tuple(bp))
                logits = eng.run(base, [Patch(site, value)], logits=1).logits[0, -1]
                out[i, u, j] = float(logits[p.correct_id] - logits[p.wrong_id])
                scale = max(scale, float(logits.abs().max()))
    return out, scale


@pytest.mark.parametrize("site", ["resid_mid", "mlp_post", "q", "k", "v"])
@pytest.mark.parametrize("direction", ["denoising", "noising"])
def test_sweep_equals_one_patch_per_forward(lm, site, direction):
    spec = PatchSpec(
        site=site,
        granularity="position",
        directions=(direction,),
        layers=(0, 2),
        budget_bytes=200_000,  # small chunks: several forwards, mixed layers and starts
        attribution=True,
    )
    res = patch_pairs(lm, [_pair()], spec, progress=False).pairs[0]
    p = prepare_pair(_pair(), lm.tokenizer, direction, spec)
    expected_heads = {"q": lm.n_heads, "k": lm.n_kv_heads, "v": lm.n_kv_heads}.get(site, 1)
    assert len(res.heads) == expected_heads
    ref, scale = _one_at_a_time(lm, p, spec, res)
    depth = depth_of(lm)
    assert_rounding_close(res.metrics["logit_diff"], ref, depth=depth, scale=scale, msg=site)
    # some cell changes the readout: the comparison is not vacuous
    base = res.baseline["base_logit_diff"]
    assert_beyond_rounding(ref, base, depth=depth, scale=scale, msg="patched vs base")
    # attribution patching differentiates through the site's reads
    assert res.attribution is not None and np.isfinite(res.attribution).all()
    assert np.abs(res.attribution).max() > 0
