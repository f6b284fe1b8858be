"""The read pass: a prompt sharing most of its tokens with one read before it is read on
top of that one's cache, and holds what a read of it alone holds.

Reference: ``read_caches`` of each prompt alone (one prompt per call: nothing shared, every
position computed), up to rounding at the model's depth.
"""

from __future__ import annotations

import pytest
import torch
from patching_reference import ioi_like

from mechscope.engine import Engine
from mechscope.patching.cache import SHARED_FRACTION, read_caches, shared_prefixes
from tolerance import assert_rounding_close, depth_of


def test_shared_prefixes_follow_the_longest_shared_root():
    prompts = [
        (1, 2, 3, 4, 5, 6),  # root
        (1, 2, 3, 4, 9, 9),  # shares 4 of 6 with 0
        (7, 2, 3, 4, 5, 6),  # shares nothing: a root
        (7, 2, 3, 8, 8, 8),  # shares 3 of 6 (half) with 2
        (1, 2, 9, 9, 9, 9),  # shares 2 of 6: below half, a root
        (1, 2, 3, 4, 5, 6),  # the same tokens as 0: follows it, its last token still read
    ]
    roots, followers = shared_prefixes(prompts, range(len(prompts)))
    assert SHARED_FRACTION == 0.5
    assert roots == [0, 2, 4]
    assert followers == [(1, 0, 4), (3, 2, 3), (5, 0, 5)]


@pytest.mark.parametrize("site", ["resid_pre", "z"])
def test_a_prompt_read_on_a_shared_prefix_holds_its_own_read(lm, site, monkeypatch):
    pairs = [
        ioi_like("a", "Mary", "John", "Mary", "store"),
        ioi_like("b", "John", "Mary", "John", "house"),
    ]
    tok = lm.tokenizer
    prompts = [tuple(tok(text).input_ids) for p in pairs for text in (p.clean, p.corrupt)]
    layers = [0, 1, lm.n_layers - 1]
    eng = Engine.of(lm)
    resumed: list[int] = []
    run = Engine.run

    def spy(self, *args, **kwargs):
        if kwargs.get("resume") is not None:
            resumed.append(kwargs["resume"].start)
        return run(self, *args, **kwargs)

    monkeypatch.setattr(Engine, "run", spy)
    shared = read_caches(eng, prompts, site, layers)
    assert resumed and all(s >= len(prompts[0]) // 2 for s in resumed)  # not vacuous
    resumed.clear()
    alone = [read_caches(eng, [ids], site, layers)[0] for ids in prompts]
    assert not resumed
    depth = depth_of(lm)
    for got, ref in zip(shared, alone, strict=True):
        assert got.ids == ref.ids
        for layer in layers:
            assert got.acts[layer].shape == ref.acts[layer].shape
            assert_rounding_close(got.acts[layer], ref.acts[layer], depth=depth, msg=f"{layer}")
        assert_rounding_close(got.logits, ref.logits, depth=depth, msg="logits")
        for (k, v), (rk, rv) in zip(got.kv.layers, ref.kv.layers, strict=True):
            assert k.shape == rk.shape
            assert_rounding_close(torch.cat([k, v]), torch.cat([rk, rv]), depth=depth, msg="kv")
