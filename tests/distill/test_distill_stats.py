"""The study's reviewer-facing statistics against independent computations: Holm and BH by
explicit loops, two-level bootstrap spreads against their closed form, the cluster bootstrap
against scipy's bootstrap where clusters are single students, the reference levels of
consistency against brute-force enumerations (the Hewitt–Liang control task is in
test_distill_control_task.py)."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
from scipy import stats

from mechscope.distill.consistency import (
    causal_consistency,
    shuffled_consistency,
    split_half_ceiling,
)
from mechscope.distill.evaluate import accuracy
from mechscope.distill.intervals import adjust_p_values
from mechscope.distill.pair_effects import (
    pair_arrays,
    pair_metric,
    pair_table,
    with_pair_intervals,
)
from mechscope.distill.resample import (
    cluster_pearson_interval,
    percentile_interval,
    seed_pair_interval,
    two_level_bootstrap,
)
from mechscope.distill.robustness import robustness_table
from tolerance import Z_SAMPLING, assert_exact, assert_fp64_close, assert_sampling_close


def _holm_loop(p: list[float]) -> list[float]:
    m, order = len(p), sorted(range(len(p)), key=lambda i: p[i])
    out, running = [0.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out


def _bh_loop(p: list[float]) -> list[float]:
    m, order = len(p), sorted(range(len(p)), key=lambda i: p[i])
    out, running = [0.0] * m, 1.0
    for rank in range(m - 1, -1, -1):
        i = order[rank]
        running = min(running, p[i] * m / (rank + 1))
        out[i] = running
    return out


def test_holm_and_bh_per_part_match_explicit_loops():
    g = np.random.default_rng(0)
    parts = {("s1", "ioi"): 7, ("s1", "facts"): 5}
    rows = []
    for (student, task), m in parts.items():
        for p in np.r_[g.uniform(0, 0.05, 3), g.uniform(0, 1, m - 3)]:
            rows.append({"student": student, "task": task, "p_value": float(p)})
    rows.append({"student": "s1", "task": "ioi", "p_value": np.nan})  # one seed: no test
    out = adjust_p_values(pd.DataFrame(rows))
    assert np.isnan(out["p_holm"].iloc[-1]) and np.isnan(out["p_bh"].iloc[-1])
    for (student, task), m in parts.items():
        part = out[(out.student == student) & (out.task == task) & out.p_value.notna()]
        assert len(part) == m  # the NaN row is no member of its family
        p = part["p_value"].tolist()
        # Holm multiplies and takes maxima: the same products in either implementation.
        assert_exact(part["p_holm"].to_numpy(), np.array(_holm_loop(p)))
        # BH divides by rank / m where the loop multiplies by m / rank: one rounding apart.
        assert_fp64_close(part["p_bh"].to_numpy(), np.array(_bh_loop(p)), terms=2)
        assert (part["p_holm"] >= part["p_bh"]).all()


def test_two_level_bootstrap_spread_matches_its_closed_form():
    """Mean over drawn seeds of the mean over drawn pairs: its bootstrap variance is
    ``[Var_s(m_s) + mean_s(σ_s² / n)] / S`` (population moments of the sample). Both terms
    are of one size here, so dropping either level's resampling is far outside the check."""
    g = np.random.default_rng(1)
    s, n = 4, 30
    x = 0.25 * g.normal(size=(s, 1)) + g.normal(size=(s, n)) * np.array([[0.5], [1], [2], [1]])
    values = two_level_bootstrap(
        [n] * s,
        lambda draw: float(np.mean([x[j][idx].mean() for j, idx in draw])),
        n_resamples=8000,
        seed=3,
    )
    m, within = x.mean(1), (x.var(1) / n).mean()
    want = (m.var() + within) / s
    centred = values - values.mean()
    got = float(np.mean(centred**2))
    se_var = np.sqrt((np.mean(centred**4) - got**2) / values.size)
    assert_sampling_close(got, want, se=se_var)
    for wrong in (m.var() / s, within / s):  # seeds only; pairs only
        assert abs(got - wrong) > Z_SAMPLING * se_var
    assert_sampling_close(values.mean(), x.mean(), se=np.sqrt(want / values.size))


def test_seed_pair_interval_is_degenerate_without_spread():
    low, high = seed_pair_interval([lambda idx: 0.25] * 3, [10, 10, 10])
    assert_exact(np.array([low, high]), np.array([0.25, 0.25]))
    assert np.isnan(percentile_interval(np.array([np.nan, np.nan, 1.0]))[0])


def test_cluster_bootstrap_of_singletons_is_the_ordinary_pairs_bootstrap():
    """With one student per method the two-level draw is the paired bootstrap of the
    points; its percentile interval matches scipy's up to the two Monte Carlo errors (each
    quantile's error from the order statistics around it)."""
    g = np.random.default_rng(2)
    n, b = 25, 20000
    x = g.normal(size=n)
    y = 0.6 * x + g.normal(size=n)
    got = cluster_pearson_interval(x, y, [str(i) for i in range(n)], n_resamples=b, seed=5)
    ref = stats.bootstrap(
        (x, y),
        lambda a, c: stats.pearsonr(a, c).statistic,
        paired=True,
        vectorized=False,
        n_resamples=b,
        method="percentile",
        rng=np.random.default_rng(6),
    ).confidence_interval
    values = np.sort(
        two_level_bootstrap(
            [1] * n,
            lambda d: float(np.corrcoef(x[[j for j, _ in d]], y[[j for j, _ in d]])[0, 1]),
            n_resamples=b,
            seed=5,
        )
    )
    for q, gv, rv in ((0.025, got[0], ref.low), (0.975, got[1], ref.high)):
        k, w = int(q * b), int(np.ceil(np.sqrt(b * q * (1 - q))))
        se = (values[k + w] - values[k - w]) / 2  # order-statistic standard error
        assert_sampling_close(gv, rv, se=np.sqrt(2) * se, msg=f"quantile {q}")


