"""Study summary: per-method tables with 95 % intervals over seeds, and the figures.

Reads the finished trials' tables (never a model) and writes, into a run directory:

- ``distill_trials`` (one row per trial);
- ``distill_summary`` (one row per student × task × method: ``<metric>_mean``, ``_std``,
  ``_ci_low``, ``_ci_high`` over seeds, ``n_seeds``; with the task's margins and the loss
  terms' steps against them, :mod:`mechscope.distill.margins`);
- ``distill_teacher`` (the teacher's accuracy on all test candidates and its perplexity:
  what the students' numbers are read against);
- ``distill_contrasts`` (seed-paired method differences, :mod:`mechscope.distill.intervals`,
  with the seed × pair bootstrap interval, :mod:`mechscope.distill.pair_effects`, and the
  Holm and BH adjusted p-values over each student × task);
- ``distill_checkpoint_consistency`` (per checkpoint: Δ_T, Δ_S and Pearson, mean over seeds);
- ``distill_checkpoints`` and ``distill_purity`` (the teacher's side);

plus static copies of the figures.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from mechscope.distill.experiments import experiment_tables
from mechscope.distill.figures import summary_figures
from mechscope.distill.intervals import adjust_p_values, format_contrasts, method_contrasts
from mechscope.distill.margins import format_margins, has_margins
from mechscope.distill.method_table import GROUP, METRICS, REFERENCES, method_order, summary_table
from mechscope.distill.pair_effects import with_pair_intervals
from mechscope.distill.result import DistillResult
from mechscope.errors import DamagedFileError, InputError
from mechscope.runs import RunDir, has_table, read_table, write_table
from mechscope.runs.integrity import REBUILD, Damaged, json_object, read_parquet

HEADERS = {
    "consistency": "consistency (pooled)",
    "consistency_mean": "consistency (per-ckpt mean)",
    "consistency_shuffled": "pooled, mapping shuffled",
    "consistency_mean_shuffled": "per-ckpt mean, mapping shuffled",
    "consistency_ceiling": "split-half ceiling",
}


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


def collect_pairs(study: Path) -> dict[str, pd.DataFrame]:
    """Per-pair tables (:func:`~mechscope.distill.pair_effects.pair_table`) of the finished
    trials that kept one, by trial name (trials of older studies have none)."""
    out = {}
    for d in sorted((Path(study) / "trials").glob("*")):
        if has_table(d, "metrics") and has_table(d, "pairs"):
            out[str(read_table(d, "metrics")["trial"].iloc[0])] = read_table(d, "pairs")
    return out


def _cell(mean: float, low: float, high: float, digits: int) -> str:
    if not np.isfinite(mean):
        return "–"
    if abs(mean) >= 1000:  # perplexities of broken students: no decimals, no interval
        return f"{mean:,.0f}"
    if not np.isfinite(low):
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def format_summary(
    summary: pd.DataFrame, teacher: pd.DataFrame | None = None, digits: int = 3
) -> str:
    """A Markdown table: ``mean [95 % CI low, high]`` over seeds per cell (the mean alone
    for one seed), with the teacher's row of each task first when ``teacher`` is given."""
    refs = [m for m in REFERENCES if f"{m}_mean" in summary and summary[f"{m}_mean"].notna().any()]
    shown = (*METRICS, *refs)
    head = ["student", "task", "method", *(HEADERS.get(m, m) for m in shown), "seeds"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for task in dict.fromkeys(summary["task"]):
        rows = teacher[teacher["task"] == task] if teacher is not None else pd.DataFrame()
        for _, t in rows.iterrows():
            cells = ["**teacher**", task, "–", f"{t.accuracy_raw:.{digits}f} (all candidates)"]
            cells += ["1 (itself)", "1 (itself)", f"{t.perplexity:.1f}", "–", "–"]
            cells += ["–"] * len(refs)
            lines.append("| " + " | ".join(cells) + " |")
        for _, r in summary[summary["task"] == task].iterrows():
            cells = [r["student"], r["task"], r["method"]]
            cells += [
                _cell(r[f"{m}_mean"], r[f"{m}_ci_low"], r[f"{m}_ci_high"], digits) for m in shown
            ]
            lines.append("| " + " | ".join([*cells, str(int(r["n_seeds"]))]) + " |")
    return "\n".join(lines)


def _teacher_metas(study: Path) -> list[dict]:
    metas = []
    for folder in sorted((Path(study) / "teacher").glob("*")):
        path = folder / "meta.json"
        if path.is_file():
            try:
                meta = json_object(path.read_bytes())
            except Damaged as why:
                raise DamagedFileError(path, str(why), REBUILD) from None
            meta["folder"] = folder
            metas.append(meta)
    return metas


def teacher_tables(study: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Checkpoints (with the teacher's accuracy and its mean patch effect on the test pairs)
    and information purity per task."""
    ckpts, purity = [], []
    for meta in _teacher_metas(study):
        info = meta["info"]
        effects = info.get("test_effects", {})
        for rank, c in enumerate(meta["checkpoints"]):
            key = f"L{c['layer']}:{c['position']}"
            ckpts.append(
                {
                    "task": meta["task"],
                    "rank": rank + 1,
                    **c,
                    "teacher_delta_test": effects.get(key, np.nan),
                    "teacher_clean_ld_test": info.get("test_clean_ld", np.nan),
                    "teacher_test_accuracy": info.get("teacher_test_accuracy"),
                }
            )
        path = meta["folder"] / "purity.parquet"
        if path.is_file():
            try:
                p = read_parquet(path)
            except Damaged as why:
                raise DamagedFileError(path, str(why), REBUILD) from None
            p.insert(0, "task", meta["task"])
            purity.append(p)
    return (pd.DataFrame(ckpts), pd.concat(purity, ignore_index=True) if purity else pd.DataFrame())


def teacher_summary(study: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per task, the teacher's accuracy on every test candidate (the kept pairs are all
    correct by construction) and its perplexity; and every checkpoint candidate the effect
    screen tested, with its relative patch effect."""
    rows, screen = [], []
    for meta in _teacher_metas(study):
        info = meta["info"]
        rows.append(
            {
                "task": meta["task"],
                "accuracy_raw": info["counts"]["test"]["teacher_accuracy_raw"],
                "perplexity": info.get("teacher_perplexity", np.nan),
                "n_test": len(meta["test"]["pairs"]),
                "n_train": len(meta["train"]["pairs"]),
            }
        )
        screen += [{"task": meta["task"], **r} for r in info.get("screen", [])]
    return pd.DataFrame(rows), pd.DataFrame(screen)


def checkpoint_consistency(study: Path) -> pd.DataFrame:
    """Per student × task × method × checkpoint: mean over seeds of the teacher's and the
    student's mean patch effect and of the per-checkpoint Pearson (the trials'
    ``consistency`` tables)."""
    frames = []
    for d in sorted((Path(study) / "trials").glob("*")):
        if has_table(d, "metrics") and has_table(d, "consistency"):
            m = read_table(d, "metrics").iloc[0]
            c = read_table(d, "consistency")
            frames.append(c.assign(**{k: m[k] for k in (*GROUP, "seed")}))
    if not frames:
        return pd.DataFrame()
    df = pd.concat(frames, ignore_index=True)
    keys = [*GROUP, "checkpoint", "student_layer"]
    cols = ["mean_delta_teacher", "mean_delta_student", "consistency"]
    out = df.groupby(keys, sort=False)[cols].mean().reset_index()
    return method_order(out).reset_index(drop=True)


#: Headings of the Markdown sections :func:`summarize_study` returns, in order.
SECTIONS = {
    "summary": "Summary (mean over seeds [95 % interval])",
    "contrasts": "Method differences, paired by seed",
    "margins": "The task's margin, and each loss term's step against it",
    "sweep": "Loss weights against KD",
    "robustness": "Consistency against OOD degradation (experiment 3)",
    "purity": "Information purity of the teacher's states (experiment 4)",
}


def summarize_study(study: Path | str, out: RunDir | None = None) -> tuple[pd.DataFrame, str]:
    """Write the summary tables and figures into ``out`` (default: the study's own run dir).

    Returns the summary table and its Markdown rendering: one ``###`` section per
    :data:`SECTIONS` entry the study has (:func:`summary_sections`).
    """
    summary, sections = summary_sections(study, out)
    text = "\n\n".join(f"### {SECTIONS[k]}\n\n{v}" for k, v in sections.items())
    return summary, text


def summary_sections(
    study: Path | str, out: RunDir | None = None
) -> tuple[pd.DataFrame, dict[str, str]]:
    """:func:`summarize_study`'s work: the tables and figures, and the Markdown per section."""
    study = Path(study)
    out = out if out is not None else RunDir.open(study)
    ckpts, purity = teacher_tables(study)
    teacher, screen = teacher_summary(study)
    for name, table in (
        ("distill_checkpoints", ckpts),
        ("distill_purity", purity),
        ("distill_teacher", teacher),
        ("distill_screen", screen),
    ):
        if not table.empty:
            write_table(out, name, table)
    if not (study / "trials").is_dir() and not ckpts.empty:  # a teacher-only study
        text, _ = experiment_tables(study, None, purity, out)
        return pd.DataFrame(), text
    trials = collect_trials(study)
    summary = summary_table(trials)
    contrasts = method_contrasts(trials)
    if not contrasts.empty:
        contrasts = with_pair_intervals(contrasts, trials, collect_pairs(study))
        contrasts = adjust_p_values(contrasts)
    write_table(out, "distill_trials", trials)
    write_table(out, "distill_summary", summary)
    if not contrasts.empty:
        write_table(out, "distill_contrasts", contrasts)
    per_ckpt = checkpoint_consistency(study)
    if not per_ckpt.empty:
        write_table(out, "distill_checkpoint_consistency", per_ckpt)
    figs = summary_figures(DistillResult(trials, study))
    more, exp_figs = experiment_tables(study, trials, purity, out)
    for stem, fig in {**figs, **exp_figs}.items():
        fig.save_static(out.figures_dir, f"distill-{stem}")
    sections = {"summary": format_summary(summary, teacher if not teacher.empty else None)}
    if not contrasts.empty:
        sections["contrasts"] = format_contrasts(contrasts)
    if has_margins(summary):
        sections["margins"] = format_margins(summary)
    return summary, {**sections, **more}
