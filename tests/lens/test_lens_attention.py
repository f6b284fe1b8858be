"""Segment attention mass (reduced in the forward) against the full pattern, summed by hand,
up to the rounding of the probabilities (their scores' scale: tests/tolerance.py)."""

from __future__ import annotations

import numpy as np
import torch
from lens_helpers import sample_record

from mechscope.engine import Read, Site
from mechscope.lens.paired import PairedOptions, analyse_sample
from mechscope.lens.prepare import prepare_sample
from mechscope.lens.samples import parse_sample
from tolerance import assert_rounding_close, depth_of, score_scale


def _prepared(tiny):
    return prepare_sample(
        parse_sample(sample_record(), "t"), tiny.tokenizer, ("a", "b"), max_context=tiny.max_context
    )


def test_masses_sum_to_one_and_match_plain_sums(tiny, engine):
    prep = _prepared(tiny)
    diff = analyse_sample(engine, prep, PairedOptions())
    for name in ("a", "b"):
        cond = prep.conditions[name]
        mass = diff.attention[name]  # [L, H, T, S]
        assert mass.shape == (tiny.n_layers, tiny.n_heads, prep.n_tokens, 3)
        # a row's probabilities summed: T terms adding up to 1, each rounded (and all
        # sharing the normaliser's rounding, itself a sum of T terms): √T stages
        keys = len(cond.ids)
        assert_rounding_close(mass.sum(-1), 1.0, depth=keys, scale=1.0, msg="sum of masses")
        sites = [Site("pattern", layer) for layer in range(tiny.n_layers)]
        scores = [Site("attn_scores", layer) for layer in range(tiny.n_layers)]
        reads = [Read(s) for s in sites + scores]
        out = engine.run(torch.tensor([cond.ids]), reads, logits=False)
        names = diff.segments[name]
        (seg_name,) = cond.segments
        assert names == [seg_name, "continuation", "rest"]
        for layer, site in enumerate(sites):
            pattern = out.reads[site][0].numpy()  # [H, q, k]
            want = np.zeros(mass.shape[1:])  # [H, T, 3]
            for t in range(prep.n_tokens):
                q = cond.cont_start + t - 1
                seg_keys = list(cond.segments[seg_name])
                cont_keys = list(range(cond.cont_start, q + 1))
                rest = [k for k in range(q + 1) if k not in seg_keys and k not in cont_keys]
                for h in range(tiny.n_heads):
                    row = pattern[h, q]
                    want[h, t] = [row[seg_keys].sum(), row[cont_keys].sum(), row[rest].sum()]
            scale = score_scale(out.reads[scores[layer]])
            depth = depth_of(tiny, layer)
            got = mass[layer]
            assert_rounding_close(got, want, depth=depth, scale=scale, msg=f"{name} {layer}")


def test_first_token_has_no_continuation_mass(tiny, engine):
    """Token 0 is predicted from the last prefix token: no continuation key is visible yet."""
    prep = _prepared(tiny)
    diff = analyse_sample(engine, prep, PairedOptions())
    for name in ("a", "b"):
        k = diff.segments[name].index("continuation")
        assert bool((diff.attention[name][:, :, 0, k] == 0.0).all())
        assert bool((diff.attention[name][:, :, 1:, k] > 0.0).all())


def test_segment_tokens_cover_the_named_text(tiny):
    prep = _prepared(tiny)
    cond = prep.conditions["a"]
    enc = tiny.tokenizer(cond.text, add_special_tokens=False, return_offsets_mapping=True)
    covered = "".join(
        cond.text[a:b] for a, b in (enc["offset_mapping"][i] for i in cond.segments["tests"])
    )
    assert "assert add(1, 2) == 3" in covered
    assert "Write add." not in covered
