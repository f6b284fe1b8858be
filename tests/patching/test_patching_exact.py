"""The batched exact sweep equals a plain loop with one patch per forward (raw hooks)."""

from __future__ import annotations

import numpy as np
import pytest
from patching_reference import ioi_like, patch_once, read_site, ref_metrics, run_hooked

from mechscope.patching import PatchSpec, patch_pairs
from mechscope.patching.prepare import prepare_pair, units

ATOL = 1e-4


def loop_reference(lm, pair, spec, direction):
    """Every cell of the grid with one raw-hook forward each; metrics in float64."""
    p = prepare_pair(pair, lm.tokenizer, direction, spec)
    _, _, base_pos, src_pos = units(p, spec)
    base_logits = run_hooked(lm.model, p.base_ids, [])[-1].numpy()
    heads = list(range(lm.n_heads)) if spec.site == "z" else [None]
    out = {}
    for layer in range(lm.n_layers):
        src = read_site(lm.model, p.source_ids, spec.site, layer)
        for u, (bp, sp) in enumerate(zip(base_pos, src_pos, strict=True)):
            for j, h in enumerate(heads):
                logits = patch_once(
                    lm.model, p.base_ids, spec.site, layer, bp, sp, src, head=h, d_head=lm.d_head
                ).numpy()
                out[(layer, u, j)] = ref_metrics(
                    logits, base_logits, p.correct_id, p.wrong_id, p.target_id
                )
    return out


# positions: the first token, tokens before / at / after the change, the readout
POSITIONS = (0, 9, 14, 15, -1)
CASES = [
    ("resid_pre", "position"),
    ("resid_post", "position"),
    ("attn_out", "position"),
    ("mlp_out", "span"),
    ("z", "position"),
    ("resid_pre", "all"),
]


@pytest.mark.parametrize(("site", "granularity"), CASES)
@pytest.mark.parametrize("direction", ["denoising", "noising"])
def test_batched_equals_one_patch_per_forward(lm, same_pair, site, granularity, direction):
    spec = PatchSpec(
        site=site,
        granularity=granularity,
        directions=(direction,),
        positions=POSITIONS if granularity == "position" else None,
        budget_bytes=200_000,
    )  # small chunks: several forwards, mixed layers
    res = patch_pairs(lm, [same_pair], spec, progress=False).pairs[0]
    ref = loop_reference(lm, same_pair, spec, direction)
    assert len(ref) == np.prod(res.shape)
    for (i, u, j), metrics in ref.items():
        for name, value in metrics.items():
            got = res.metrics[name][i, u, j]
            assert got == pytest.approx(value, abs=ATOL), (name, i, u, j)


def test_span_alignment_with_different_lengths(lm, diff_pair):
    """Spans are patched by name when base and source differ in length."""
    spec = PatchSpec(site="resid_pre", granularity="span", directions=("denoising", "noising"))
    result = patch_pairs(lm, [diff_pair], spec, progress=False)
    for res in result.pairs:
        ref = loop_reference(lm, diff_pair, spec, res.direction)
        for (i, u, j), metrics in ref.items():
            for name, value in metrics.items():
                assert res.metrics[name][i, u, j] == pytest.approx(value, abs=ATOL)
    assert result.pairs[0].units == ["IO", "S1", "S2"]


def test_skipping_identical_variants_changes_nothing(lm, same_pair):
    base = dict(site="resid_pre", granularity="position", directions=("denoising",))
    fast = patch_pairs(lm, [same_pair], PatchSpec(**base), progress=False).pairs[0]
    slow = patch_pairs(
        lm, [same_pair], PatchSpec(**base, skip_identical=False), progress=False
    ).pairs[0]
    assert fast.baseline["skipped"] > 0 and slow.baseline["skipped"] == 0
    for name, arr in slow.metrics.items():
        np.testing.assert_allclose(fast.metrics[name], arr, atol=1e-5, err_msg=name)


def test_normalized_effect_from_clean_and_corrupt_runs(lm, same_pair):
    spec = PatchSpec(directions=("denoising", "noising"))
    for res in patch_pairs(lm, [same_pair], spec, progress=False).pairs:
        b = res.baseline
        expected = (res.metrics["logit_diff"] - b["corrupt_logit_diff"]) / (
            b["clean_logit_diff"] - b["corrupt_logit_diff"]
        )
        np.testing.assert_allclose(res.metrics["normalized_effect"], expected, atol=1e-4)
        # the base run's own logit difference is the corrupt one when denoising
        own = "corrupt_logit_diff" if res.direction == "denoising" else "clean_logit_diff"
        assert b["base_logit_diff"] == pytest.approx(b[own], abs=1e-6)


@pytest.mark.parametrize(("site", "granularity"), [("resid_pre", "position"), ("z", "span")])
def test_pairs_sharing_forwards_equal_one_patch_per_forward(lm, site, granularity):
    """Equal-length pairs are swept in shared forwards (rows gathered from several base
    prompts); a pair of another length in the same call takes its own forwards."""
    pairs = [
        ioi_like("a", "Mary", "John", "Mary", "store"),
        ioi_like("b", "John", "Mary", "John", "house"),
        ioi_like("c", "Mary", "John", "Mary", "store", corrupt_place="park"),
        ioi_like("d", "Mary", "John", "Mary", "house"),
    ]
    spec = PatchSpec(
        site=site,
        granularity=granularity,
        positions=POSITIONS if granularity == "position" else None,
        budget_bytes=400_000,
    )
    if granularity == "position":  # position grids need equal lengths
        pairs = [p for p in pairs if p.id != "c"]
    res = patch_pairs(lm, pairs, spec, progress=False)
    assert [r.pair_id for r in res.pairs] == [p.id for p in pairs]
    for pair, got in zip(pairs, res.pairs, strict=True):
        ref = loop_reference(lm, pair, spec, "denoising")
        for (i, u, j), metrics in ref.items():
            for name, value in metrics.items():
                assert got.metrics[name][i, u, j] == pytest.approx(value, abs=ATOL), (
                    pair.id, name, i, u, j,
                )  # fmt: skip
