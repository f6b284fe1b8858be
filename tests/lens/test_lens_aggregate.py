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
            vals = [s.metric(metric)[layer, t] for t in range(len(s.tokens)) if s.semantic[t]]
            out[i, layer] = sum(vals) / len(vals)
    return out


def test_curve_ci_matches_scipy_bootstrap_for_the_same_resamples():
    samples = _samples([None] * 9)
    opts = AggregateOptions(n_resamples=400, seed=7)
    table = metric_curves(samples, opts)
    part = table[(table.metric == "dnll") & (table.group == "all")].sort_values("layer")
    x = _plain_means(samples, "dnll")
    np.testing.assert_allclose(part["mean"], x.mean(0), atol=1e-6)
    ref = stats.bootstrap(
        (x,),
        np.mean,
        n_resamples=400,
        axis=0,
        vectorized=True,
        method="percentile",
        rng=np.random.default_rng(7),
    )
    np.testing.assert_allclose(part["low"], ref.confidence_interval.low, atol=1e-6)
    np.testing.assert_allclose(part["high"], ref.confidence_interval.high, atol=1e-6)


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
    np.testing.assert_allclose(diff["mean"], xa.mean(0) - xb.mean(0), atol=1e-6)
    np.testing.assert_allclose(diff["low"], ref.confidence_interval.low, atol=1e-6)
    np.testing.assert_allclose(diff["high"], ref.confidence_interval.high, atol=1e-6)
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
    np.testing.assert_allclose(part["mean"], x.mean(0), atol=1e-6)
    np.testing.assert_allclose(part["low"], ref.confidence_interval.low, atol=1e-6)
    np.testing.assert_allclose(part["high"], ref.confidence_interval.high, atol=1e-6)
    plain = stats.bootstrap(
        (x,), np.mean, n_resamples=300, axis=0, method="percentile", rng=np.random.default_rng(4)
    )
    assert not np.allclose(part["low"], plain.confidence_interval.low)  # stratification shows


def test_progress_bins_conserve_token_mass():
    (s,) = _samples([None])
    opts = AggregateOptions(n_bins=7)
    table = aligned_heatmaps([s], opts, metrics=("dnll",))
    prog = table[table.alignment == "progress"]
    k = int(s.semantic.sum())
    counts = progress_bin_counts(k, 7)
    for layer in range(L):
        means = prog[prog.layer == layer].sort_values("column")["mean"].to_numpy()
        want = s.metric("dnll")[layer, s.semantic].astype(np.float64).sum()
        np.testing.assert_allclose(np.nansum(means * counts), want, atol=1e-9)


def test_attention_curves_and_correlations_equal_plain_loops():
    samples = _samples([None] * 4)
    opts = AggregateOptions(n_resamples=200)
    table = attention_curves(samples, opts)
    tool = table[(table.segment == "tool") & (table.group == "all")].sort_values("layer")
    plain = np.array(
        [[s.attention["a"][layer, :, s.semantic, 0].mean() for layer in range(L)] for s in samples]
    )
    np.testing.assert_allclose(tool["mean"], plain.mean(0), atol=1e-6)
    sums = table[table.group == "all"].groupby("layer")["mean"].sum()
    np.testing.assert_allclose(sums, 1.0, atol=1e-5)  # segments add up to 1 after averaging
    corr = attention_correlations(samples)
    s = samples[0]
    row = corr[(corr["sample"] == "s0") & (corr.segment == "tool")].iloc[0]
    x = s.attention["a"].mean(axis=1)[..., 0][:, s.semantic].ravel().astype(np.float64)
    y = s.metric("dnll")[:, s.semantic].ravel().astype(np.float64)  # scipy keeps float32 input
    np.testing.assert_allclose(row["r"], stats.pearsonr(x, y).statistic, atol=1e-9)
