"""Causal effects against a plain hook loop; consistency of a model with itself is 1.

Effects (a clean logit difference minus a patched one) are compared up to the rounding of
the logits they come from (four logits: ``4·S``, tests/tolerance.py); correlations of
equal vectors are 1 up to float64's rounding, and of effects equal up to fp32 rounding up
to ``(rounding / spread)²``, far below 1e-6.
"""

from __future__ import annotations

import numpy as np
import torch
from scipy.stats import pearsonr

from mechscope.distill.consistency import causal_consistency, causal_effects
from mechscope.distill.passes import clean_logit_diffs
from mechscope.distill.trial import evaluate_student
from mechscope.engine import Engine
from tolerance import assert_rounding_close, depth_of


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
    np.testing.assert_allclose(per, [pearsonr(t[k], s[k]).statistic for k in range(3)], atol=1e-12)
    np.testing.assert_allclose(pooled, pearsonr(t.ravel(), s.ravel()).statistic, atol=1e-12)
    per, pooled = causal_consistency(t, t)
    np.testing.assert_allclose(per, 1.0, atol=1e-12)
    assert abs(pooled - 1.0) < 1e-12


def test_model_with_itself_is_fully_consistent(teacher, ioi_task):
    identity = {c.layer: c.layer for c in ioi_task.checkpoints}
    metrics, per_ckpt, _ = evaluate_student(teacher, ioi_task, identity, batch_size=4)
    assert abs(metrics["consistency"] - 1.0) < 1e-6  # effects recomputed: see the top
    np.testing.assert_allclose(per_ckpt["consistency"].to_numpy(), 1.0, atol=1e-6)
    assert metrics["accuracy"] == 1.0  # the test set keeps only pairs the teacher gets right
