"""The study's figures: per-method bars with 95 % intervals over seeds, and per-trial scatters.

Functions of the study's result (its trials table, never a model), so ``mechscope report``
rebuilds them from the ``distill_trials`` table.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from mechscope.distill.config import METHODS
from mechscope.distill.method_table import summary_table
from mechscope.distill.result import DistillResult
from mechscope.distill.robustness import MEASURES, distilled, robustness_table
from mechscope.report import Figure, Series, bars, scatter


def method_bars(summary: pd.DataFrame, metric: str, title: str, y_title: str) -> Figure:
    """``metric`` per method (series) for each student × task (categories), whiskers the 95 %
    t-interval of the mean over seeds (:func:`mechscope.distill.intervals.mean_ci`); a cell
    of one seed has no interval and gets no whisker."""
    cells = [(s, t) for s, t in summary[["student", "task"]].drop_duplicates().to_numpy()]
    series = []
    for method in [m for m in METHODS if m in set(summary["method"])]:
        rows = summary[summary["method"] == method].set_index(["student", "task"])

        def col(name: str, rows: pd.DataFrame = rows) -> np.ndarray:
            return np.array([rows[name].get(c, np.nan) for c in cells], dtype=float)

        mean, low, high = col(f"{metric}_mean"), col(f"{metric}_ci_low"), col(f"{metric}_ci_high")
        series.append(Series(method, mean, low=low, high=high))  # NaN bounds: no whisker
    return bars(
        [f"{s} · {t}" for s, t in cells],
        series,
        title,
        "student · task",
        y_title,
        caption="Bars are means over training seeds "
        + _seeds_words(summary)
        + " The task's pairs are fixed. 'untrained' is the student before distillation.",
    )


def _seeds_words(summary: pd.DataFrame) -> str:
    """What the whiskers are, or why there are none, from the seeds per cell."""
    seeds = summary["n_seeds"].astype(int)
    if seeds.max() < 2:
        return "(n = 1 seed per bar, so no interval is drawn)."
    words = "(whiskers: the 95 % Student-t interval of the mean over seeds"
    if seeds.min() < 2:
        words += "; bars from one seed have none"
    return f"{words}; {seeds.min()}–{seeds.max()} seeds per bar)."


CONSISTENCY = "causal consistency (Pearson r, teacher vs student)"


def summary_figures(result: DistillResult) -> dict[str, Figure]:
    """Per-method bars of accuracy and consistency; consistency vs accuracy and vs OOD
    degradation, one point per trial."""
    trials = result.trials
    summary = summary_table(trials)
    text = trials["trial"].astype(str).tolist()
    groups = trials["method"].astype(str).tolist()
    figs = {
        "accuracy-by-method": method_bars(
            summary, "accuracy", "Task accuracy by method (chance = 0.5)", "test accuracy"
        ),
        "consistency-by-method": method_bars(
            summary,
            "consistency",
            "Causal consistency by method",
            "Pearson r, teacher vs student (pooled)",
        ),
        "consistency-per-checkpoint-by-method": method_bars(
            summary,
            "consistency_mean",
            "Causal consistency by method, mean over checkpoints",
            "Pearson r, mean over checkpoints",
        ),
        "consistency-vs-accuracy": scatter(
            trials["consistency"],
            trials["accuracy"],
            "Causal consistency vs task accuracy (one point per trial)",
            CONSISTENCY,
            "task accuracy",
            text=text,
            groups=groups,
            caption="How to read this: a student far right reproduces the teacher's responses to "
            "patching at the causal checkpoints; a student high up answers the task. "
            "Students high but left reach the answer by another mechanism.",
        ),
    }
    robust = robustness_figure(trials)
    if robust is not None:
        figs["consistency-vs-ood"] = robust
    return figs


def robustness_figure(trials: pd.DataFrame) -> Figure | None:
    """Experiment 3: per-checkpoint consistency against OOD degradation, one point per
    distilled student, with Pearson's r and its intervals per task in the caption."""
    sub = distilled(trials)
    sub = sub[sub["consistency_mean"].notna()]
    if sub.empty:
        return None
    table = robustness_table(trials)
    table = table[table["measure"] == MEASURES["consistency_mean"]]
    stats = "; ".join(
        f"{r.task}: r = {r.r:+.2f}, 95 % CI [{r.fisher_low:+.2f}, {r.fisher_high:+.2f}] "
        f"(Fisher z), [{r.cluster_low:+.2f}, {r.cluster_high:+.2f}] (bootstrap over methods, "
        f"then students), n = {r.n} in {r.n_methods} methods"
        for r in table.itertuples()
        if np.isfinite(r.r)
    )
    return scatter(
        sub["consistency_mean"],
        sub["ood_degradation"],
        "Causal consistency vs OOD degradation (one point per distilled student)",
        "causal consistency (mean over checkpoints)",
        "OOD degradation (test − OOD accuracy)",
        text=sub["trial"].astype(str).tolist(),
        groups=sub["method"].astype(str).tolist(),
        caption="How to read this: if keeping the teacher's mechanism makes a student robust, "
        "points fall from left to right (more consistency, less accuracy lost OOD). "
        + (f"Pearson {stats}." if stats else "Too few students for a correlation."),
    )