def test_cluster_interval_widens_where_methods_carry_the_correlation():
    """Three methods whose means line up, no relation within a method: the students-iid
    bootstrap sees 27 points on a line, the cluster bootstrap three."""
    g = np.random.default_rng(4)
    method = np.repeat(["a", "b", "c"], 9)
    centre = np.repeat([0.0, 1.0, 2.0], 9)
    trials = pd.DataFrame(
        {
            "student": "s",
            "task": "ioi",
            "method": method,
            "base_method": method,
            "consistency": centre + 0.3 * g.normal(size=27),
            "consistency_mean": centre + 0.3 * g.normal(size=27),
            "ood_degradation": centre + 0.3 * g.normal(size=27),
            "accuracy": g.uniform(0.5, 1.0, 27),
        }
    )
    row = robustness_table(trials).iloc[0]
    assert row.n_methods == 3
    assert row.cluster_high - row.cluster_low > 2 * (row.boot_high - row.boot_low)


def _effects(seed: int, k: int = 4, n: int = 12) -> tuple[np.ndarray, np.ndarray]:
    g = np.random.default_rng(seed)
    t = g.normal(size=(k, 1)) * 2 + g.normal(size=(k, n))
    return t, 0.5 * t + g.normal(size=(k, n))


def test_shuffled_consistency_against_all_derangements_by_hand():
    t, s = _effects(7)
    k = t.shape[0]
    pooled, means = [], []
    for p in itertools.permutations(range(k)):
        if any(p[i] == i for i in range(k)):
            continue
        sp = s[list(p)]
        pooled.append(np.corrcoef(t.ravel(), sp.ravel())[0, 1])
        means.append(np.mean([np.corrcoef(t[i], sp[i])[0, 1] for i in range(k)]))
    assert len(pooled) == 9  # the derangements of four
    got = shuffled_consistency(t, s)
    assert_fp64_close(got[0], np.mean(pooled), terms=t.size)
    assert_fp64_close(got[1], np.mean(means), terms=t.size)
    # Closed form of the per-checkpoint mean: every derangement uses each off-diagonal
    # (k, j) equally often, so it is the mean of the off-diagonal cross-correlations.
    cross = np.corrcoef(t, s)[:k, k:]
    assert_fp64_close(got[1], cross[~np.eye(k, dtype=bool)].mean(), terms=t.size)
    assert got[0] < causal_consistency(t, s)[1]  # the right sites agree more


def test_split_half_ceiling_against_every_split_by_hand():
    t, _ = _effects(8, k=4, n=6)
    rs = []
    for a in itertools.combinations(range(6), 3):
        b = [i for i in range(6) if i not in a]
        rs.append(np.corrcoef(t[:, list(a)].mean(1), t[:, b].mean(1))[0, 1])
    r = np.mean(rs)
    got = split_half_ceiling(t)
    assert_fp64_close(got[0], r, terms=t.size)
    assert_fp64_close(got[1], 2 * r / (1 + r), terms=t.size)
    flat = np.repeat(np.array([[1.0], [2.0], [4.0]]), 8, axis=1)  # no pair-to-pair noise
    assert_fp64_close(split_half_ceiling(flat)[1], 1.0, terms=8)
    assert np.isnan(split_half_ceiling(t[:2])[0])  # two checkpoints: no profile


def test_pair_table_round_trip_and_full_sample_metrics():
    t, s = _effects(9)
    ld = np.random.default_rng(9).normal(size=t.shape[1])
    arrays = pair_arrays(pair_table(t, s, ld).sample(frac=1.0, random_state=0))
    for key, want in (("delta_t", t), ("delta_s", s), ("ld", ld)):
        assert_exact(arrays[key], want)  # stored values read back
    every = np.arange(t.shape[1])
    per, pooled = causal_consistency(t, s)
    assert pair_metric("accuracy", arrays, every) == accuracy(ld)  # a share of integers
    assert_fp64_close(pair_metric("consistency", arrays, every), pooled, terms=t.size)
    assert_fp64_close(pair_metric("consistency_mean", arrays, every), per.mean(), terms=t.size)


def test_with_pair_intervals_matches_a_direct_seed_pair_bootstrap():
    """The contrast table's interval, from stored tables matched by seed, against the same
    bootstrap built here from the raw arrays."""
    g = np.random.default_rng(10)
    n, seeds = 40, [0, 1, 2]
    ld = {(m, sd): g.normal(loc=mu, size=n) for m, mu in (("a", 0.8), ("b", 0.0)) for sd in seeds}
    t, _ = _effects(11, n=n)
    trials = pd.DataFrame(
        [
            {"student": "s", "task": "ioi", "method": m, "seed": sd, "trial": f"{m}{sd}"}
            for m, sd in ld
        ]
    )
    pairs = {f"{m}{sd}": pair_table(t, t + g.normal(size=t.shape), v) for (m, sd), v in ld.items()}
    contrasts = pd.DataFrame(
        [{"student": "s", "task": "ioi", "metric": "accuracy", "method": "a", "reference": "b"}]
    )
    got = with_pair_intervals(contrasts, trials, pairs).iloc[0]
    per_seed = [
        (lambda idx, a=ld[("a", sd)], b=ld[("b", sd)]: np.mean(a[idx] > 0) - np.mean(b[idx] > 0))
        for sd in seeds
    ]
    want = seed_pair_interval(per_seed, [n] * 3)
    assert_exact(np.array([got.boot_low, got.boot_high]), np.array(want))  # same draws
    assert got.boot_low > 0  # a clear difference stays clear with the pairs resampled
