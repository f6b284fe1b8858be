"""Intervals over seeds against the textbook formulas (t quantile from scipy, the rest numpy)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

from mechscope.distill.intervals import (
    RANGES,
    adjust_p_values,
    format_contrasts,
    matched_weight_contrasts,
    mean_ci,
    method_contrasts,
    paired_difference,
)
from mechscope.distill.method_table import summary_table
from tolerance import assert_fp64_close

# The intervals and the textbook formulas are float64 sums over the seeds of values at most
# 1 (accuracies, correlations and their differences): float64 rounding at scale 1.


def _t_interval(x: np.ndarray) -> tuple[float, float]:
    half = stats.t.ppf(0.975, x.size - 1) * x.std(ddof=1) / np.sqrt(x.size)
    return x.mean() - half, x.mean() + half


def test_mean_ci_is_the_student_t_interval():
    x = np.array([0.31, 0.52, 0.47, 0.12, 0.40])
    assert_fp64_close(mean_ci(x), _t_interval(x), terms=5, scale=1.0)
    assert_fp64_close(mean_ci([*x, np.nan]), _t_interval(x), terms=5, scale=1.0)  # NaN dropped
    assert_fp64_close(mean_ci([0.7, 0.7, 0.7]), (0.7, 0.7), terms=3, scale=1.0)  # no spread
    assert all(np.isnan(mean_ci([0.7])))


def test_mean_ci_is_cut_to_the_metrics_range():
    """Three seeds of accuracies near 1: the t-interval reaches past 1, the reported one stops
    at 1 and keeps the lower end; the summary and sweep tables cut accuracy the same way."""
    x = np.array([0.797, 0.875, 0.922])
    low, high = _t_interval(x)
    assert high > 1
    assert_fp64_close(mean_ci(x, bounds=RANGES["accuracy"]), (low, 1.0), terms=3, scale=1.0)
    trials = pd.DataFrame(
        {"student": "s", "task": "ioi", "method": "standard_kd", "seed": [0, 1, 2], "accuracy": x}
    )
    row = summary_table(trials).iloc[0]
    got = [row["accuracy_ci_low"], row["accuracy_ci_high"]]
    assert_fp64_close(got, [low, 1.0], terms=3, scale=1.0, msg="summary")


def test_paired_difference_pairs_by_seed():
    a = pd.Series([0.9, 0.8, 0.85, 0.7], index=[0, 1, 2, 3])
    b = pd.Series([0.5, 0.45, 0.6, 0.1], index=[3, 2, 1, 0])  # other order, seed 3 first
    d = np.array([0.9 - 0.1, 0.8 - 0.6, 0.85 - 0.45, 0.7 - 0.5])
    out = paired_difference(a, b)
    assert out["n_seeds"] == 4
    assert_fp64_close(out["difference"], d.mean(), terms=4, scale=1.0, msg="difference")
    assert_fp64_close([out["ci_low"], out["ci_high"]], _t_interval(d), terms=4, scale=1.0)
    t = d.mean() / (d.std(ddof=1) / np.sqrt(d.size))
    want = 2 * stats.t.sf(abs(t), d.size - 1)
    assert_fp64_close(out["p_value"], want, terms=4, scale=1.0, msg="p-value")
    short = paired_difference(a, b.drop(index=[0, 1]))  # seeds only one side has are dropped
    assert short["n_seeds"] == 2


def test_contrasts_cover_the_methods_present():
    rows = [
        {
            "student": "s",
            "task": "ioi",
            "method": m,
            "seed": seed,
            "consistency": c,
            "accuracy": 0.5,
        }
        for m, base in (("untrained", -0.4), ("standard_kd", 0.5), ("rcid", 0.6))
        for seed, c in enumerate(base + np.array([0.0, 0.05, -0.02]))
    ]
    table = method_contrasts(pd.DataFrame(rows))
    pairs = set(zip(table.method, table.reference, strict=True))
    assert pairs == {("standard_kd", "untrained"), ("rcid", "standard_kd")}
    kd = table[(table.metric == "consistency") & (table.method == "standard_kd")].iloc[0]
    assert_fp64_close(kd.difference, 0.9, terms=3, scale=1.0, msg="difference")
    # the same offset on every seed (up to rounding): no spread, the interval is the value
    assert_fp64_close([kd.ci_low, kd.ci_high], [0.9, 0.9], terms=3, scale=1.0, msg="interval")
    assert "standard_kd − untrained" in format_contrasts(table)
    full = adjust_p_values(table.assign(boot_low=np.nan, boot_high=np.nan))
    assert "| p (Holm) | p (BH) |" in format_contrasts(full)


def test_rcid_against_informed_fitnets_at_equal_weights():
    """Each RCID variant is read against the Informed FitNets variant of the same two
    weights (and only that one), beside the plan's default-weight step."""
    methods = [  # (method, base, lambda_kl, lambda_method)
        ("standard_kd", "standard_kd", 1.0, 1.0),
        ("rcid", "rcid", 1.0, 1.0),
        ("informed_fitnets", "informed_fitnets", 1.0, 1.0),
        ("rcid-lm0.1", "rcid", 1.0, 0.1),
        ("informed_fitnets-lm0.1", "informed_fitnets", 1.0, 0.1),
        ("rcid-lm0.01", "rcid", 1.0, 0.01),  # no Informed FitNets at this weight
        ("rcid-kl10", "rcid", 10.0, 1.0),  # the ratio of lm0.1, not its weights
    ]
    rows = [
        {"student": "s", "task": "ioi", "method": m, "base_method": b, "lambda_kl": kl,
         "lambda_method": lm, "seed": seed, "accuracy": 0.5 + 0.01 * i + 0.003 * seed**2}
        for i, (m, b, kl, lm) in enumerate(methods)
        for seed in range(3)
    ]  # fmt: skip
    trials = pd.DataFrame(rows)
    pairs = set(matched_weight_contrasts(trials))
    assert pairs == {("rcid", "informed_fitnets"), ("rcid-lm0.1", "informed_fitnets-lm0.1")}
    table = method_contrasts(trials, metrics=("accuracy",))
    got = table.set_index(["method", "reference"]).loc[("rcid-lm0.1", "informed_fitnets-lm0.1")]
    assert_fp64_close(got.difference, -0.01, terms=3, scale=1.0, msg="matched difference")
    assert len(table) == len(set(zip(table.method, table.reference, strict=True)))  # no repeat
