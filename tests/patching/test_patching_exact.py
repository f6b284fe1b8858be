"""The batched exact sweep equals a plain loop with one patch per forward (raw hooks).

Metrics are compared up to the rounding of the logits they are read from (their largest
magnitude, the whole pass's depth; ``metric_scale`` says how each metric inherits it), so
batched rows and chunked layers may sum in another order on any CPU.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from patching_reference import (
    ioi_like,
    metric_scale,
    patch_once,
    read_site,
    ref_metrics,
    run_hooked,
)

from mechscope.engine import Engine, Patch, Read, Site
from mechscope.models import load_model
from mechscope.patching import METRICS, PatchSpec, patch_pairs
from mechscope.patching.prepare import prepare_pair, units
from tolerance import assert_rounding_close, depth_of


def loop_reference(lm, pair, spec, direction):
    """Every cell of the grid with one raw-hook forward each; metrics in float64, and the
    largest |logit| they were read from."""
    p = prepare_pair(pair, lm.tokenizer, direction, spec)
    _, _, base_pos, src_pos = units(p, spec)
    base_logits = run_hooked(lm.model, p.base_ids, [])[-1].numpy()
    heads = list(range(lm.n_heads)) if spec.site == "z" else [None]
    cand = None if p.candidate_ids is None else list(p.candidate_ids)
    out = {}
    scale = float(np.abs(base_logits).max())
    for layer in range(lm.n_layers):
        src = read_site(lm.model, p.source_ids, spec.site, layer)
        for u, (bp, sp) in enumerate(zip(base_pos, src_pos, strict=True)):
            for j, h in enumerate(heads):
                logits = patch_once(
                    lm.model, p.base_ids, spec.site, layer, bp, sp, src, head=h, d_head=lm.d_head
                ).numpy()
                out[(layer, u, j)] = ref_metrics(
                    logits, base_logits, p.correct_id, p.wrong_id, p.target_id, cand
                )
                scale = max(scale, float(np.abs(logits).max()))
    return out, scale


def assert_grid_matches(lm, got, ref, scale, where="") -> None:
    """Every metric of every cell of ``got`` equals the loop's, up to rounding."""
    for (i, u, j), metrics in ref.items():
        for name, value in metrics.items():
            if name not in got.metrics:  # a sweep asked for fewer metrics
                continue
            assert_rounding_close(
                got.metrics[name][i, u, j],
                value,
                depth=depth_of(lm),
                scale=metric_scale(name, scale, lm.vocab_size),
                msg=f"{where}{name} at {(i, u, j)}",
            )


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
    ref, scale = loop_reference(lm, same_pair, spec, direction)
    assert len(ref) == np.prod(res.shape)
    assert_grid_matches(lm, res, ref, scale)


def _readout_widths(monkeypatch) -> list[int | None]:
    """Records the logit columns each sweep forward reads out (None: the vocabulary); the
    read pass (no ``expand``) reads the whole vocabulary for the baselines."""
    widths: list[int | None] = []
    run = Engine.run

    def spy(self, *args, **kwargs):
        vocab = kwargs.get("vocab")
        if kwargs.get("expand") is not None:
            widths.append(None if vocab is None else len(vocab))
        return run(self, *args, **kwargs)

    monkeypatch.setattr(Engine, "run", spy)
    return widths


@pytest.mark.parametrize(("site", "granularity"), [("resid_pre", "position"), ("z", "span")])
def test_answer_token_metrics_read_out_those_tokens_only(lm, site, granularity, monkeypatch):
    """A sweep asking for answer-token metrics reads out the answers' columns only, and
    its numbers are the loop's (whole-vocabulary logits)."""
    pairs = [
        ioi_like("a", "Mary", "John", "Mary", "store"),
        ioi_like("b", "John", "Mary", "John", "house"),
    ]
    spec = PatchSpec(
        site=site,
        granularity=granularity,
        positions=POSITIONS if granularity == "position" else None,
        metrics=("delta_logit", "target_logit"),
    )
    widths = _readout_widths(monkeypatch)
    res = patch_pairs(lm, pairs, spec, progress=False)
    assert widths and all(w is not None and w <= 6 for w in widths)  # two answers a pair
    wanted = {"logit_diff", "delta_logit", "target_logit", "normalized_effect"}
    for pair, got in zip(pairs, res.pairs, strict=True):
        assert set(got.metrics) == wanted
        ref, scale = loop_reference(lm, pair, spec, "denoising")
        assert_grid_matches(lm, got, ref, scale, f"{pair.id} ")


