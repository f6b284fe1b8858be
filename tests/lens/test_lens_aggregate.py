"""Aggregation: curves and CIs against scipy.stats.bootstrap, binning mass, correlations."""

from __future__ import annotations

import numpy as np
from scipy import stats

from mechscope.lens.aggregate import (
    AggregateOptions,
    aligned_heatmaps,
    attention_correlations,
    attention_curves,
    metric_curves,
)
from mechscope.lens.result import METRICS, SampleDiff
from mechscope.stats import progress_bin_counts
from tolerance import (
    assert_beyond_rounding,
    assert_fp64_close,
    assert_rounding_close,
    mean_scale,
    scale_of,
)

L = 4


def _sample(i: int, n_tokens: int, group: str | None, rng) -> SampleDiff:
    text = " ".join(f"w{k}" for k in range(n_tokens))
    offsets, at = [], 0
    for k in range(n_tokens):
        width = len(f"w{k}") + (1 if k else 0)
        offsets.append((at, at + width))
        at += width
    semantic = rng.random(n_tokens) > 0.3
    semantic[0] = True
    metrics = rng.normal(size=(len(METRICS), L, n_tokens)).astype(np.float32)
    att = rng.random((L, 2, n_tokens, 3)).astype(np.float32)
    att /= att.sum(-1, keepdims=True)
    return SampleDiff(
        sample_id=f"s{i}",
        group=group,
        contrast=("a", "b"),
        continuation=text,
        tokens=[text[a:b] for a, b in offsets],
        offsets=np.asarray(offsets),
        semantic=semantic,
        classes=["identifier"] * n_tokens,
        metrics=metrics,
        attention={"a": att},
        segments={"a": ["tool", "continuation", "rest"]},
    )


def _samples(groups):
    rng = np.random.default_rng(0)
    return [_sample(i, int(rng.integers(5, 30)), g, rng) for i, g in enumerate(groups)]


def _plain_means(samples, metric):
    out = np.zeros((len(samples), L))
    for i, s in enumerate(samples):
        for layer in range(L):
            vals = [
                float(s.metric(metric)[layer, t]) for t in range(len(s.tokens)) if s.semantic[t]
            ]
            out[i, layer] = sum(vals) / len(vals)
    return out


def _means_rounding(samples, metric) -> dict[str, float]:
    """A sample's layer means are fp32 means of its semantic tokens' fp32 metrics (the
    bootstrap above them is float64): depth the most tokens, scale their mean magnitude."""
    vals = [s.metric(metric)[:, s.semantic] for s in samples]  # [L, K] each
    return {
        "depth": max(v.shape[1] for v in vals),
        "scale": max(mean_scale(v, axis=1) for v in vals),
    }


def test_curve_ci_matches_scipy_bootstrap_for_the_same_resamples():
    samples = _samples([None] * 9)
    opts = AggregateOptions(n_resamples=400, seed=7)
    table = metric_curves(samples, opts)
    part = table[(table.metric == "dnll") & (table.group == "all")].sort_values("layer")
    x = _plain_means(samples, "dnll")
    tol = _means_rounding(samples, "dnll")
    assert_rounding_close(part["mean"].to_numpy(), x.mean(0), **tol, msg="mean")
    ref = stats.bootstrap(
        (x,),
        np.mean,
        n_resamples=400,
        axis=0,
        vectorized=True,
        method="percentile",
        rng=np.random.default_rng(7),
    )
    assert_rounding_close(part["low"].to_numpy(), ref.confidence_interval.low, **tol, msg="low")
    assert_rounding_close(part["high"].to_numpy(), ref.confidence_interval.high, **tol, msg="high")


def test_group_difference_resamples_both_groups_together():
    groups = ["G10"] * 5 + ["G01"] * 6
    samples = _samples(groups)
    opts = AggregateOptions(n_resamples=300, seed=1, group_diff=("G10", "G01"))
    table = metric_curves(samples, opts)
    diff = table[(table.metric == "js") & (table.kind == "difference")].sort_values("layer")
    assert diff["group"].unique().tolist() == ["G10 - G01"]
    x = _plain_means(samples, "js")
    xa, xb = x[:5], x[5:]

    def stat(a, b, axis=-1):
        return a.mean(axis=axis) - b.mean(axis=axis)

    ref = stats.bootstrap(
        (xa, xb),
        stat,
        n_resamples=300,
        axis=0,
        vectorized=True,
        paired=False,
        method="percentile",
        rng=np.random.default_rng(1),
    )
    tol = _means_rounding(samples, "js")
    tol["scale"] *= 2  # a difference of two means: both sides' rounding
    assert_rounding_close(diff["mean"].to_numpy(), xa.mean(0) - xb.mean(0), **tol, msg="mean")
    assert_rounding_close(diff["low"].to_numpy(), ref.confidence_interval.low, **tol, msg="low")
    assert_rounding_close(diff["high"].to_numpy(), ref.confidence_interval.high, **tol, msg="high")
    per_group = table[(table.metric == "js") & (table.kind == "curve")]
    assert set(per_group.group) == {"all", "G10", "G01"}


