"""Diagnostics and post-processing against plain numpy loops."""

from __future__ import annotations

import numpy as np
import pytest

from mechscope.errors import InputError
from mechscope.heads.diagnostics import agreement, sample_diagnostics, similarity_matrix
from mechscope.heads.postprocess import aggregate, orient, postprocess


def _data(n=6, shape=(3, 4), seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    common = rng.normal(size=shape)
    return common[None] + 0.5 * rng.normal(size=(n, *shape))  # [n, L, H]


def _metric(df, name: str) -> float:
    return float(df.loc[df["metric"] == name, "value"].iloc[0])


def test_sample_diagnostics_match_plain_loops() -> None:
    x = _data()
    flat = x.reshape(len(x), -1)
    mean = flat.mean(axis=0)
    df = sample_diagnostics(x, method="joint", thresholds=(0.2, 0.4))
    assert set(df["method"]) == {"joint"}
    assert _metric(df, "one_vs_all_pearson") == pytest.approx(np.corrcoef(flat[0], mean)[0, 1])
    cos = flat[0] @ mean / np.linalg.norm(flat[0]) / np.linalg.norm(mean)
    assert _metric(df, "one_vs_all_cosine") == pytest.approx(cos)
    rest = [np.corrcoef(flat[i], np.delete(flat, i, 0).mean(0))[0, 1] for i in range(len(flat))]
    assert _metric(df, "one_vs_rest_pearson_mean") == pytest.approx(np.mean(rest))
    pairs = [np.corrcoef(flat[i], flat[j])[0, 1] for i in range(6) for j in range(6) if i < j]
    assert _metric(df, "pairwise_pearson_mean") == pytest.approx(np.mean(pairs))
    assert _metric(df, "pairwise_pearson_min") == pytest.approx(np.min(pairs))
    assert _metric(df, "pairwise_pearson_max") == pytest.approx(np.max(pairs))
    var = [np.var(flat[:, j], ddof=1) for j in range(flat.shape[1])]
    assert _metric(df, "head_var_mean") == pytest.approx(np.mean(var))
    assert _metric(df, "head_var_median") == pytest.approx(np.median(var))
    assert _metric(df, "n_heads_var_gt_0.2") == sum(v > 0.2 for v in var)
    assert _metric(df, "n_heads_var_gt_0.4") == sum(v > 0.4 for v in var)
    assert _metric(df, "all_max") == pytest.approx(mean.max())
    assert _metric(df, "one_std") == pytest.approx(flat[0].std())


def test_identical_samples_look_sample_independent() -> None:
    x = np.repeat(_data(n=1), 5, axis=0)
    df = sample_diagnostics(x, method="joint")
    assert _metric(df, "pairwise_pearson_min") == pytest.approx(1.0)
    assert _metric(df, "head_var_max") == pytest.approx(0.0, abs=1e-20)
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
    assert _metric(df, "per_sample_pearson_mean") == pytest.approx(np.mean(ps))
    ma, mb = fa.mean(0), fb.mean(0)
    assert _metric(df, "mean_pearson") == pytest.approx(np.corrcoef(ma, mb)[0, 1])
    top_a, top_b = set(np.argsort(-ma)[:3]), set(np.argsort(-mb)[:3])
    assert _metric(df, "top3_overlap") == pytest.approx(len(top_a & top_b) / 3)
    assert _metric(
        agreement(a, a, name_a="x", name_b="y"), "per_sample_pearson_min"
    ) == pytest.approx(1)
    m = similarity_matrix(a)
    np.testing.assert_allclose(m, np.corrcoef(fa), atol=1e-12)
    with pytest.raises(InputError, match="same shape"):
        agreement(a, b[:3], name_a="joint", name_b="per_layer")


def test_orientation_postprocessing_and_aggregation() -> None:
    x = np.array([[[1.0, -2.0]], [[-3.0, 4.0]]])  # [2 samples, 1 layer, 2 heads]
    np.testing.assert_array_equal(orient(x, higher_is_better=False), -x)
    np.testing.assert_array_equal(postprocess(x, "abs"), np.abs(x))
    np.testing.assert_array_equal(postprocess(x, "relu"), np.maximum(x, 0))
    # a loss: helpful heads have negative IG; abs is taken per sample, before the mean
    np.testing.assert_allclose(aggregate(x, mode="signed", higher_is_better=False), [[1.0, -1.0]])
    np.testing.assert_allclose(aggregate(x, mode="abs"), [[2.0, 3.0]])
    np.testing.assert_allclose(aggregate(x, mode="relu", higher_is_better=False), [[1.5, 1.0]])
    np.testing.assert_allclose(aggregate(x, how="median"), np.median(x, axis=0))
    with pytest.raises(InputError, match="postprocess"):
        postprocess(x, "square")
