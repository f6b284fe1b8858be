"""Diagnostics and post-processing against plain numpy loops."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mechscope.errors import InputError
from mechscope.heads.diagnostics import agreement, sample_diagnostics, similarity_matrix
from mechscope.heads.postprocess import aggregate, orient, postprocess
from tolerance import assert_fp64_close, assert_within, rounding_tolerance


def _data(n=6, shape=(3, 4), seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    common = rng.normal(size=shape)
    return common[None] + 0.5 * rng.normal(size=(n, *shape))  # [n, L, H]


def _metric(df, name: str) -> float:
    return float(df.loc[df["metric"] == name, "value"].iloc[0])


def test_sample_diagnostics_match_plain_loops() -> None:
    """Each diagnostic is a float64 sum over the samples or the heads: correlations and the
    cosine at scale 1 (ratios normalised by norms), variances at the squared scores'."""
    x = _data()
    flat = x.reshape(len(x), -1)  # [6, 12]
    mean = flat.mean(axis=0)
    df = sample_diagnostics(x, method="joint", thresholds=(0.2, 0.4))
    assert set(df["method"]) == {"joint"}

    def check(name: str, want: float, scale: float = 1.0) -> None:
        assert_fp64_close(_metric(df, name), want, terms=flat.size, scale=scale, msg=name)

    check("one_vs_all_pearson", np.corrcoef(flat[0], mean)[0, 1])
    check("one_vs_all_cosine", flat[0] @ mean / np.linalg.norm(flat[0]) / np.linalg.norm(mean))
    rest = [np.corrcoef(flat[i], np.delete(flat, i, 0).mean(0))[0, 1] for i in range(len(flat))]
    check("one_vs_rest_pearson_mean", np.mean(rest))
    pairs = [np.corrcoef(flat[i], flat[j])[0, 1] for i in range(6) for j in range(6) if i < j]
    check("pairwise_pearson_mean", np.mean(pairs))
    check("pairwise_pearson_min", np.min(pairs))
    check("pairwise_pearson_max", np.max(pairs))
    var = [np.var(flat[:, j], ddof=1) for j in range(flat.shape[1])]
    top = float(np.abs(flat).max())
    check("head_var_mean", np.mean(var), top**2)
    check("head_var_median", np.median(var), top**2)
    assert _metric(df, "n_heads_var_gt_0.2") == sum(v > 0.2 for v in var)
    assert _metric(df, "n_heads_var_gt_0.4") == sum(v > 0.4 for v in var)
    check("all_max", mean.max(), top)
    check("one_std", flat[0].std(), top)


def test_identical_samples_look_sample_independent() -> None:
    x = np.repeat(_data(n=1), 5, axis=0)
    df = sample_diagnostics(x, method="joint")
    got = _metric(df, "pairwise_pearson_min")
    assert_fp64_close(got, 1.0, terms=x[0].size, scale=1.0, msg="equal samples")
    # the mean of five equal scores may be off by their rounding, and the variance by its
    # square: nothing else
    off = rounding_tolerance(float(np.abs(x).max()), 5, torch.float64)
    assert_within(_metric(df, "head_var_max"), 0.0, 5 / 4 * off**2, msg="no variance")
    assert _metric(df, "n_heads_var_gt_0.001") == 0


def test_single_sample_has_no_spread_metrics() -> None:
    df = sample_diagnostics(_data(n=1), method="joint")
    assert "pairwise_pearson_mean" not in set(df["metric"])
    with pytest.raises(InputError, match="reference"):
        sample_diagnostics(_data(n=2), method="joint", reference=5)


def test_agreement_and_similarity_matrix() -> None:
    a, b = _data(seed=1), _data(seed=2)
    df = agreement(a, b, name_a="joint", name_b="per_layer", top_fraction=0.25)
    assert set(df["method"]) == {"joint vs per_layer"}
    fa, fb = a.reshape(6, -1), b.reshape(6, -1)
    ps = [np.corrcoef(u, v)[0, 1] for u, v in zip(fa, fb, strict=True)]
    # correlations: float64 sums over the 12 heads, normalised to scale 1
    got = _metric(df, "per_sample_pearson_mean")
    assert_fp64_close(got, np.mean(ps), terms=12, scale=1.0, msg="per sample")
    ma, mb = fa.mean(0), fb.mean(0)
    got = _metric(df, "mean_pearson")
    assert_fp64_close(got, np.corrcoef(ma, mb)[0, 1], terms=12, scale=1.0, msg="means")
    top_a, top_b = set(np.argsort(-ma)[:3]), set(np.argsort(-mb)[:3])
    assert _metric(df, "top3_overlap") == len(top_a & top_b) / 3  # the same count over 3
    got = _metric(agreement(a, a, name_a="x", name_b="y"), "per_sample_pearson_min")
    assert_fp64_close(got, 1.0, terms=12, scale=1.0, msg="itself")
    m = similarity_matrix(a)
    assert_fp64_close(m, np.corrcoef(fa), terms=12, scale=1.0, msg="similarity matrix")
    with pytest.raises(InputError, match="same shape"):
        agreement(a, b[:3], name_a="joint", name_b="per_layer")


def test_orientation_postprocessing_and_aggregation() -> None:
    x = np.array([[[1.0, -2.0]], [[-3.0, 4.0]]])  # [2 samples, 1 layer, 2 heads]
    np.testing.assert_array_equal(orient(x, higher_is_better=False), -x)
    np.testing.assert_array_equal(postprocess(x, "abs"), np.abs(x))
    np.testing.assert_array_equal(postprocess(x, "relu"), np.maximum(x, 0))
    # a loss: helpful heads have negative IG; abs is taken per sample, before the mean (means
    # of two small integers: exact in binary)
    np.testing.assert_array_equal(aggregate(x, mode="signed", higher_is_better=False), [[1, -1]])
    np.testing.assert_array_equal(aggregate(x, mode="abs"), [[2.0, 3.0]])
    np.testing.assert_array_equal(aggregate(x, mode="relu", higher_is_better=False), [[1.5, 1]])
    np.testing.assert_array_equal(aggregate(x, how="median"), np.median(x, axis=0))
    with pytest.raises(InputError, match="postprocess"):
        postprocess(x, "square")
