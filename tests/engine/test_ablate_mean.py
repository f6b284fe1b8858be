"""Mean and resample ablation from a reference batch, padding kept out of the mean.

Independent reference: each reference prompt run alone (no padding at all), its site
values at every real token gathered and averaged in float64 by plain torch. The ablated
value is read back in the same pass (a ``Read`` after the ``Ablate`` sees the edit).

Tolerance (fp32, ``tests/tolerance.py``): the batched reads equal the unpadded ones up to
the rounding of a pass to that layer (depth ``layer + 1``), and the mean adds the rounding
of a sum of ``T`` terms: depth ``layer + 1 + T`` at the scale of the values averaged.
"""

from __future__ import annotations

import pytest
import torch
from engine_tiny import one_thread  # noqa: F401  (autouse fixture)

from mechscope.engine import Ablate, Engine, Read, Site
from mechscope.engine.core.inputs import to_tokens
from mechscope.errors import InputError
from mechscope.models import load_model
from tolerance import assert_beyond_rounding, assert_rounding_close, depth_of, scale_of

REFS = ["The cat sat on the mat.", "A dog ran into the old house and barked at the", "Hi"]
TARGET = "When Mary and John went to the store, John gave a drink to"
LAYER = 1


@pytest.fixture(scope="module")
def setup():
    lm = load_model("tiny:llama")
    eng = Engine.of(lm)
    cache = eng.run_with_cache(REFS, ["mlp_out", "z"], logits=False)
    assert cache.tokens.attention_mask is not None  # the rows differ in length
    return lm, eng, cache


def _alone(eng: Engine, site: Site) -> torch.Tensor:
    """``[tokens, ...]`` float64: the site at every real token of each prompt run alone."""
    rows = [
        eng.run_with_cache(p, [site.name], logits=False)[site.name, site.layer][0] for p in REFS
    ]
    return torch.cat(rows).double()


def _ablated(eng: Engine, ablate: Ablate) -> torch.Tensor:
    site = Site(ablate.site.name, ablate.site.layer)
    ids = to_tokens(eng.lm, TARGET).ids  # [1, seq]
    return eng.run(ids, [ablate, Read(site)], logits=False)[site]


@pytest.mark.parametrize("name", ["mlp_out", "z"])
def test_mean_over_positions_of_a_padded_cache_is_the_mean_of_real_tokens(setup, name) -> None:
    lm, eng, cache = setup
    site = Site(name, LAYER)
    values = _alone(eng, site)  # [T, ...]
    want = values.mean(0)
    got = _ablated(eng, Ablate(site, "mean", cache, over_positions=True))  # [1, seq, ...]
    depth = depth_of(lm, LAYER) + values.shape[0]
    scale = scale_of(values)
    for pos in (0, -1):
        assert_rounding_close(got[0, pos], want, depth=depth, scale=scale, msg=f"{name} {pos}")
    # a raw tensor with its mask is the same path, to the bit
    raw = Ablate(site, "mean", cache[name, LAYER], True, reference_mask=cache.tokens.attention_mask)
    torch.testing.assert_close(_ablated(eng, raw), got, atol=0, rtol=0)
    # the padding was in the old mean: the check above can tell them apart
    naive = cache[name, LAYER].double().flatten(0, 1).mean(0)
    assert_beyond_rounding(naive, want, depth=depth, scale=scale, msg="padding in the mean")


def test_one_head_and_kept_positions(setup) -> None:
    lm, eng, cache = setup
    values = _alone(eng, Site("z", LAYER))[:, 2]  # [T, d_head]: head 2
    depth, scale = depth_of(lm, LAYER) + values.shape[0], scale_of(values)
    got = _ablated(eng, Ablate(Site("z", LAYER, head=2), "mean", cache, over_positions=True))
    assert_rounding_close(got[0, -1, 2], values.mean(0), depth=depth, scale=scale, msg="head 2")
    clean = eng.run(to_tokens(lm, TARGET).ids, [Read(Site("z", LAYER))], logits=False)[
        Site("z", LAYER)
    ]
    torch.testing.assert_close(got[:, :, 1], clean[:, :, 1], atol=0, rtol=0)  # other heads
    # a cache of the first and last positions: the short row's first position is padding
    kept = eng.run_with_cache(REFS, ["mlp_out"], positions=[0, -1], logits=False)
    firsts = [eng.run_with_cache(p, ["mlp_out"], logits=False)["mlp_out", LAYER][0] for p in REFS]
    ends = torch.stack([f[-1] for f in firsts]).double()  # [3, d]
    width = max(len(f) for f in firsts)
    starts = torch.stack([f[0] for f in firsts if len(f) == width])  # unpadded rows only
    want = torch.cat([ends, starts.double()]).mean(0)
    got = _ablated(eng, Ablate(Site("mlp_out", LAYER), "mean", kept, over_positions=True))
    assert_rounding_close(got[0, 3], want, depth=depth_of(lm, LAYER) + len(want), msg="kept")


def test_mean_over_rows_of_equal_length_prompts(setup) -> None:
    lm, eng, _ = setup
    ids = torch.randint(10, 300, (3, 9), generator=torch.Generator().manual_seed(0))
    site = Site("mlp_out", LAYER)
    rows = [
        eng.run_with_cache(ids[r], ["mlp_out"], logits=False)["mlp_out", LAYER] for r in range(3)
    ]
    want = torch.cat(rows).double().mean(0)  # [seq, d]
    cache = eng.run_with_cache(ids, ["mlp_out"], logits=False)
    got = eng.run(ids[:1], [Ablate(site, "mean", cache), Read(site)], logits=False)[site]
    assert_rounding_close(got[0], want, depth=depth_of(lm, LAYER) + 3, msg="per position")


def test_unalignable_references_are_refused_in_one_line(setup) -> None:
    _, _, cache = setup
    site = Site("mlp_out", LAYER)
    cases = [
        (dict(mode="mean", reference=cache), "over_positions=True or prompts of equal length"),
        (dict(mode="resample", reference=cache), "over_positions=True or prompts of equal"),
        (
            dict(mode="mean", reference=cache, reference_mask=cache.tokens.attention_mask),
            "brings its own padding mask",
        ),
        (
            dict(mode="mean", reference=cache["mlp_out", 1], reference_mask=torch.ones(3, 2)),
            "reference_mask \\[rows, seq\\]",
        ),
        (dict(mode="mean"), "needs a reference"),
        (dict(mode="mean", reference=cache, site=Site("attn_out", 0)), "attn_out layer 0"),
    ]
    for kwargs, match in cases:
        kwargs.setdefault("site", site)
        with pytest.raises(InputError, match=match) as info:
            Ablate(**kwargs)
        assert "\n" not in str(info.value)


def test_a_recorded_decode_step_takes_the_mask_along(setup) -> None:
    """``on_device`` (what a recorded decode step holds) keeps the reference and its mask."""
    from mechscope.engine.generation.decode_step import on_device

    _, _, cache = setup
    ablate = Ablate(Site("mlp_out", LAYER), "mean", cache, over_positions=True)
    moved = on_device(ablate, torch.device("cpu"))
    assert isinstance(moved, Ablate) and moved.over_positions and moved.mode == "mean"
    assert torch.equal(moved.reference_mask, cache.tokens.attention_mask.bool())
    assert torch.equal(moved.reference, cache["mlp_out", LAYER])
