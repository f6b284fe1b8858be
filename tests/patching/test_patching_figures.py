"""Patching heatmaps a reader can read: noising drawn as the share of the clean effect removed
(0 = no change, as for denoising), dots where the interval over pairs excludes 0, checked
against a direct computation."""

from __future__ import annotations

import numpy as np
from scipy import stats

from mechscope.patching.figures import NOISING_LABEL, head_heatmap, position_heatmap
from mechscope.patching.report import strongest_cell
from mechscope.patching.result import PairResult, PatchingResult
from tolerance import assert_rounding_close, assert_sampling_close

RNG = np.random.default_rng(0)


def pair(i: int, direction: str, effect: np.ndarray, site="resid_pre", heads=(-1,)) -> PairResult:
    return PairResult(
        pair_id=f"p{i}",
        direction=direction,
        site=site,
        granularity="position" if site != "z" else "all",
        layers=[0, 1, 2],
        units=["0:A", "1:B"] if site != "z" else ["all"],
        positions=[0, 1] if site != "z" else [-1],
        heads=list(heads),
        metrics={"normalized_effect": effect.astype(np.float32)},
    )


def test_noising_is_drawn_as_the_share_removed():
    # noising: 1 = the clean run unchanged; here one cell loses most of the clean effect
    effects = [np.ones((3, 2, 1)) + RNG.normal(0, 0.01, (3, 2, 1)) for _ in range(6)]
    for e in effects:
        e[1, 1, 0] = 0.1 + RNG.normal(0, 0.02)
    res = PatchingResult(
        [pair(i, "noising", e) for i, e in enumerate(effects)], "resid_pre", "position"
    )
    fig = position_heatmap(res, "normalized_effect", "noising")
    expected = 1.0 - np.mean(np.stack(effects)[..., 0], axis=0)  # [layers, units]
    # the effects are stored in fp32 and averaged over 6 pairs; 1 − mean is rounded at the
    # effects' scale, not at the share's
    scale = 1.0 + float(np.abs(np.stack(effects)).max())
    assert_rounding_close(fig.spec.z, expected, depth=1 + 6, scale=scale, msg="share removed")
    assert fig.spec.colorbar_title == NOISING_LABEL
    # 0.9 and 0 up to the mean's sampling error over the 6 pairs (sd 0.02 and 0.01)
    assert_sampling_close(fig.spec.z[1, 1], 0.9, se=0.02 / np.sqrt(6), msg="the cell")
    assert_sampling_close(fig.spec.z[0], np.zeros(2), se=0.01 / np.sqrt(6), msg="layer 0")
    assert "0 = no change from the clean run" in fig.caption
    assert fig.spec.marks[1, 1]  # 0.9 with a tight interval over 6 pairs excludes 0
    assert "layer 1 at position 1 'B' removes **0.89 [" in strongest_cell(res, "noising")


def test_head_heatmap_marks_heads_whose_interval_excludes_zero():
    n, heads = 8, (0, 1, 2, 3)
    effects = []
    for _ in range(n):
        e = RNG.normal(0, 0.05, (3, 1, 4))
        e[2, 0, 1] += 0.6  # one helpful head, every pair
        effects.append(e)
    res = PatchingResult(
        [pair(i, "denoising", e, site="z", heads=heads) for i, e in enumerate(effects)], "z", "all"
    )
    fig = head_heatmap(res, "normalized_effect", "denoising")
    stacked = np.stack(effects)[:, :, 0, :]  # [pairs, layers, heads]
    # heads × layers: the fp32-stored effects averaged over the pairs
    want = stacked.mean(axis=0).T
    assert_rounding_close(fig.spec.z, want, depth=1 + n, scale=float(np.abs(stacked).max()))
    assert fig.spec.marks[1, 2] and fig.spec.marks.sum() <= 3
    # the interval is a percentile bootstrap over pairs; scipy's agrees on the marked cell
    ci = stats.bootstrap((stacked[:, 2, 1],), np.mean, n_resamples=2000, method="percentile", rng=0)
    assert ci.confidence_interval.low > 0
    assert "95% CI [" in fig.spec.hover_text[1][2] and "over 8 pairs" in fig.spec.hover_text[1][2]
    assert strongest_cell(res, "denoising").startswith("denoising, patching head L2H1 recovers")
