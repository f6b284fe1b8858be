"""Causal effects against a plain hook loop; consistency of a model with itself is 1.

Effects (a clean logit difference minus a patched one) are compared up to the rounding of
the logits they come from (four logits: ``4·S``, tests/tolerance.py); correlations against
scipy's and of equal vectors are float64 sums of the vectors' length, and of effects equal
up to fp32 rounding ``t`` they are 1 up to ``(t / spread)²`` (:func:`correlation_bound`).
"""

from __future__ import annotations

import numpy as np
import torch
from scipy.stats import pearsonr

from mechscope.distill.consistency import causal_consistency, causal_effects
from mechscope.distill.passes import clean_logit_diffs
from mechscope.distill.trial import evaluate_student
from mechscope.engine import Engine
from tolerance import (
    assert_fp64_close,
    assert_rounding_close,
    assert_within,
    correlation_bound,
    depth_of,
    rounding_tolerance,
)


def logit_scale(lm, pairs) -> float:
    """The largest |logit| of the pairs' clean and corrupt prompts."""
    with torch.no_grad():
        runs = [lm.model(torch.tensor([p.clean_ids])).logits for p in pairs]
        runs += [lm.model(torch.tensor([p.corrupt_ids])).logits for p in pairs]
    return max(float(r.abs().max()) for r in runs)


def test_causal_effects_match_hook_loop(teacher, ioi_task, reference_effect):
    data = ioi_task.test.subset(range(3))
    sites = [(1, data.names.index("end")), (0, data.names.index("S2"))]
    delta, ld = causal_effects(Engine.of(teacher), data, sites, batch_size=2)
    top, depth = logit_scale(teacher, data.pairs), depth_of(teacher)
    for k, (layer, p) in enumerate(sites):
        ref = [
            reference_effect(teacher, pair, layer, data.names[p], float(ld[i]))
            for i, pair in enumerate(data.pairs)
        ]
        assert_rounding_close(delta[k], ref, depth=depth, scale=4 * top, msg=f"site {k}")
    clean = clean_logit_diffs(Engine.of(teacher), data)
    assert_rounding_close(ld, clean, depth=depth, scale=2 * top, msg="clean logit differences")


def test_teacher_cache_effects_equal_recomputed(teacher, ioi_task):
    delta, _ = causal_effects(Engine.of(teacher), ioi_task.test, ioi_task.sites(), batch_size=5)
    scale = 4 * logit_scale(teacher, ioi_task.test.pairs)
    want = ioi_task.test_delta
    assert_rounding_close(delta, want, depth=depth_of(teacher), scale=scale, msg="effects")


def test_consistency_matches_scipy_and_self_is_one():
    g = np.random.default_rng(0)
    t, s = g.normal(size=(3, 20)), g.normal(size=(3, 20))
    per, pooled = causal_consistency(t, s)
    # a correlation is a ratio of sums normalised by the vectors' norms: its rounding is
    # float64's at scale 1, over the vectors' length
    want = [pearsonr(t[k], s[k]).statistic for k in range(3)]
    assert_fp64_close(per, want, terms=20, scale=1.0, msg="per checkpoint")
    want = pearsonr(t.ravel(), s.ravel()).statistic
    assert_fp64_close(pooled, want, terms=60, scale=1.0, msg="pooled")
    per, pooled = causal_consistency(t, t)
    assert_fp64_close(per, 1.0, terms=20, scale=1.0, msg="itself, per checkpoint")
    assert_fp64_close(pooled, 1.0, terms=60, scale=1.0, msg="itself, pooled")


def test_model_with_itself_is_fully_consistent(teacher, ioi_task):
    """The student's effects are recomputed (batches of 4, not the teacher cache's): equal to
    the teacher's up to the rounding of the logits they come from, so each correlation is 1
    up to :func:`correlation_bound` of that rounding."""
    identity = {c.layer: c.layer for c in ioi_task.checkpoints}
    metrics, per_ckpt, _, _ = evaluate_student(teacher, ioi_task, identity, batch_size=4)
    delta = np.asarray(ioi_task.test_delta, dtype=np.float64)  # [K, N]
    t = rounding_tolerance(4 * logit_scale(teacher, ioi_task.test.pairs), depth_of(teacher))
    assert_within(metrics["consistency"], 1.0, correlation_bound(delta, t), msg="pooled")
    per = [correlation_bound(d, t) for d in delta]
    assert_within(per_ckpt["consistency"].to_numpy(), np.ones(len(per)), per, msg="per ckpt")
    assert metrics["accuracy"] == 1.0  # the test set keeps only pairs the teacher gets right
