"""Experiment 3's correlation and its intervals against closed forms and scipy; the sweep
table's differences and verdicts against scipy's paired t-test."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats

from mechscope.distill.robustness import (
    N_RESAMPLES,
    format_robustness,
    partial_pearson,
    pearson_intervals,
    robustness_table,
)
from mechscope.distill.sweep import LEARN_MARGIN, format_sweep, sweep_figure, sweep_table
from tolerance import assert_fp64_close, assert_sampling_close


def _bivariate(n: int, rho: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    g = np.random.default_rng(seed)
    x = g.normal(size=n)
    return x, rho * x + math.sqrt(1 - rho**2) * g.normal(size=n)


def test_fisher_interval_is_the_closed_form():
    x, y = _bivariate(30, 0.4, 0)
    out = pearson_intervals(x, y)
    r = float(np.corrcoef(x, y)[0, 1])
    half = stats.norm.ppf(0.975) / math.sqrt(30 - 3)
    # correlations are ratios of float64 sums over the 30 points, normalised to scale 1
    assert_fp64_close(out["r"], r, terms=30, scale=1.0, msg="r")
    want = [math.tanh(math.atanh(r) - half), math.tanh(math.atanh(r) + half)]
    assert_fp64_close([out["fisher_low"], out["fisher_high"]], want, terms=30, scale=1.0)
    rho = stats.spearmanr(x, y).statistic
    assert_fp64_close(out["spearman"], rho, terms=30, scale=1.0, msg="Spearman")
    assert out["boot_low"] < r < out["boot_high"]


def test_bootstrap_agrees_with_fisher_on_normal_data():
    """For many bivariate-normal points both intervals estimate the same endpoints, ``r ± z·sd``
    with Fisher's ``sd = (1 − r²)/√(n − 3)``: the bootstrap's differ by its own sampling error,
    the Monte Carlo error of a 2.5 % quantile of ``N_RESAMPLES`` resamples
    (``√(α(1 − α)/B) / φ(z)`` sds) and that of the spread it reads off ``n`` points (an sd
    estimated from ``n`` normal points is off by ``1/√(2n)`` of itself, ``z`` times that)."""
    n = 400
    x, y = _bivariate(n, 0.5, 1)
    out = pearson_intervals(x, y)
    sd = (1 - out["r"] ** 2) / math.sqrt(n - 3)
    alpha, z = 0.025, stats.norm.ppf(0.975)
    monte_carlo = math.sqrt(alpha * (1 - alpha) / N_RESAMPLES) / stats.norm.pdf(z)
    se = sd * math.hypot(monte_carlo, z / math.sqrt(2 * n))
    got, want = [out["boot_low"], out["boot_high"]], [out["fisher_low"], out["fisher_high"]]
    assert_sampling_close(got, want, se=se, msg="bootstrap against Fisher")


def test_partial_correlation_matches_the_formula():
    g = np.random.default_rng(2)
    z = g.normal(size=50)
    x = z + g.normal(size=50)
    y = z + 0.5 * x + g.normal(size=50)
    rxy, rxz, ryz = (stats.pearsonr(a, b).statistic for a, b in ((x, y), (x, z), (y, z)))
    expected = (rxy - rxz * ryz) / math.sqrt((1 - rxz**2) * (1 - ryz**2))
    r, low, high = partial_pearson(x, y, z)
    # residuals of a least-squares fit against the formula's three correlations: float64
    # sums over the 50 points, the formula's rounding amplified by its denominator
    scale = 1 / math.sqrt((1 - rxz**2) * (1 - ryz**2))
    assert_fp64_close(r, expected, terms=50, scale=scale, msg="partial r")
    half = stats.norm.ppf(0.975) / math.sqrt(50 - 4)
    want = math.tanh(math.atanh(expected) + half)
    assert_fp64_close(high, want, terms=50, scale=scale, msg="upper end")
    assert low < r < high


def test_too_few_or_constant_points_give_nan():
    assert math.isnan(pearson_intervals([0.1, 0.2, 0.3], [1, 2, 3])["r"])
    assert math.isnan(pearson_intervals([0.1] * 6, [1, 2, 3, 4, 5, 6])["r"])


def _trials() -> pd.DataFrame:
    g = np.random.default_rng(3)
    rows = []
    for seed in range(4):
        for method, base, lm, acc in (
            ("untrained", "untrained", 1.0, 0.4),
            ("standard_kd", "standard_kd", 1.0, 0.85),
            ("rcid", "rcid", 1.0, 0.5),
            ("rcid-lm0.1", "rcid", 0.1, 0.84),
        ):
            cons = 0.3 + (0.1 if method == "rcid-lm0.1" else 0.0) + 0.02 * g.normal()
            rows.append(
                {
                    "student": "s",
                    "task": "ioi",
                    "method": method,
                    "base_method": base,
                    "lambda_kl": 1.0,
                    "lambda_method": lm,
                    "seed": seed,
                    "accuracy": acc + 0.02 * g.normal(),
                    "consistency_mean": cons,
                    "consistency": cons + 0.05 * g.normal(),
                    "ood_degradation": 0.2 - 0.5 * cons + 0.02 * g.normal(),
                    "grad_cos_mean": -0.1,
                    "grad_ratio_median": 10 * lm,
                    "adam_cos_mean": 0.25,
                    "adam_ratio_median": 3 * lm,
                    "train_kl_end": 0.1,
                }
            )
    return pd.DataFrame(rows)


def test_robustness_table_counts_distilled_students_only():
    table = robustness_table(_trials())
    assert set(table["measure"]) == {"per-checkpoint mean", "pooled"}
    row = table[table["measure"] == "per-checkpoint mean"].iloc[0]
    assert row.n == 12  # 3 distilled methods x 4 seeds; untrained left out
    t = _trials()
    t = t[t["method"] != "untrained"]
    want = stats.pearsonr(t["consistency_mean"], t["ood_degradation"]).statistic
    assert_fp64_close(row.r, want, terms=12, scale=1.0, msg="r")
    text = format_robustness(table)
    assert "Fisher" in text
    lines = text.splitlines()  # every row has the header's columns (no stray "|")
    assert {line.count("|") for line in lines} == {lines[0].count("|")}


def test_sweep_differences_and_verdicts():
    trials = _trials()
    table = sweep_table(trials)
    assert list(table["method"]) == ["standard_kd", "rcid-lm0.1", "rcid"]  # KD first, by ratio
    v = table.set_index("method")
    kd = trials[trials["method"] == "standard_kd"].set_index("seed")
    for method in ("rcid", "rcid-lm0.1"):
        m = trials[trials["method"] == method].set_index("seed")
        res = stats.ttest_rel(m["accuracy"], kd["accuracy"])
        ci = res.confidence_interval(0.95)
        got = [v.loc[method, "d_acc_ci_low"], v.loc[method, "d_acc_ci_high"]]
        assert_fp64_close(got, [ci.low, ci.high], terms=4, scale=1.0, msg=method)
        assert v.loc[method, "learns"] == (v.loc[method, "d_acc"] >= -LEARN_MARGIN)
    assert not v.loc["rcid", "learns"] and v.loc["rcid-lm0.1", "learns"]
    assert v.loc["rcid-lm0.1", "more_mechanism"]
    assert v.loc["rcid-lm0.1", "ratio"] == 0.1 / 1.0  # λ_method / λ_KL, as the table divides
    text = format_sweep(table)
    assert "rcid-lm0.1" in text and "| yes |" in text
    lines = text.splitlines()  # the gradient columns, raw and Adam-scaled, in every row
    assert "Adam cos" in lines[0] and {line.count("|") for line in lines} == {lines[0].count("|")}
    rcid = next(line for line in lines if "| rcid |" in line).split(" | ")
    head = lines[0].split(" | ")
    assert rcid[head.index("Adam ratio")] == "3.000" and rcid[head.index("Adam cos")] == "+0.250"
    old = format_sweep(sweep_table(trials.drop(columns=["adam_cos_mean", "adam_ratio_median"])))
    rcid = next(line for line in old.splitlines() if "| rcid |" in line).split(" | ")
    assert rcid[head.index("Adam ratio")] == rcid[head.index("Adam cos")] == "–"
    fig = sweep_figure(table)
    assert fig is not None and fig.spec.x == ["0.1", "1"]


def test_no_sweep_without_variants():
    trials = _trials()
    assert sweep_table(trials[trials["method"] != "rcid-lm0.1"]).empty


def test_one_seed_accuracy_gets_the_wilson_interval_over_test_pairs():
    """One finished seed: no interval over seeds, so accuracy's is Wilson over the n_test
    pairs (checked against the closed-form Wilson score interval), marked in the Markdown."""
    z = stats.norm.ppf(0.975)

    def wilson(k: int, n: int) -> tuple[float, float]:
        p = k / n
        centre = (p + z**2 / (2 * n)) / (1 + z**2 / n)
        half = z / (1 + z**2 / n) * math.sqrt(p * (1 - p) / n + z**2 / (4 * n**2))
        return centre - half, centre + half

    trials = _trials()
    one = trials[trials["seed"] == 0].assign(accuracy=[0.375, 0.8125, 0.5, 0.796875], n_test=64)
    table = sweep_table(one).set_index("method")
    for method in ("standard_kd", "rcid", "rcid-lm0.1"):
        acc = one.set_index("method").loc[method, "accuracy"]
        low, high = wilson(round(acc * 64), 64)
        row = table.loc[method]
        assert row["accuracy_ci_over"] == "pairs"
        got = [row["accuracy_ci_low"], row["accuracy_ci_high"]]
        assert_fp64_close(got, [low, high], scale=1.0, msg=method)  # float64 formulas
        assert math.isnan(row["consistency_mean_ci_low"]) and math.isnan(row["d_acc_ci_low"])
    text = format_sweep(table.reset_index())
    assert "0.812 [" in text and "]ᵖ" in text and "Wilson" in text
    # with every seed, the interval is over seeds again
    assert set(sweep_table(trials)["accuracy_ci_over"]) == {"seeds"}


def test_sweep_figure_draws_the_method_swept_most():
    """A study with FitNets at its one weight beside RCID variants draws RCID's sweep."""
    trials = _trials()
    fitnets = trials[trials["method"] == "standard_kd"].assign(
        method="fitnets", base_method="fitnets", accuracy=0.9
    )
    fig = sweep_figure(sweep_table(pd.concat([trials, fitnets], ignore_index=True)))
    assert fig is not None and fig.spec.x == ["0.1", "1"]
    assert "rcid by loss weight" in fig.title