def test_stratified_overall_curve_matches_scipy_bootstrap_within_groups():
    """With groups, the 'all' band resamples each group within itself (sizes fixed): the
    same as scipy.stats.bootstrap over one data sample per group, for the same resamples."""
    groups = ["G10"] * 5 + ["G01"] * 7
    samples = _samples(groups)
    opts = AggregateOptions(n_resamples=300, seed=4)
    table = metric_curves(samples, opts)
    part = table[(table.metric == "kl_ab") & (table.group == "all")].sort_values("layer")
    x = _plain_means(samples, "kl_ab")
    g01, g10 = x[5:], x[:5]  # strata in sorted order, as drawn

    def pooled(a, b, axis=-1):
        return (a.sum(axis=axis) + b.sum(axis=axis)) / (a.shape[axis] + b.shape[axis])

    ref = stats.bootstrap(
        (g01, g10),
        pooled,
        n_resamples=300,
        axis=0,
        vectorized=True,
        paired=False,
        method="percentile",
        rng=np.random.default_rng(4),
    )
    tol = _means_rounding(samples, "kl_ab")
    low = part["low"].to_numpy()
    assert_rounding_close(part["mean"].to_numpy(), x.mean(0), **tol, msg="mean")
    assert_rounding_close(low, ref.confidence_interval.low, **tol, msg="low")
    assert_rounding_close(part["high"].to_numpy(), ref.confidence_interval.high, **tol, msg="high")
    plain = stats.bootstrap(
        (x,), np.mean, n_resamples=300, axis=0, method="percentile", rng=np.random.default_rng(4)
    )
    assert_beyond_rounding(low, plain.confidence_interval.low, **tol, msg="stratification shows")


def test_progress_bins_conserve_token_mass():
    (s,) = _samples([None])
    opts = AggregateOptions(n_bins=7)
    table = aligned_heatmaps([s], opts, metrics=("dnll",))
    prog = table[table.alignment == "progress"]
    k = int(s.semantic.sum())
    counts = progress_bin_counts(k, 7)
    for layer in range(L):
        means = prog[prog.layer == layer].sort_values("column")["mean"].to_numpy()
        vals = s.metric("dnll")[layer, s.semantic].double().numpy()  # binned in float64
        # Sums of k values in two orders, rounded at the partial sums' magnitude.
        scale = scale_of(vals, np.cumsum(vals))
        assert_fp64_close(np.nansum(means * counts), vals.sum(), terms=k, scale=scale)


def test_attention_curves_and_correlations_equal_plain_loops():
    samples = _samples([None] * 4)
    opts = AggregateOptions(n_resamples=200)
    table = attention_curves(samples, opts)
    tool = table[(table.segment == "tool") & (table.group == "all")].sort_values("layer")
    plain = np.array(
        [[s.attention["a"][layer, :, s.semantic, 0].mean() for layer in range(L)] for s in samples]
    )
    # fp32 means over 2 heads and up to 30 tokens of probabilities (scale 1).
    depth = 2 * max(int(s.semantic.sum()) for s in samples)
    assert_rounding_close(tool["mean"].to_numpy(), plain.mean(0), depth=depth, scale=1.0)
    sums = table[table.group == "all"].groupby("layer")["mean"].sum()
    # segments add up to 1 after averaging: the fp32 normalisation (3 terms) and the means
    assert_rounding_close(sums.to_numpy(), 1.0, depth=3 + depth, scale=1.0, msg="sums")
    corr = attention_correlations(samples)
    s = samples[0]
    row = corr[(corr["sample"] == "s0") & (corr.segment == "tool")].iloc[0]
    x = s.attention["a"].mean(1)[..., 0][:, s.semantic].ravel().double().numpy()
    y = s.metric("dnll")[:, s.semantic].ravel().double().numpy()  # scipy keeps float32 input
    assert row["r"] == stats.pearsonr(x, y).statistic  # the same call on the same numbers
