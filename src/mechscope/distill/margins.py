"""The task's margin per method: the logit differences the page quotes, and whether each loss
term's step raises the margin.

One Markdown table from the summary (:func:`~mechscope.distill.method_table.summary_table`,
columns :data:`~mechscope.distill.method_table.MARGINS`), one row per student × task ×
method:

- the teacher's and the student's mean clean logit difference (correct − wrong answer) on
  the same test pairs (``teacher_ld``, ``student_ld``): the margins a reader compares, from
  one table;
- the student's margin on its last training batch (``train_margin_end``) and the step
  from which its logged curve stays near its end value (``margin_plateau_step``,
  :mod:`mechscope.distill.plateau`): near the last step, still rising (slow); early, at a
  margin near 0, stopped (never, in that many steps);
- over the steps whose gradients were logged, the mean cosine of each weighted term's step
  (``−∇ term``) with the margin's gradient, raw and after AdamW's per-parameter scaling
  (:mod:`mechscope.distill.gradients`). Below 0: that term's step lowers the margin, it
  works against the task; a method term near 0 neither helps nor hurts it directly.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from mechscope.distill.sweep import fmt_interval

#: (summary column, header) of the two tables' cells with an interval over seeds: the
#: margins, and each term's step against the margin (two tables, so each fits a page).
LD_CELLS = (
    ("student_ld", "student LD (test)"),
    ("train_margin_end", "student LD, last training batch"),
    ("margin_plateau_step", "training LD plateaus at step"),
)
COS_CELLS = (
    ("margin_cos_kl_mean", "cos(−∇ KL, ∇ LD)"),
    ("margin_cos_method_mean", "cos(−∇ method, ∇ LD)"),
    ("adam_margin_cos_kl_mean", "after AdamW: KL"),
    ("adam_margin_cos_method_mean", "after AdamW: method"),
)


def has_margins(summary: pd.DataFrame) -> bool:
    """Whether the summary's trials recorded a margin (studies run before it did not)."""
    return "student_ld_mean" in summary and bool(summary["student_ld_mean"].notna().any())


def format_margins(summary: pd.DataFrame) -> str:
    """Markdown: per student × task × method, the teacher's test LD (the same for every seed:
    the pairs are fixed) and the :data:`LD_CELLS`; then, where gradients were logged, the
    :data:`COS_CELLS`; cells ``mean [95 % interval over seeds]``. A column no trial has (the
    training curve's, without gradient logging) is left out."""
    lds = _table(summary, _present(summary, LD_CELLS), teacher=True, signed=False)
    cos = _present(summary, COS_CELLS)
    if not cos:
        return lds
    lead = "Each loss term's step against the margin (mean over the logged steps):"
    return "\n\n".join([lds, lead, _table(summary, cos, teacher=False, signed=True)])


def _present(
    summary: pd.DataFrame, cells: tuple[tuple[str, str], ...]
) -> tuple[tuple[str, str], ...]:
    return tuple(
        (c, h) for c, h in cells if f"{c}_mean" in summary and summary[f"{c}_mean"].notna().any()
    )


def _table(
    summary: pd.DataFrame, cells: tuple[tuple[str, str], ...], *, teacher: bool, signed: bool
) -> str:
    head = ["student · task", "method", *(["teacher LD (test)"] if teacher else [])]
    head += [*(h for _, h in cells), "seeds"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for _, r in summary.iterrows():
        row = [f"{r['student']} · {r['task']}", r["method"]]
        if teacher:
            value = r.get("teacher_ld_mean", np.nan)
            row.append(f"{value:.3f}" if np.isfinite(value) else "–")
        for col, _ in cells:
            mean = r.get(f"{col}_mean", np.nan)
            low, high = r.get(f"{col}_ci_low", np.nan), r.get(f"{col}_ci_high", np.nan)
            if col.endswith("_step"):  # a step number: no decimals
                row.append(_steps(mean, low, high))
            else:
                row.append(fmt_interval(mean, low, high, signed=signed))
        lines.append("| " + " | ".join([*row, str(int(r["n_seeds"]))]) + " |")
    return "\n".join(lines)


def _steps(mean: float, low: float, high: float) -> str:
    if not np.isfinite(mean):
        return "–"
    return f"{mean:.0f}" if not np.isfinite(low) else f"{mean:.0f} [{low:.0f}, {high:.0f}]"
