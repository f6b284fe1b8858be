"""Patches whose outcome is known exactly: they must reproduce the source or the base run,
up to the rounding of a whole pass (tests/tolerance.py)."""

from __future__ import annotations

import numpy as np
from patching_reference import metric_scale, run_hooked

from mechscope.patching import PatchSpec, patch_pairs, prepare_pair
from tolerance import assert_rounding_close, depth_of


def _logits(lm, ids):
    return run_hooked(lm.model, ids, [])[-1].numpy()  # [vocab] fp64, readout position


def test_all_positions_of_resid_pre_at_layer_0_is_the_source_run(lm, same_pair):
    spec = PatchSpec(
        site="resid_pre", granularity="all", layers=(0,), directions=("denoising", "noising")
    )
    for res in patch_pairs(lm, [same_pair], spec, keep_logits=True, progress=False).pairs:
        p = prepare_pair(same_pair, lm.tokenizer, res.direction, spec)
        depth, scale = depth_of(lm), float(np.abs(res.logits).max())
        assert_rounding_close(res.logits[0, 0, 0], _logits(lm, p.source_ids), depth=depth)
        got, want = res.metrics["logit_diff"][0, 0, 0], res.baseline["source_logit_diff"]
        assert_rounding_close(
            got, want, depth=depth, scale=metric_scale("logit_diff", scale, lm.vocab_size)
        )


def test_last_resid_post_at_readout_gives_source_elsewhere_base(lm, same_pair):
    last = lm.n_layers - 1
    spec = PatchSpec(
        site="resid_post",
        granularity="position",
        layers=(last,),
        directions=("denoising", "noising"),
        skip_identical=False,
    )
    result = patch_pairs(lm, [same_pair], spec, keep_logits=True, progress=False)
    clean_ids = lm.tokenizer(same_pair.clean).input_ids
    corrupt_ids = lm.tokenizer(same_pair.corrupt).input_ids
    clean, corrupt = _logits(lm, clean_ids), _logits(lm, corrupt_ids)
    for res in result.pairs:
        source, base = (clean, corrupt) if res.direction == "denoising" else (corrupt, clean)
        readout = res.positions.index(len(clean_ids) - 1)
        depth, scale = depth_of(lm), float(np.abs(res.logits).max())
        assert_rounding_close(res.logits[0, readout, 0], source, depth=depth, msg="readout")
        for u in range(len(res.positions)):
            if u != readout:  # the last layer's other positions never reach the readout
                assert_rounding_close(res.logits[0, u, 0], base, depth=depth, msg=f"unit {u}")
        # denoising restores the clean answer fully; noising removes it fully
        effect = res.metrics["normalized_effect"][0, readout, 0]
        full = 1.0 if res.direction == "denoising" else 0.0
        ne_scale = metric_scale("normalized_effect", scale, lm.vocab_size, res)
        assert_rounding_close(effect, full, depth=depth, scale=ne_scale, msg="effect")
