"""Confidence intervals over seeds: of a method's mean, and of a difference between methods.

A study has few seeds (3-5), so intervals are Student-t intervals (``scipy.stats``), not
bootstraps: a bootstrap of three values can only return what it was given. The interval is
over *training seeds* with the task's pairs fixed: it says how much a result moves when the
student's initialisation (random students) and the order of training batches change, not
how it would move on other test pairs; the bootstrap over seeds *and* pairs beside it is in
:mod:`mechscope.distill.pair_effects` (three seeds are few to resample, but each brings its
64 pairs).

Method differences are *paired by seed* (``scipy.stats.ttest_rel``): trials with one seed
share the student's initialisation and batch order, so the paired difference removes what
the seed does to both.

A part of the study (one student × task) reports about 30 contrasts; read alone, one in
twenty of them would pass at p < 0.05 by chance. :func:`adjust_p_values` adds Holm's
(family-wise error) and Benjamini–Hochberg's (false discovery rate) adjusted p-values over
each part's contrasts (:mod:`mechscope.stats.multiple`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy import stats

from mechscope.stats.multiple import bh_adjust, holm_adjust

LEVEL = 0.95

#: Differences the study reports, ``(method, reference)``: does output-only KD change the
#: untrained student's consistency; does each feature-matching method do better than KD;
#: the plan's two steps, FitNets -> Informed FitNets (the right places) and Informed
#: FitNets -> RCID (contrast instead of state).
CONTRASTS: tuple[tuple[str, str], ...] = (
    ("standard_kd", "untrained"),
    ("fitnets", "standard_kd"),
    ("informed_fitnets", "standard_kd"),
    ("rcid", "standard_kd"),
    ("informed_fitnets", "fitnets"),
    ("rcid", "informed_fitnets"),
)


#: The values a metric can take: a mean's interval is cut to them (a t-interval over three
#: seeds of accuracies near 1 otherwise reaches past 1, a value no student can have).
RANGES: dict[str, tuple[float, float]] = {
    "accuracy": (0.0, 1.0),
    "ood_accuracy": (0.0, 1.0),
    "consistency": (-1.0, 1.0),  # Pearson correlations
    "consistency_mean": (-1.0, 1.0),
    "consistency_shuffled": (-1.0, 1.0),
    "consistency_mean_shuffled": (-1.0, 1.0),
    "consistency_ceiling": (-1.0, 1.0),
    "ood_degradation": (-1.0, 1.0),  # a difference of two accuracies
    "perplexity": (1.0, float("inf")),
    # cosines of a loss term's step with the task's margin (gradients.MARGIN_COSINES)
    "margin_cos_kl_mean": (-1.0, 1.0),
    "margin_cos_method_mean": (-1.0, 1.0),
    "adam_margin_cos_kl_mean": (-1.0, 1.0),
    "adam_margin_cos_method_mean": (-1.0, 1.0),
}


def _no_spread(x: np.ndarray) -> bool:
    """All values equal up to rounding (``1e-12`` relative): a t-interval would be built from
    floating-point noise (scipy warns of catastrophic cancellation), so report the value."""
    return bool(np.ptp(x) <= 1e-12 * max(1.0, float(np.abs(x).max())))


def mean_ci(
    values: Sequence[float] | np.ndarray,
    level: float = LEVEL,
    bounds: tuple[float, float] | None = None,
) -> tuple[float, float]:
    """Student-t interval of the mean of ``values`` (NaNs dropped), cut to ``bounds`` (the
    values the metric can take, :data:`RANGES`) when given.

    NaN for fewer than two values; ``(x, x)`` when all values equal ``x`` (no spread: a
    deterministic result, e.g. an untrained layer-subset student).
    """
    x = np.asarray(values, dtype=np.float64)
    x = x[np.isfinite(x)]
    if x.size < 2:
        return float("nan"), float("nan")
    if _no_spread(x):
        return float(x.mean()), float(x.mean())
    ci = stats.ttest_1samp(x, 0.0).confidence_interval(level)
    low, high = float(ci.low), float(ci.high)
    if bounds is not None:
        low, high = max(low, bounds[0]), min(high, bounds[1])
    return low, high


def paired_difference(a: pd.Series, b: pd.Series, level: float = LEVEL) -> dict[str, float | int]:
    """Mean of ``a - b`` over the seeds both have (index = seed), its interval and p-value."""
    both = pd.concat([a.rename("a"), b.rename("b")], axis=1, join="inner").dropna()
    d = (both["a"] - both["b"]).to_numpy(np.float64)
    out: dict[str, float | int] = {"n_seeds": int(d.size), "difference": float("nan")}
    out.update(ci_low=float("nan"), ci_high=float("nan"), p_value=float("nan"))
    if d.size == 0:
        return out
    out["difference"] = float(d.mean())
    if d.size >= 2 and _no_spread(d):
        out.update(ci_low=float(d.mean()), ci_high=float(d.mean()))
    elif d.size >= 2:
        res = stats.ttest_rel(both["a"], both["b"])
        ci = res.confidence_interval(level)
        out.update(ci_low=float(ci.low), ci_high=float(ci.high), p_value=float(res.pvalue))
    return out


def method_contrasts(
    trials: pd.DataFrame,
    metrics: Sequence[str] = ("consistency", "consistency_mean", "accuracy"),
    contrasts: Sequence[tuple[str, str]] | None = None,
) -> pd.DataFrame:
    """One row per student × task × metric × (method, reference) present in ``trials``:
    the seed-paired mean difference, its 95 % interval and the paired t-test p-value.

    ``contrasts`` default: :data:`CONTRASTS`, every weight variant of a method
    (``rcid-lm0.1``, base method in ``base_method``) against ``standard_kd``, and each RCID
    variant against the Informed FitNets variant of the same weights
    (:func:`matched_weight_contrasts`).
    """
    if contrasts is None:
        contrasts = list(CONTRASTS)
        if "base_method" in trials:
            variants = trials.loc[trials["method"] != trials["base_method"], "method"]
            contrasts += [(v, "standard_kd") for v in dict.fromkeys(variants)]
            contrasts += [c for c in matched_weight_contrasts(trials) if c not in contrasts]
    rows = []
    for (student, task), g in trials.groupby(["student", "task"], sort=True):
        by_method = {m: s.set_index("seed") for m, s in g.groupby("method")}
        for metric in (m for m in metrics if m in trials):
            for method, ref in contrasts:
                if method not in by_method or ref not in by_method:
                    continue
                diff = paired_difference(by_method[method][metric], by_method[ref][metric])
                rows.append(
                    {
                        "student": student,
                        "task": task,
                        "metric": metric,
                        "method": method,
                        "reference": ref,
                        **diff,
                    }
                )
    return pd.DataFrame(rows)


def matched_weight_contrasts(trials: pd.DataFrame) -> list[tuple[str, str]]:
    """``(rcid variant, informed_fitnets variant)`` for every pair of methods trained with
    the same ``lambda_kl`` and ``lambda_method``: the plan's step Informed FitNets → RCID at
    equal weight (contrast instead of state, nothing else changed)."""
    if not {"base_method", "lambda_kl", "lambda_method"} <= set(trials):
        return []
    w = trials.drop_duplicates("method").set_index("method")
    weights = ["lambda_kl", "lambda_method"]
    informed = w[w["base_method"] == "informed_fitnets"]
    return [
        (m, ref)
        for m, r in w[w["base_method"] == "rcid"].iterrows()
        for ref, q in informed.iterrows()
        if (q[weights] == r[weights]).all()
    ]


def adjust_p_values(
    table: pd.DataFrame, family: Sequence[str] = ("student", "task")
) -> pd.DataFrame:
    """``table`` with ``p_holm`` and ``p_bh``: its ``p_value`` adjusted over each family
    (default: one part of the study, every metric and contrast of a student × task), Holm
    and Benjamini–Hochberg. Rows without a p-value (one seed, no spread) are not counted
    in their family and get NaN."""
    out = table.copy()
    out["p_holm"], out["p_bh"] = np.nan, np.nan
    if out.empty:
        return out
    for _, g in out.groupby(list(family), sort=False):
        g = g[np.isfinite(g["p_value"].to_numpy(np.float64))]
        if g.empty:
            continue
        p = g["p_value"].to_numpy(np.float64)
        out.loc[g.index, "p_holm"] = holm_adjust(p)
        out.loc[g.index, "p_bh"] = bh_adjust(p)
    return out


def format_contrasts(table: pd.DataFrame, digits: int = 3) -> str:
    """Markdown: ``method − reference`` per student × task and metric, with the t-interval
    over seeds, and where the table has them (studies from this version on) the seed ×
    pair bootstrap interval and the Holm and BH adjusted p-values."""
    boot, adjusted = "boot_low" in table, "p_holm" in table
    head = ["student", "task", "metric", "difference", "mean [95 % CI, seeds]"]
    head += ["95 % CI, seeds × pairs"] * boot + ["p"] + ["p (Holm)", "p (BH)"] * adjusted
    lines = ["| " + " | ".join([*head, "seeds"]) + " |", "|" + "---|" * (len(head) + 1)]

    def interval(low: float, high: float) -> str:
        return f"[{low:+.{digits}f}, {high:+.{digits}f}]" if np.isfinite(low) else "–"

    def p_cell(p: float) -> str:
        return f"{p:.2g}" if np.isfinite(p) else "–"

    for _, r in table.iterrows():
        ci = f"{r.difference:+.{digits}f}"
        if np.isfinite(r.ci_low):
            ci += " " + interval(r.ci_low, r.ci_high)
        cells = [r.student, r.task, r.metric, f"{r.method} − {r.reference}", ci]
        if boot:
            cells.append(interval(r.boot_low, r.boot_high))
        cells.append(p_cell(r.p_value))
        if adjusted:
            cells += [p_cell(r.p_holm), p_cell(r.p_bh)]
        lines.append("| " + " | ".join([*cells, str(int(r.n_seeds))]) + " |")
    return "\n".join(lines)