def test_candidate_sweep_equals_one_patch_per_forward(lm, same_pair, monkeypatch):
    """K-way readout: every metric is over the candidates, so the sweep reads out their
    columns only; each equals the loop's over the whole vocabulary, restricted there."""
    spec = PatchSpec(
        site="resid_pre",
        positions=POSITIONS,
        directions=("denoising", "noising"),
        candidates=(" Mary", " John", " the"),
    )
    widths = _readout_widths(monkeypatch)
    res = patch_pairs(lm, [same_pair], spec, progress=False)
    assert widths and all(w == 3 for w in widths)
    for got in res.pairs:
        assert set(got.metrics) == set(METRICS)
        ref, scale = loop_reference(lm, same_pair, spec, got.direction)
        assert_grid_matches(lm, got, ref, scale, f"{got.direction} ")


def test_span_alignment_with_different_lengths(lm, diff_pair):
    """Spans are patched by name when base and source differ in length."""
    spec = PatchSpec(site="resid_pre", granularity="span", directions=("denoising", "noising"))
    result = patch_pairs(lm, [diff_pair], spec, progress=False)
    for res in result.pairs:
        ref, scale = loop_reference(lm, diff_pair, spec, res.direction)
        assert_grid_matches(lm, res, ref, scale, f"{res.direction} ")
    assert result.pairs[0].units == ["IO", "S1", "S2"]


def test_skipping_identical_variants_changes_nothing(lm, same_pair):
    base = dict(site="resid_pre", granularity="position", directions=("denoising",))
    fast = patch_pairs(lm, [same_pair], PatchSpec(**base), progress=False).pairs[0]
    slow = patch_pairs(
        lm, [same_pair], PatchSpec(**base, skip_identical=False), keep_logits=True, progress=False
    ).pairs[0]
    assert fast.baseline["skipped"] > 0 and slow.baseline["skipped"] == 0
    scale = float(np.abs(slow.logits).max())
    for name, arr in slow.metrics.items():
        metric = metric_scale(name, scale, lm.vocab_size, slow)
        assert_rounding_close(fast.metrics[name], arr, depth=depth_of(lm), scale=metric, msg=name)


def test_normalized_effect_from_clean_and_corrupt_runs(lm, same_pair):
    spec = PatchSpec(directions=("denoising", "noising"))
    for res in patch_pairs(lm, [same_pair], spec, progress=False).pairs:
        b = res.baseline
        expected = (res.metrics["logit_diff"] - b["corrupt_logit_diff"]) / (
            b["clean_logit_diff"] - b["corrupt_logit_diff"]
        )
        # the same numbers in float64, stored as float32: one rounding
        got = res.metrics["normalized_effect"]
        assert_rounding_close(got, expected, depth=1, msg="normalized_effect")
        # the base run's own logit difference is the corrupt one when denoising (one number)
        own = "corrupt_logit_diff" if res.direction == "denoising" else "clean_logit_diff"
        assert b["base_logit_diff"] == b[own]


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
        ref, scale = loop_reference(lm, pair, spec, "denoising")
        assert_grid_matches(lm, got, ref, scale, f"{pair.id} ")


def test_a_family_with_its_own_attention_sweeps_one_pair_at_a_time():
    """Falcon computes attention in its own code: the engine cannot give rows gathered
    from several pairs their own masks, nor fill the keys of a row's dead positions, so
    each pair takes its own forwards (resumed from one start a chunk) and still equals one
    patch per forward."""
    lm = load_model("tiny:falcon")
    assert not Engine.of(lm).attention_reached
    pairs = [
        ioi_like("a", "Mary", "John", "Mary", "store"),
        ioi_like("b", "John", "Mary", "John", "house"),
    ]
    spec = PatchSpec(site="resid_pre", granularity="position", positions=POSITIONS)
    res = patch_pairs(lm, pairs, spec, progress=False)
    eng = Engine.of(lm)
    for pair, got in zip(pairs, res.pairs, strict=True):  # reference: one plain pass a cell
        p = prepare_pair(pair, lm.tokenizer, "denoising", spec)
        _, _, base_pos, src_pos = units(p, spec)
        assert base_pos == src_pos  # equal lengths: the same positions on both sides
        for layer in range(lm.n_layers):
            site = Site("resid_pre", layer)
            src = eng.run(torch.tensor([p.source_ids]), [Read(site)], logits=False)[site]
            for u, bp in enumerate(base_pos):
                mask = torch.zeros(1, len(p.base_ids), dtype=torch.bool)
                mask[0, list(bp)] = True
                out = eng.run(torch.tensor([p.base_ids]), [Patch(site, src, mask=mask)], logits=1)
                logits = out.logits[0, -1].double()
                want = float(logits[p.correct_id] - logits[p.wrong_id])
                have = float(got.metrics["logit_diff"][layer, u, 0])
                scale = float(logits.abs().max())
                assert_rounding_close(
                    have, want, depth=depth_of(lm), scale=scale, msg=f"{layer} {u}"
                )
