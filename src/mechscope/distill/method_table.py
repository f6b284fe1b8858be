"""The study's numbers per method: every metric's mean, spread and 95 % interval over seeds.

One row per student × task × method (:func:`summary_table`), in the note's method order
(:func:`method_order`). The summary (:mod:`mechscope.distill.summarize`) writes it as the
``distill_summary`` table and the figures (:mod:`mechscope.distill.figures`) draw it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from mechscope.distill.config import METHODS
from mechscope.distill.gradients import MARGIN_COSINES
from mechscope.distill.intervals import RANGES, mean_ci
from mechscope.distill.sweep import with_loss_columns

#: ``consistency``: Pearson pooled over every (checkpoint, pair) effect; ``consistency_mean``:
#: the mean of the per-checkpoint Pearsons. The pooled value is dominated by how the
#: checkpoints' mean effects compare (docs/distill.md, Pitfalls); read both.
METRICS = ("accuracy", "consistency", "consistency_mean", "perplexity", "ood_degradation")
#: Reference levels of consistency (:func:`~mechscope.distill.consistency.shuffled_consistency`,
#: :func:`~mechscope.distill.consistency.split_half_ceiling`), summarised like the metrics:
#: a consistency reads as "the mechanism kept" only above its shuffled-mapping baseline.
REFERENCES = ("consistency_shuffled", "consistency_mean_shuffled", "consistency_ceiling")
#: The task's margin and each loss term's step against it, summarised like the metrics
#: (:mod:`mechscope.distill.margins`): the teacher's and the student's mean clean logit
#: difference on the test pairs, the student's on its last training batch and the step its
#: curve plateaus at (:mod:`mechscope.distill.plateau`), and the mean cosines of
#: :data:`~mechscope.distill.gradients.MARGIN_COSINES` over the logged steps.
MARGINS = ("teacher_ld", "student_ld", "train_margin_end", "margin_plateau_step",
           *(f"{c}_mean" for c in MARGIN_COSINES))  # fmt: skip
GROUP = ["student", "task", "method"]


def method_order(df: pd.DataFrame) -> pd.DataFrame:
    """Methods in the note's order; a method's weight variants after it, by the weight ratio
    λ_method / λ_KL (the variant with the study's own weights first)."""
    order = {m: i for i, m in enumerate(METHODS)}
    base = df["base_method"] if "base_method" in df else df["method"]
    key = pd.DataFrame(
        {
            "student": df["student"],
            "task": df["task"],
            "base": base.map(order).fillna(len(order)),
            "variant": (df["method"] != base).astype(int),
            "ratio": (df["lambda_method"] / df["lambda_kl"]) if "lambda_kl" in df else 0.0,
        }
    )
    return df.loc[key.sort_values(list(key.columns), kind="stable").index]


def summary_table(trials: pd.DataFrame) -> pd.DataFrame:
    """Mean, sample standard deviation (ddof=1) and 95 % t-interval of the mean over seeds
    (NaN for one seed) of every metric. A seed whose value is undefined (NaN: e.g. the
    consistency of a checkpoint whose effects are constant) is left out of that metric's
    numbers, and ``<metric>_n`` says how many seeds they are computed from."""
    rows = []
    trials = with_loss_columns(trials)
    for key, g in trials.groupby(GROUP, sort=False):
        row = dict(zip(GROUP, key, strict=True))
        row.update({c: g[c].iloc[0] for c in ("base_method", "lambda_kl", "lambda_method")})
        for m in (*METRICS, *REFERENCES, *MARGINS):
            x = g[m].to_numpy(np.float64) if m in g else np.full(len(g), np.nan)
            low, high = mean_ci(x, bounds=RANGES.get(m))
            finite = x[np.isfinite(x)]
            row[f"{m}_mean"] = float(finite.mean()) if finite.size else float("nan")
            row[f"{m}_std"] = float(finite.std(ddof=1)) if finite.size > 1 else float("nan")
            row[f"{m}_ci_low"], row[f"{m}_ci_high"] = low, high
            row[f"{m}_n"] = int(finite.size)
        row["n_seeds"] = g["seed"].nunique()
        rows.append(row)
    return method_order(pd.DataFrame(rows)).reset_index(drop=True)
