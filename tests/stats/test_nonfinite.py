"""No rate, rank, winner, interval or correlation is ever computed from NaN.

NaN and infinite scores are fed to every aggregator directly (the Python API takes any
array): each refuses in one line naming the sample and the layer, where NaN is not the
documented mark of a missing value; where it is (a progress bin a short sample never
reached), the value is skipped as before and an infinity is still refused.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from mechscope.errors import NonFiniteError
from mechscope.lens.aggregate import (
    AggregateOptions,
    aligned_heatmaps,
    attention_correlations,
    attention_curves,
    class_curves,
    metric_curves,
)
from mechscope.lens.candidate_curves import candidate_curves
from mechscope.lens.result import METRICS, SampleDiff
from mechscope.stats import (
    cosine,
    curve_ci,
    kurtosis_across,
    pairwise_pearson_matrix,
    pearson,
    progress_bins,
    spearman,
    split_half_reliability,
)
from mechscope.stats.finite import first_nonfinite, require_finite
from tolerance import assert_fp64_close, scale_of

OPTS = AggregateOptions(n_resamples=50, n_bins=4, first_k=4, anchor_before=2, anchor_after=2)
L = 4


def _one_line(exc: pytest.ExceptionInfo, *needles: str) -> None:
    message = str(exc.value)
    assert "\n" not in message
    for needle in needles:
        assert needle in message, (needle, message)


# ------------------------------------------------------------------ the helpers
def test_first_nonfinite_finds_the_first_layer_and_names_what_is_bad():
    x = np.zeros((3, L, 5))  # [metric, layer, token]
    x[2, 3, 1] = np.inf
    x[1, 2, 0] = x[1, 2, 4] = np.nan
    found = first_nonfinite(x, axis=1, names=("m0", "m1", "m2"))
    assert found is not None
    assert (found.index, found.n_bad, found.n_values, found.kind) == (2, 2, 15, "NaN")
    assert found.names == ("m1",)
    assert first_nonfinite(np.zeros((2, 3))) is None
    assert first_nonfinite(np.array([1, 2])) is None  # integers are always finite


def test_require_finite_maps_the_index_to_the_swept_layer_and_counts():
    x = np.ones((3, 2))
    x[1, 0] = -np.inf
    with pytest.raises(NonFiniteError) as exc:
        require_finite(x, "logit_diff", sample="p0", layers=[4, 7, 9])
    _one_line(exc, "sample 'p0'", "layer 7", "logit_diff is infinite at 1 of 2")
    with pytest.raises(NonFiniteError) as exc:
        require_finite(x, "loss", sample="t", layer_axis=None)
    assert "layer" not in str(exc.value) and "1 of 6" in str(exc.value)


# ------------------------------------------------------------------ candidate readout
def _scores(n_layers: int = L, bad_layer: int | None = None) -> np.ndarray:
    rng = np.random.default_rng(0)
    s = rng.normal(size=(n_layers, 3)).astype(np.float32)
    if bad_layer is not None:
        s[bad_layer:] = np.nan  # a NaN activation from this layer on
    return s


def test_candidate_win_rates_are_never_computed_from_nan_scores():
    """Before: argmax of a NaN row picks index 0 (label A), so the win-rate of A was 1.0 at
    every NaN layer, with only a 'too few samples' warning."""
    samples = [
        {"sample_id": f"c{i}", "scores": _scores(), "label_a": 0, "label_b": 1} for i in range(3)
    ]
    samples[1]["scores"] = _scores(bad_layer=2)
    with pytest.raises(NonFiniteError) as exc:
        candidate_curves(samples, OPTS)
    _one_line(exc, "sample 'c1'", "layer 2", "candidate score is NaN")


def test_candidate_curves_of_finite_scores_are_unchanged():
    samples = [
        {"sample_id": f"c{i}", "scores": _scores(), "label_a": 0, "label_b": 1} for i in range(3)
    ]
    curves = candidate_curves(samples, OPTS)
    win_a = curves[curves.metric == "win_a"]["mean"].to_numpy()
    expected = (_scores().argmax(axis=1) == 0).astype(float)  # every sample is the same
    np.testing.assert_array_equal(win_a, expected)


# ------------------------------------------------------------------ paired lens
def _diff(i: int, bad: tuple[str, int] | None = None, att_bad: int | None = None) -> SampleDiff:
    rng = np.random.default_rng(i)
    n = 6
    metrics = rng.normal(size=(len(METRICS), L, n)).astype(np.float32)
    att = rng.random((L, 2, n, 2)).astype(np.float32)
    if bad is not None:
        metrics[METRICS.index(bad[0]), bad[1], 3] = np.nan
    if att_bad is not None:
        att[att_bad, 0, 0, 0] = np.inf
    text = " ".join(f"w{k}" for k in range(n))
    offsets = [(0, 2)] + [(2 + 3 * (k - 1), 2 + 3 * k) for k in range(1, n)]
    return SampleDiff(
        sample_id=f"s{i}",
        group="g" if i % 2 else "h",
        contrast=("a", "b"),
        continuation=text,
        tokens=[text[a:b] for a, b in offsets],
        offsets=np.asarray(offsets),
        semantic=np.ones(n, dtype=bool),
        classes=["identifier"] * n,
        metrics=metrics,
        attention={"a": att},
        segments={"a": ["tool", "rest"]},
    )


AGGREGATORS = {
    "metric curves": lambda s: metric_curves(s, OPTS),
    "class curves": lambda s: class_curves(s, OPTS),
    "aligned heatmaps": lambda s: aligned_heatmaps(s, OPTS),
    "attention curves": lambda s: attention_curves(s, OPTS),
    "attention correlations": attention_correlations,
}


@pytest.mark.parametrize("name", sorted(AGGREGATORS))
def test_every_lens_aggregator_refuses_a_nan_metric_naming_sample_and_layer(name):
    samples = [_diff(0), _diff(1, bad=("js", 2)), _diff(2)]
    with pytest.raises(NonFiniteError) as exc:
        AGGREGATORS[name](samples)
    _one_line(exc, "sample 's1'", "layer 2", "js is NaN at 1 of")


@pytest.mark.parametrize("name", sorted(AGGREGATORS))
def test_every_lens_aggregator_refuses_an_infinite_attention_mass(name):
    samples = [_diff(0), _diff(1), _diff(2, att_bad=3)]
    with pytest.raises(NonFiniteError) as exc:
        AGGREGATORS[name](samples)
    _one_line(exc, "sample 's2'", "layer 3", "attention mass of a is infinite")


def test_nan_at_a_token_no_aggregate_reads_is_left_to_the_source_check():
    """The HumanEval study reads out semantic tokens only and marks the others NaN; every
    aggregate reads semantic tokens only. A stored sample is checked over every token."""
    s = _diff(0)
    s.semantic[3] = False
    s.metrics[:, :, 3] = np.nan
    metric_curves([s, _diff(1), _diff(2)], OPTS)
    s.require_finite(semantic_only=True)
    with pytest.raises(NonFiniteError, match="layer 0"):
        s.require_finite()


def test_the_first_bad_layer_over_all_metrics_is_named_with_every_bad_metric():
    s = _diff(0, bad=("kl_ab", 3))
    s.metrics[METRICS.index("nll_b"), 1, 0] = np.nan
    s.metrics[METRICS.index("dnll"), 1, 0] = np.nan
    with pytest.raises(NonFiniteError) as exc:
        s.require_finite()
    _one_line(exc, "layer 1", "nll_b, dnll is NaN")


# ------------------------------------------------------------------ stats
@pytest.mark.parametrize("fn", [pearson, spearman, cosine])
@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_correlations_refuse_non_finite_scores(fn, value):
    x = np.arange(6.0)
    y = x**2
    y[4] = value
    with pytest.raises(NonFiniteError) as exc:
        fn(x, y)
    _one_line(exc, "field 'y'", "index 4")


def test_the_correlation_matrix_refuses_nan_rows():
    x = np.random.default_rng(0).normal(size=(4, 5))
    x[2, 1] = np.nan
    with pytest.raises(NonFiniteError) as exc:
        pairwise_pearson_matrix(x)
    _one_line(exc, "field 'X'", "index (2, 1)", "is NaN")


def test_bootstrap_skips_a_missing_value_but_refuses_an_infinity():
    x = np.random.default_rng(0).normal(size=(6, 3))
    x[1, 2] = np.nan  # a point one sample never reached: documented as missing
    ci = curve_ci(x, n_resamples=200, seed=0)
    assert_fp64_close(ci.mean[2], np.nanmean(x[:, 2]), terms=6, scale=scale_of(x[:, 2]))
    x[3, 0] = np.inf
    with pytest.raises(NonFiniteError) as exc:
        curve_ci(x, n_resamples=200)
    _one_line(exc, "field 'values'", "index (3, 0)", "infinite")


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: progress_bins(x, 2),
        lambda x: kurtosis_across(x),
        lambda x: split_half_reliability(x, n_splits=3),
    ],
    ids=["progress bins", "kurtosis", "split half"],
)
def test_aligned_and_shape_statistics_refuse_an_infinity(fn):
    x = np.random.default_rng(0).normal(size=(4, 6))
    x[2, 3] = -np.inf
    with pytest.raises(NonFiniteError, match="infinite"):
        fn(x)


# ------------------------------------------------------------------ heads, patching, distill
def test_head_importance_is_never_ranked_from_nan():
    from mechscope.heads.postprocess import aggregate

    x = np.random.default_rng(0).normal(size=(3, L, 2))
    x[1, 2, 1] = np.nan
    with pytest.raises(NonFiniteError) as exc:
        aggregate(x, mode="abs")
    _one_line(exc, "sample '#1'", "layer 2", "attribution is NaN")


def _pair(nan_at: int | None = None, attribution: bool = True):
    from mechscope.patching.result import PairResult

    rng = np.random.default_rng(0)
    grid = rng.normal(size=(3, 4, 1)).astype(np.float32)
    metrics = {"logit_diff": grid.copy(), "normalized_effect": np.full_like(grid, np.nan)}
    att = grid.copy()
    if nan_at is not None:
        att[nan_at, 2, 0] = np.nan
    return PairResult(
        pair_id="p0",
        direction="denoising",
        site="resid_pre",
        granularity="position",
        layers=[2, 5, 8],
        units=["0", "1", "2", "3"],
        positions=[0, 1, 2, 3],
        heads=[-1],
        metrics=metrics,
        baseline={"base_logit_diff": 1.0, "clean_logit_diff": 2.0, "corrupt_logit_diff": 2.0},
        attribution=att if attribution else None,
        attribution_metric="logit_diff",
    )


def test_patching_agreement_is_never_ranked_from_a_nan_attribution():
    from mechscope.patching.attribution_patching import agreement
    from mechscope.patching.result import PatchingResult

    result = PatchingResult([_pair(nan_at=1)], "resid_pre", "position")
    with pytest.raises(NonFiniteError) as exc:
        agreement(result, k=3)
    _one_line(exc, "sample 'p0 (denoising)'", "layer 5", "attribution is NaN")


def test_an_undefined_normalized_effect_is_flagged_in_one_line_not_refused():
    from mechscope.patching.result import flag_undefined_effects

    pair = _pair()
    pair.require_finite()  # NaN normalised effect: by definition, not a fault
    with pytest.warns(UserWarning) as record:
        assert flag_undefined_effects([pair]) == ["p0 (denoising)"]
    (w,) = record
    assert "\n" not in str(w.message) and "p0 (denoising)" in str(w.message)


def test_a_nan_baseline_is_refused():
    pair = _pair()
    pair.baseline["base_logit_diff"] = float("nan")
    with pytest.raises(NonFiniteError, match="unpatched runs"):
        pair.require_finite()


def test_accuracy_is_never_a_rate_of_nan_logit_differences():
    from mechscope.distill.evaluate import accuracy

    assert accuracy(np.array([1.0, -1.0, 2.0])) == 2 / 3  # a count over 3: one division
    with pytest.raises(NonFiniteError) as exc:
        accuracy(np.array([1.0, np.nan, 2.0]))  # NaN > 0 is False: counted as wrong before
    _one_line(exc, "sample 'pair 1'", "logit difference is NaN")


def test_causal_consistency_refuses_nan_effects():
    from mechscope.distill.consistency import causal_consistency

    t = np.random.default_rng(0).normal(size=(2, 5))
    s = t.copy()
    s[1, 3] = np.nan
    with pytest.raises(NonFiniteError):
        causal_consistency(t, s)


# ------------------------------------------------------------------ generation
@pytest.mark.parametrize(
    ("temperature", "top_p"), [(0.0, 1.0), (1.0, 1.0), (0.8, 0.9)], ids=["greedy", "t", "nucleus"]
)
def test_no_token_is_picked_from_nan_logits(temperature, top_p):
    """Greedy argmax of a NaN row is an arbitrary token; multinomial raises a traceback."""
    from mechscope.engine.generation.sampling import Sampling, next_tokens

    logits = torch.randn(3, 11)
    gens = [torch.Generator().manual_seed(k) for k in range(3)]
    sampling = Sampling(4, temperature, top_p)
    assert next_tokens(logits, sampling, gens).shape == (3,)
    logits[1, 5] = float("nan")
    with pytest.raises(NonFiniteError) as exc:
        next_tokens(logits, sampling, gens)
    _one_line(exc, "1 generated row(s)", "no token")


def test_the_tables_of_a_flagged_pair_keep_nan_rows():
    """A flagged (undefined) normalised effect stays NaN in the long table, never 0."""
    from mechscope.patching.result import PatchingResult

    frame = PatchingResult([_pair()], "resid_pre", "position").to_frame()
    assert isinstance(frame, pd.DataFrame) and frame["normalized_effect"].isna().all()


def test_the_lens_kernels_keep_nan_as_nan():
    """The native kernel clamped a rounding dip below 0 with ``ka > 0 ? ka : 0``, which
    turned the KL of NaN logits into 0: a finite number from NaN."""
    from mechscope.lens.divergence import paired_stats, paired_stats_eager

    z = torch.randn(4, 2, 50)
    z[1, 0, 7] = float("nan")  # row 1, condition A
    targets = torch.tensor([3, 4, 5, 6])
    eager = paired_stats_eager(z, targets)  # [5, rows]: NLL_A, NLL_B, JS, KL_AB, KL_BA
    native = paired_stats(z, targets, kernel="native")
    expected = torch.tensor([True, False, True, True, True])  # only B's NLL is still defined
    for out in (eager, native):
        assert torch.equal(torch.isnan(out[:, 1]), expected)
        assert torch.isfinite(out[:, [0, 2, 3]]).all()
