"""Study summary: per-method tables (mean ± std over seeds) and the two key scatter plots.

Reads the finished trials' ``metrics`` tables (never a model) and writes, into a run
directory: ``distill_trials`` (one row per trial), ``distill_summary`` (one row per student ×
task × method with ``<metric>_mean``, ``<metric>_std``, ``n_seeds``), ``distill_checkpoints``
and ``distill_purity`` (the teacher's side), plus static copies of the figures.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from mechscope.distill.config import METHODS
from mechscope.errors import InputError
from mechscope.report import Figure, Series, bars, scatter
from mechscope.runs import RunDir, has_table, read_table, write_table

METRICS = ("accuracy", "consistency", "perplexity", "ood_degradation")
GROUP = ["student", "task", "method"]


def collect_trials(study: Path) -> pd.DataFrame:
    """Metrics rows of every finished trial under ``study/trials``."""
    rows = [
        read_table(d, "metrics")
        for d in sorted((Path(study) / "trials").glob("*"))
        if has_table(d, "metrics")
    ]
    if not rows:
        raise InputError(
            f"expected finished trials under {Path(study) / 'trials'}; found none", field="study"
        )
    return pd.concat(rows, ignore_index=True)


def _method_order(df: pd.DataFrame) -> pd.DataFrame:
    order = {m: i for i, m in enumerate(METHODS)}
    return df.sort_values(
        ["student", "task", "method"], key=lambda c: c.map(order) if c.name == "method" else c
    )


def summary_table(trials: pd.DataFrame) -> pd.DataFrame:
    """Mean and sample standard deviation (ddof=1; NaN for one seed) over seeds."""
    agg = trials.groupby(GROUP)[list(METRICS)].agg(["mean", "std"])
    agg.columns = [f"{m}_{s}" for m, s in agg.columns]
    agg["n_seeds"] = trials.groupby(GROUP)["seed"].nunique()
    return _method_order(agg.reset_index()).reset_index(drop=True)


def format_summary(summary: pd.DataFrame, digits: int = 3) -> str:
    """A Markdown table with ``mean ± std`` cells (``–`` for std of a single seed)."""

    def cell(row: pd.Series, m: str) -> str:
        mean, std = row[f"{m}_mean"], row[f"{m}_std"]
        if not np.isfinite(mean):
            return "–"
        return f"{mean:.{digits}f} ± {std:.{digits}f}" if np.isfinite(std) else f"{mean:.{digits}f}"

    head = ["student", "task", "method", *METRICS, "seeds"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for _, r in summary.iterrows():
        cells = [
            r["student"],
            r["task"],
            r["method"],
            *(cell(r, m) for m in METRICS),
            str(int(r["n_seeds"])),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def method_bars(summary: pd.DataFrame, metric: str, title: str, y_title: str) -> Figure:
    """``metric`` per method (series) for each student × task (categories), whiskers ± 1 std
    over seeds (a spread of three runs, not a confidence interval)."""
    cells = summary[["student", "task"]].drop_duplicates().itertuples(index=False)
    cells = [(s, t) for s, t in cells]
    series = []
    for method in [m for m in METHODS if m in set(summary["method"])]:
        rows = summary[summary["method"] == method].set_index(["student", "task"])
        mean = np.array([rows[f"{metric}_mean"].get(c, np.nan) for c in cells], dtype=float)
        std = np.nan_to_num(
            np.array([rows[f"{metric}_std"].get(c, np.nan) for c in cells], dtype=float)
        )
        series.append(Series(method, mean, low=mean - std, high=mean + std))
    return bars(
        [f"{s} · {t}" for s, t in cells],
        series,
        title,
        "student · task",
        y_title,
        caption="Bars are means over seeds; whiskers span ± 1 standard deviation over seeds "
        "(with three seeds a spread, not a confidence interval).",
    )


def summary_figures(trials: pd.DataFrame) -> dict[str, Figure]:
    """Per-method bars of accuracy and consistency; consistency vs accuracy and vs OOD
    degradation, one point per trial."""
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
            "Pearson(Δ_T, Δ_S), pooled",
        ),
        "consistency-vs-accuracy": scatter(
            trials["consistency"],
            trials["accuracy"],
            "Causal consistency vs task accuracy (one point per trial)",
            "causal consistency (Pearson of Δ_T, Δ_S)",
            "task accuracy",
            text=text,
            groups=groups,
            caption="How to read this: a student far right reproduces the teacher's responses to "
            "patching at the causal checkpoints; a student high up answers the task. "
            "Students high but left reach the answer by another mechanism.",
        ),
    }
    ok = trials["ood_degradation"].notna()
    if ok.sum() >= 1:
        sub = trials[ok]
        figs["consistency-vs-ood"] = scatter(
            sub["consistency"],
            sub["ood_degradation"],
            "Causal consistency vs OOD degradation (one point per trial)",
            "causal consistency",
            "OOD degradation (test − OOD accuracy)",
            text=sub["trial"].astype(str).tolist(),
            groups=sub["method"].astype(str).tolist(),
            caption="How to read this: if keeping the teacher's mechanism makes a student robust, "
            "points fall from left to right (more consistency, less accuracy lost OOD).",
        )
    return figs


def teacher_tables(study: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Checkpoints (with teacher accuracy and counts) and information purity per task."""
    ckpts, purity = [], []
    for folder in sorted((Path(study) / "teacher").glob("*")):
        meta_path = folder / "meta.json"
        if not meta_path.is_file():
            continue
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        for rank, c in enumerate(meta["checkpoints"]):
            ckpts.append(
                {
                    "task": meta["task"],
                    "rank": rank + 1,
                    **c,
                    "teacher_test_accuracy": meta["info"].get("teacher_test_accuracy"),
                }
            )
        if (folder / "purity.parquet").is_file():
            p = pd.read_parquet(folder / "purity.parquet")
            p.insert(0, "task", meta["task"])
            purity.append(p)
    return (pd.DataFrame(ckpts), pd.concat(purity, ignore_index=True) if purity else pd.DataFrame())


def summarize_study(study: Path | str, out: RunDir | None = None) -> tuple[pd.DataFrame, str]:
    """Write the summary tables and figures into ``out`` (default: the study's own run dir).

    Returns the summary table and its Markdown rendering.
    """
    study = Path(study)
    out = out if out is not None else RunDir.open(study)
    ckpts, purity = teacher_tables(study)
    if not ckpts.empty:
        write_table(out, "distill_checkpoints", ckpts)
    if not purity.empty:
        write_table(out, "distill_purity", purity)
    if not (study / "trials").is_dir() and not ckpts.empty:  # a teacher-only study
        return pd.DataFrame(), "(teacher-only study: see the checkpoint and purity tables)"
    trials = collect_trials(study)
    summary = summary_table(trials)
    write_table(out, "distill_trials", trials)
    write_table(out, "distill_summary", summary)
    for stem, fig in summary_figures(trials).items():
        fig.save_static(out.figures_dir, f"distill-{stem}")
    return summary, format_summary(summary)
