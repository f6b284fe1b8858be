"""The category bars' interval is :func:`mechscope.stats.curve_ci`, the same percentile
bootstrap of the mean that anchors once computed by hand; the sentence graph stays readable
from 20 to 400 sentences."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats

from mechscope.anchors.figures import mean_ci
from tolerance import assert_fp64_close, assert_sampling_close, scale_of


@pytest.mark.parametrize("n", [10, 30, 100])
def test_mean_ci_is_the_percentile_bootstrap_of_the_mean(n):
    v = np.random.default_rng(n).gamma(2.0, size=n)
    mean, low, high = mean_ci(np.append(v, np.nan), seed=3)  # NaN dropped
    exact = stats.bootstrap(
        (v,), np.mean, n_resamples=2000, method="percentile", confidence_level=0.95, rng=3
    ).confidence_interval
    # Means of n resampled values: float64 sums of n terms at the data's scale.
    assert_fp64_close(mean, v.mean(), terms=n, scale=scale_of(v), msg="mean")
    got, want = np.array([low, high]), np.array([exact.low, exact.high])
    assert_fp64_close(got, want, terms=n, scale=scale_of(v), msg="bounds")
    # the former hand-rolled call (scipy's legacy RandomState stream): the same interval up to
    # the Monte-Carlo noise of 2,000 resamples
    legacy = stats.bootstrap(
        (v,), np.mean, n_resamples=2000, method="percentile", random_state=3
    ).confidence_interval
    se = np.sqrt(2) * _quantile_se(0.025, 2000, v.std() / np.sqrt(n))  # two independent draws
    assert_sampling_close(np.array([legacy.low, legacy.high]), got, se=se, msg="legacy")


def _quantile_se(p: float, resamples: int, sd: float) -> float:
    """Monte-Carlo standard error of the ``p`` quantile of ``resamples`` draws of a nearly
    normal bootstrap distribution with standard deviation ``sd``: ``√(p(1 − p)/B) / f(q_p)``."""
    return float(np.sqrt(p * (1 - p) / resamples) / stats.norm.pdf(stats.norm.ppf(p)) * sd)


def test_mean_ci_without_enough_values_has_no_bounds():
    assert all(np.isnan(mean_ci(np.array([np.nan, np.nan]))))
    for values in ([1.0, 2.0], [0.5, 0.5, 0.5, np.nan]):
        mean, low, high = mean_ci(np.array(values))
        # Means of binary fractions (1.5 / 2, 1.5 / 3): exact.
        assert mean == np.nanmean(values) and np.isnan(low) and np.isnan(high)


@pytest.mark.parametrize("n", [20, 64, 400])
def test_the_sentence_graph_stays_readable_from_20_to_400_sentences(n):
    import pandas as pd

    from mechscope.anchors.figures import LABELLED, MATRIX_FROM, edge_budget, sentence_graph
    from mechscope.report.render_graph import GRAPH_WIDTH_PX, diameters_of
    from mechscope.report.specs import GraphSpec, HeatmapSpec

    rng = np.random.default_rng(n)
    chunks = pd.DataFrame(
        {
            "trace": "t",
            "chunk_index": np.arange(n),
            "resampling_importance_accuracy": rng.gamma(1.0, size=n),
        }
    )
    matrix = np.tril(rng.normal(size=(n, n)), -1)  # [target, source]: earlier sources only
    fig = sentence_graph(
        chunks, "t", [f"s{i}" for i in range(n)], ["plan_generation"] * n, matrix,
        source_major=False, edge_source="test",
    )  # fmt: skip
    if n > MATRIX_FROM:  # past a size, the matrix itself: n × n cells, nothing overlaps
        assert isinstance(fig.spec, HeatmapSpec) and fig.spec.z.shape == (n, n)
        assert "matrix view" in fig.title
        return
    spec = fig.spec
    assert isinstance(spec, GraphSpec) and len(spec.nodes) == n
    per_target, most = edge_budget(n)
    assert len(spec.edges) <= min(most, per_target * n)
    gap = GRAPH_WIDTH_PX / n
    assert max(diameters_of(spec, GRAPH_WIDTH_PX).values()) <= max(2.0, 0.9 * gap)  # no overlap
    sizes = {node.id: node.size for node in spec.nodes}
    if n > 30:  # only the most important are numbered, never next to each other
        labelled = sorted(int(i) for i in spec.labelled)
        assert 0 < len(labelled) <= LABELLED
        assert min(b - a for a, b in itertools.pairwise(labelled)) >= n / 30
        assert str(max(sizes, key=sizes.get)) in spec.labelled  # the most important, first
    else:
        assert spec.labelled is None
    fig.to_plotly()  # both renderers draw it
