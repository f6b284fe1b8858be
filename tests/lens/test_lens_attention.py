"""Segment attention mass (reduced in the forward) against the full pattern, summed by hand."""

from __future__ import annotations

import numpy as np
import torch
from lens_helpers import sample_record

from mechscope.engine import Read, Site
from mechscope.lens.paired import PairedOptions, analyse_sample
from mechscope.lens.prepare import prepare_sample
from mechscope.lens.samples import parse_sample


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
        np.testing.assert_allclose(mass.sum(-1), 1.0, atol=1e-5)
        sites = [Site("pattern", layer) for layer in range(tiny.n_layers)]
        out = engine.run(torch.tensor([cond.ids]), [Read(s) for s in sites], logits=False)
        names = diff.segments[name]
        (seg_name,) = cond.segments
        assert names == [seg_name, "continuation", "rest"]
        for layer, site in enumerate(sites):
            pattern = out.reads[site][0].numpy()  # [H, q, k]
            for t in range(prep.n_tokens):
                q = cond.cont_start + t - 1
                seg_keys = list(cond.segments[seg_name])
                cont_keys = list(range(cond.cont_start, q + 1))
                rest = [k for k in range(q + 1) if k not in seg_keys and k not in cont_keys]
                for h in range(tiny.n_heads):
                    row = pattern[h, q]
                    want = [row[seg_keys].sum(), row[cont_keys].sum(), row[rest].sum()]
                    np.testing.assert_allclose(mass[layer, h, t], want, atol=1e-6)


def test_first_token_has_no_continuation_mass(tiny, engine):
    """Token 0 is predicted from the last prefix token: no continuation key is visible yet."""
    prep = _prepared(tiny)
    diff = analyse_sample(engine, prep, PairedOptions())
    for name in ("a", "b"):
        k = diff.segments[name].index("continuation")
        assert np.all(diff.attention[name][:, :, 0, k] == 0.0)
        assert np.all(diff.attention[name][:, :, 1:, k] > 0.0)


def test_segment_tokens_cover_the_named_text(tiny):
    prep = _prepared(tiny)
    cond = prep.conditions["a"]
    enc = tiny.tokenizer(cond.text, add_special_tokens=False, return_offsets_mapping=True)
    covered = "".join(
        cond.text[a:b] for a, b in (enc["offset_mapping"][i] for i in cond.segments["tests"])
    )
    assert "assert add(1, 2) == 3" in covered
    assert "Write add." not in covered
